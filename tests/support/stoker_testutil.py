"""Paths and helpers every pytest suite under tests/ shares (no pytest
fixtures here: those are in stoker_fixtures.py)."""

import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("STOKER_BUILD") or REPO / "build").resolve()
PYDIR = REPO / "client" / "python"
# $STOKER_STOKERD: another daemon binary (a ThreadSanitizer build) with this
# build's library and helpers.
STOKERD = Path(os.environ.get("STOKER_STOKERD") or BUILD / "stokerd").resolve()
STOKERCTL = BUILD / "stokerctl"
VERSION = (REPO / "VERSION").read_text().strip()
CLIENT_PROC = Path(__file__).resolve().parent / "client_proc.py"

STATS_KEYS = {"images_per_second", "images_served", "batches_served", "decode_errors", "workers",
              "worker_busy", "clients"}
CLIENT_KEYS = {"pid", "rank", "batches", "wait_seconds"}
# torchvision.datasets.folder.IMG_EXTENSIONS: what ImageFolder lists.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def child_env():
    env = dict(os.environ)
    env["STOKER_BUILD"] = str(BUILD)
    env["PYTHONPATH"] = os.pathsep.join([str(PYDIR)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def expected_samples(root):
    """torchvision ImageFolder order, computed from the tree: [(path, label)]."""
    root = Path(root)
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for label, cls in enumerate(classes):
        for dirpath, dirnames, files in sorted(os.walk(root / cls, followlinks=True)):
            dirnames.sort()
            for f in sorted(files):
                if f.lower().endswith(IMG_EXTENSIONS):
                    out.append((os.path.join(dirpath, f), label))
    return out


def list_samples(list_file):
    """Samples of a `path label` list file, in line order."""
    base = Path(list_file).parent
    out = []
    for line in Path(list_file).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path, label = line.rsplit(None, 1)
        out.append((str(base / path), int(label)))
    return out


def digest(a):
    return hashlib.sha1(a.tobytes()).hexdigest()


def read_epoch(loader, keep_images=False):
    """Iterate one pass; return a dict of what came out (copies, not views)."""
    r = {"indices": [], "labels": [], "hashes": [], "counts": [], "batch_index": [], "epochs": [],
         "replaced": 0, "images": [] if keep_images else None, "shape": None}
    for b in loader:
        imgs, labels = b
        r["shape"] = imgs.shape[1:]
        r["indices"] += [int(i) for i in b.indices]
        r["labels"] += [int(x) for x in labels]
        r["hashes"] += [digest(im) for im in imgs]
        r["counts"].append(len(labels))
        r["batch_index"].append(b.index)
        r["epochs"].append(b.epoch)
        r["replaced"] += b.replaced
        if keep_images:
            r["images"].append(imgs.copy())
    return r


def spawn_client(socket, dataset, mode="epoch", batches=0, **opts):
    """Start client_proc.py in its own process (its own Loader)."""
    arg = json.dumps({"socket": str(socket), "dataset": str(dataset), "mode": mode, "batches": batches,
                      "opts": opts})
    return subprocess.Popen([sys.executable, str(CLIENT_PROC), arg], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env(), text=True)


def finish_client(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"client exited {proc.returncode}:\n{err}"
    return json.loads(out)


def read_line(proc, attempts=600, step=0.1):
    """First stdout line of proc, waiting a bounded number of steps."""
    for _ in range(attempts):
        r, _, _ = select.select([proc.stdout], [], [], step)
        if r:
            return proc.stdout.readline()
        if proc.poll() is not None:
            break
    raise AssertionError(f"client printed nothing (rc={proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}")


def assert_none_decode(paths):
    """Each file must fail to decode with Pillow (the generators' corrupt files)."""
    from PIL import Image

    for p in paths:
        try:
            Image.open(p).load()
        except Exception:
            continue
        raise AssertionError(f"{p} decodes")


def cuda_driver_present():
    """Is there a CUDA driver (libcuda.so.1) here? Then the GPU tests
    (tests/gpu/run.sh) cover CUDA delivery, and its refusals cannot be."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def ultralytics_offline(build=BUILD):
    """Before ultralytics is imported: its settings file goes in the build
    tree `build`, not the user's home, and nothing is downloaded, checked
    for updates or reported (the test machines have no internet)."""
    os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(build) / "ultralytics-config"))
    os.environ["YOLO_OFFLINE"] = "1"


def client_for_users(dest):
    """The Python binding and libstoker copied under `dest` (made readable to
    every user), for client processes run as other users, who may not reach
    the checkout (a CI clone under root's 0700 home): their environment."""
    dest = Path(dest)
    shutil.copytree(PYDIR / "stoker", dest / "py" / "stoker",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so*", "stoker.libs"))
    (dest / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copy(BUILD / "libstoker.so.0", dest / "lib" / "libstoker.so.0")
    for root, dirs, files in os.walk(dest):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644 if not f.endswith(".so.0") else 0o755)
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(dest / "py"), "STOKER_BUILD": str(dest / "lib"),
            "STOKER_AUTOSTART": "0", "HOME": "/nonexistent"}


def exif_tagged(im, o, fmt="JPEG"):
    """A PIL image saved as fmt with EXIF orientation o (bytes): what a
    camera or phone writes (test_detect_exif, tests/detect_parity)."""
    import io

    from PIL import Image

    ex = Image.Exif()
    ex[274] = o
    b = io.BytesIO()
    kw = dict(quality=95) if fmt == "JPEG" else dict(lossless=True) if fmt == "WEBP" else {}
    im.save(b, fmt, exif=ex, **kw)
    return b.getvalue()


class OneSampleDataset:
    """A data set of one sample (its labels dict), for the transforms that draw a partner from
    their data set, such as Ultralytics' CopyPaste(mode="mixup"): the partner is that sample."""

    def __init__(self, labels):
        self.labels = labels

    def __len__(self):
        return 1

    def get_image_and_label(self, index):
        return self.labels
