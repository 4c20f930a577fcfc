#!/usr/bin/env python3
"""YOLO detection loading (issue 5): stoker against Ultralytics' own
training data loader, in one run, on the same cores and the same files.

Builds (once, cached under bench/out/yolo/) a real-photo YOLO data set with
scripts/mkyolo.py --kind photos, warms the page cache, then measures

  - for context, the JPEG decode limit of these files (bench/jpeg_limit:
    full libjpeg-turbo decode, one thread, x cores),
  - stoker mosaic-640: transform="mosaic" (Mosaic + RandomPerspective +
    HSV + flips, Ultralytics' defaults), batch 16, stokerd --workers cores,
  - Ultralytics' train loader: build_yolo_dataset(cfg, ..., mode="train")
    + build_dataloader(..., workers=cores), imgsz 640, mosaic 1.0, every
    other hyper-parameter at its default (cache=False: each worker keeps a
    buffer of recently loaded images that mosaic partners are drawn from),
  - stoker letterbox-640 against Ultralytics' val-mode loader with
    rect=False (LetterBox(640, scaleup=False), no random draws),
  - extras: stoker mosaic with the daemon's decoded cache tier
    (cache_decoded_side), against Ultralytics' train loader with
    cache="ram" (both keep decoded images in memory); stoker mosaic with
    resample="cv2", letterbox with resample="antialias", and letterbox on
    the portable cv2 resize (STOKER_RESIZE_ISA=scalar: the SIMD kernels'
    before, in the same run), letterbox and mosaic on the AVX2 kernels
    only (STOKER_RESIZE_ISA=avx2: where AVX-512 is the default, its
    before).

  - segment and pose (issue 21), on bench/mkinstances.py's real-photo
    scenes (512-704 px, exact polygons and keypoints; --instance-images):
    stoker's training loader for StokerSegmentationTrainer /
    StokerPoseTrainer (stoker.ultralytics.YOLOLoader: mosaic with overlap
    masks at mask_ratio 4, or keypoints with flip_idx; Ultralytics' batch
    dicts) against Ultralytics' build_yolo_dataset(task=segment / pose) +
    build_dataloader at the same worker count; each with the peak RSS and
    PSS summed over all its processes (the peer, its DataLoader workers,
    its stokerd), sampled every 0.2 s. Goals: >= 4x Ultralytics' images/s
    at <= 0.5x its peak PSS.

The table gives each row's share of the decode limit and stoker's rate
per worker (issue 22's goals are stated against both).

Rows run round robin --repeat times; a pass during which other processes
took over 10% of the CPUs runs again (--retries), and each row keeps its
best quiet pass, as bench/run.py does; after --budget seconds (default
600) nothing is repeated or retried. About 9 minutes on 2 quiet cores.

Each row runs in its own interpreter (this file, `detect.py peer ...`), for
one untimed warm-up epoch and then whole epochs until --epochs and
--seconds; every consumer turns each batch's images and boxes into torch
tensors (as Ultralytics' collate hands them over) and reads a slice. Box
statistics of every batch are checked (layout, ranges) and reported per
row. Prints a table with the stoker / Ultralytics ratios and writes
bench/out/detect.json. A measurement, not a test: nothing asserts a target.

    python3 bench/detect.py [--images 512] [--cores N] [--seconds 20] [--repeat 2]
    make bench-detect BENCH_DETECT_ARGS="--images 1024"
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import run
from _common import log_to_stderr, measure, result, unavailable

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE_SIZE = 640


# --------------------------------------------------------------------------
# peers: each runs in its own interpreter and prints `RESULT {json}`


class Consumer:
    """Takes a peer's batches as a trainer would and checks their boxes.

    Every batch arrives as torch tensors (images, image index, class, xywh),
    as Ultralytics' collate hands them over; a slice of each is read. Boxes
    must be normalised xywh inside the image, w and h > 0, the image index
    inside the batch and the class inside [0, nc) (nc 0: not checked)."""

    def __init__(self, nc):
        self.nc, self.images, self.boxes, self.problems, self.first = nc, 0, 0, [], None

    def epoch(self, batches, expected, epoch):
        n = 0
        for images, idx, cls, xywh in batches:
            if self.first is None:
                self.first = {"dtype": str(images.dtype), "shape": list(images.shape[1:]),
                              "boxes_dtype": str(xywh.dtype), "box_columns": 2 + xywh.shape[1]}
            self.check(idx.numpy(), cls.numpy().reshape(-1), xywh.numpy(), images.shape[0])
            n += images.shape[0]
            float(images[-1].reshape(-1)[:64].sum()) + float(xywh[-1:].sum())
        if n != expected:
            raise RuntimeError(f"epoch {epoch}: {n} images, expected {expected}")
        return n

    def check(self, idx, cls, xywh, batch):
        import numpy as np
        self.images += batch
        self.boxes += len(idx)
        if not len(idx) or len(self.problems) >= 5:
            return
        checks = [("image index outside the batch", (idx < 0) | (idx >= batch) | (idx != np.round(idx))),
                  ("class outside [0, nc)", (cls < 0) | (cls >= (self.nc or np.inf)) | (cls != np.round(cls))),
                  ("box centre outside [0, 1]", ((xywh[:, :2] < 0) | (xywh[:, :2] > 1)).any(axis=1)),
                  ("box w or h not in (0, 1]", ((xywh[:, 2:] <= 0) | (xywh[:, 2:] > 1 + 1e-6)).any(axis=1)),
                  ("box edge outside the image", ((xywh[:, :2] - xywh[:, 2:] / 2 < -1e-3)
                                                  | (xywh[:, :2] + xywh[:, 2:] / 2 > 1 + 1e-3)).any(axis=1)),
                  ("NaN or inf", ~np.isfinite(xywh).all(axis=1))]
        for what, bad in checks:
            if bad.any():
                self.problems.append(f"{what}: {int(bad.sum())} of {len(idx)} boxes in one batch, "
                                     f"e.g. {[float(v) for v in xywh[bad.argmax()]]}")

    def fields(self):
        return {"boxes_per_image": round(self.boxes / max(1, self.images), 3), "box_problems": self.problems,
                "output": self.first}


def pss(pid):
    """Proportional set size in bytes (shared pages split between their users)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return None


def descendants(pid):
    """pid's child processes, their children, ..."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                out += kids
                todo += kids
        except (OSError, ValueError):
            pass
    return out


class PeakMemory:
    """Samples, every `every` seconds, the RSS and PSS summed over this
    process, its descendants (a DataLoader's workers) and `extra` pids (the
    stokerd it reads from); keeps the largest sums. PSS splits the pages
    processes share (forked workers' copy-on-write pages, the ring mapped by
    daemon and client) between them, so its sum counts each page once; RSS
    counts a shared page in every process that maps it. The loader's own
    share: the peak PSS less the consumer's before the loader was built.
    Also the CPU time (user + system) all of them spent meanwhile: per image
    a figure other work on the machine does not distort as it does images/s."""

    def __init__(self, extra=(), every=0.2):
        import threading
        self.extra, self.every, self.peak_pss, self.peak_rss, self.samples = list(extra), every, 0, 0, 0
        self.cpu, self.cpu0 = {}, {}  # pid -> CPU seconds (user + system) last seen, and at the start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def rollup(pid):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                got = {}
                for line in f:
                    k, _, v = line.partition(":")
                    if k in ("Rss", "Pss"):
                        got[k] = int(v.split()[0]) * 1024
                return got.get("Rss", 0), got.get("Pss", 0)
        except (OSError, ValueError, IndexError):
            return 0, 0

    @staticmethod
    def cpu_seconds(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        except (OSError, ValueError, IndexError):
            return None

    def sample(self):
        pids = [os.getpid()] + descendants(os.getpid()) + self.extra
        for p in pids:
            c = self.cpu_seconds(p)
            if c is not None:
                self.cpu[p] = c
        rss, pss_ = (sum(x) for x in zip(*(self.rollup(p) for p in pids)))
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss_)
        self.samples += 1

    def _run(self):
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self):
        # the consumer alone (interpreter, torch, Ultralytics imported), before any loader exists
        self.baseline_pss = self.rollup(os.getpid())[1]
        for p in [os.getpid()] + self.extra:
            self.cpu0[p] = self.cpu_seconds(p) or 0.0
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()

    def fields(self):
        return {"peak_pss_bytes": self.peak_pss, "peak_rss_bytes": self.peak_rss, "memory_samples": self.samples,
                "baseline_pss_bytes": self.baseline_pss, "loader_pss_bytes": self.peak_pss - self.baseline_pss,
                "cpu_seconds": sum(c - self.cpu0.get(p, 0.0) for p, c in self.cpu.items())}


class InstanceConsumer(Consumer):
    """Takes Ultralytics batch dicts (segment or pose), as its trainer's
    preprocess_batch takes them: boxes checked as Consumer does; segment:
    masks [B, h, w] whose values are the image's object numbers (overlap
    masks: 0 background, 1..n); pose: keypoints [N, points, 3], one row per
    box, visible points inside the image."""

    def __init__(self, nc, task):
        super().__init__(nc)
        self.task, self.masked = task, 0

    def epoch(self, batches, expected, epoch):
        n = 0
        for b in batches:
            images, idx = b["img"], b["batch_idx"]
            if self.first is None:
                self.first = {"dtype": str(images.dtype), "shape": list(images.shape[1:])}
                if self.task == "segment":
                    self.first["masks"] = [str(b["masks"].dtype), list(b["masks"].shape[1:])]
                else:
                    self.first["keypoints"] = [str(b["keypoints"].dtype), list(b["keypoints"].shape[1:])]
            self.check(idx.numpy(), b["cls"].numpy().reshape(-1), b["bboxes"].numpy(), images.shape[0])
            if self.task == "segment":
                self.check_masks(b["masks"], idx, images.shape[0])
            else:
                self.check_keypoints(b["keypoints"], len(idx))
            n += images.shape[0]
            # a slice of the last image, read in place: stoker's channels_last
            # images would be copied whole by a reshape (Ultralytics' not)
            float(images[-1, :, 0, :64].sum())
        if n != expected:
            raise RuntimeError(f"epoch {epoch}: {n} images, expected {expected}")
        return n

    def check_masks(self, masks, idx, batch):
        import torch
        if masks.shape[0] != batch:
            self.problems.append(f"masks {list(masks.shape)} for a batch of {batch}")
            return
        per = torch.bincount(idx.long(), minlength=batch)
        top = masks.reshape(batch, -1).max(1).values.long()
        self.masked += int((top > 0).sum())
        if (top > per).any() and len(self.problems) < 5:
            self.problems.append(f"a mask numbers more objects than its image has ({top.tolist()} > {per.tolist()})")

    def check_keypoints(self, kpts, boxes):
        if kpts.shape[0] != boxes and len(self.problems) < 5:
            self.problems.append(f"{kpts.shape[0]} keypoint rows for {boxes} boxes")
        vis = kpts[..., 2] > 0
        xy = kpts[..., :2][vis]
        if len(xy) and ((xy < 0) | (xy > 1)).any() and len(self.problems) < 5:
            self.problems.append("a visible keypoint outside the image")

    def fields(self):
        return dict(super().fields(), images_with_masks=self.masked if self.task == "segment" else None)


def instance_cfg(a):
    """Ultralytics' training arguments for a segment or pose row (its defaults otherwise)."""
    from ultralytics.cfg import get_cfg
    return get_cfg(overrides={"task": a.task, "imgsz": IMAGE_SIZE, "mosaic": 1.0, "batch": a.batch_size,
                              "workers": a.cores, "cache": False, "rect": False, "seed": 0})


def peer_ultralytics_instances(a):
    """Ultralytics' segment or pose training loader, as its trainer builds it."""
    log = log_to_stderr(f"ultralytics {a.task}")
    try:
        import torch
        import ultralytics
        from ultralytics.data import build_dataloader, build_yolo_dataset
        from ultralytics.data.utils import check_det_dataset
    except ImportError as e:
        unavailable("not installed", f"{e} (bench/install-peers.sh)")
    torch.manual_seed(0)
    cfg = instance_cfg(a)
    data = check_det_dataset(a.yaml)
    with PeakMemory() as mem:
        ds = build_yolo_dataset(cfg, data["train"], a.batch_size, data, mode="train", rect=False, stride=32)
        dl = build_dataloader(ds, a.batch_size, a.cores, shuffle=True, device="cpu")
        take = InstanceConsumer(len(data["names"]), a.task)
        r = measure(lambda epoch: take.epoch(dl, len(ds), epoch), a.epochs, a.seconds, log)
        workers = [w.pid for w in getattr(dl.iterator, "_workers", [])]
    r.update(**take.fields(), **mem.fields(), cpu_ms_per_image=1000 * mem.fields()["cpu_seconds"] / take.images,
             batch_size=a.batch_size, workers_requested=a.cores,
             num_workers=dl.num_workers, worker_processes=len(workers), cache=ds.cache,
             buffer_images_per_worker=getattr(ds, "max_buffer_length", None),
             versions={"ultralytics": ultralytics.__version__, "torch": torch.__version__})
    dl.close()
    result(**r)


def peer_stoker_instances(a):
    """stoker's segment or pose training loader: stoker.ultralytics.YOLOLoader,
    the loader StokerSegmentationTrainer / StokerPoseTrainer train from
    (batch dicts with Ultralytics' keys: masks, keypoints)."""
    log = log_to_stderr(f"stoker {a.task}")
    try:
        import torch  # noqa: F401
        from ultralytics.data.utils import check_det_dataset
        from stoker.ultralytics import YOLOLoader
    except ImportError as e:
        unavailable("not installed", f"{e} (run make; PYTHONPATH=client/python; bench/install-peers.sh)")
    cfg = instance_cfg(a)
    data = check_det_dataset(a.yaml)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    with PeakMemory(extra=[a.daemon_pid] if a.daemon_pid else []) as mem:
        try:
            dl = YOLOLoader(data["train"], cfg, data, batch_size=a.batch_size, mode="train", socket=a.socket)
        except ValueError as e:
            unavailable("not available", f"stoker.ultralytics.YOLOLoader(task={a.task}, mode=train): {e}")
        take = InstanceConsumer(len(data["names"]), a.task)

        def run_epoch(epoch):
            dl.set_epoch(epoch)
            return take.epoch(dl, len(dl.sampler), epoch)

        r = measure(run_epoch, a.epochs, a.seconds, log)
    r.update(**take.fields(), **mem.fields(), cpu_ms_per_image=1000 * mem.fields()["cpu_seconds"] / take.images,
             batch_size=a.batch_size)
    dl.close()
    result(**r)


def peer_ultralytics(a):
    """Ultralytics' training (or val-mode) loader, built as its trainer builds it."""
    log = log_to_stderr(f"ultralytics {a.mode}")
    try:
        import cv2
        import torch
        import ultralytics
        from ultralytics.cfg import get_cfg
        from ultralytics.data import build_dataloader, build_yolo_dataset
        from ultralytics.data.utils import check_det_dataset
    except ImportError as e:
        unavailable("not installed", f"{e} (bench/install-peers.sh)")

    torch.manual_seed(0)
    cfg = get_cfg(overrides={"imgsz": IMAGE_SIZE, "mosaic": 1.0, "batch": a.batch_size, "workers": a.cores,
                             "cache": a.cache or False, "rect": False, "seed": 0})
    data = check_det_dataset(a.yaml)
    mode = "train" if a.mode == "train" else "val"
    # As DetectionTrainer.build_dataset, but rect=False for val: square 640
    # letterboxed batches, the same output as stoker's "letterbox".
    ds = build_yolo_dataset(cfg, data["train"], a.batch_size, data, mode=mode, rect=False, stride=32)
    dl = build_dataloader(ds, a.batch_size, a.cores, shuffle=True, device="cpu")
    take = Consumer(len(data["names"]))
    run_epoch = lambda epoch: take.epoch(  # noqa: E731
        ((b["img"], b["batch_idx"], b["cls"], b["bboxes"]) for b in dl), len(ds), epoch)
    r = measure(run_epoch, a.epochs, a.seconds, log)
    workers = [w.pid for w in getattr(dl.iterator, "_workers", [])]
    mem = [pss(os.getpid())] + [pss(p) for p in workers]
    r.update(take.fields(), batch_size=a.batch_size,
             workers_requested=a.cores, num_workers=dl.num_workers, worker_processes=len(workers),
             cache=ds.cache, buffer_images_per_worker=getattr(ds, "max_buffer_length", None),
             pss_bytes=sum(m for m in mem if m), versions={"ultralytics": ultralytics.__version__,
                                                            "torch": torch.__version__, "opencv": cv2.__version__})
    log(f"{dl.num_workers} workers ({len(workers)} processes), cache={ds.cache}"
        + (f", mosaic buffer {ds.max_buffer_length} images per worker" if ds.cache is None else ""))
    dl.close()
    result(**r)


def peer_stoker(a):
    """stoker's detection loader through the Python binding."""
    log = log_to_stderr(f"stoker {a.transform}")
    try:
        import torch
        import stoker
    except ImportError as e:
        unavailable("not installed", f"{e} (run make; PYTHONPATH=client/python)")
    kw = dict(socket=a.socket, batch_size=a.batch_size, task="detect", transform=a.transform,
              image_size=IMAGE_SIZE, seed=0)
    if a.transform == "mosaic":
        kw.update(close_mosaic=0)  # mosaic in every epoch, as the Ultralytics dataset does
    if a.resample:
        kw.update(resample=a.resample)
    try:
        loader = stoker.Loader(a.dataset, **kw)
    except TypeError as e:
        unavailable("not available", f"stoker.Loader({kw}): {e} (no detection API in this binding)")
    take = Consumer(int(getattr(loader, "num_classes", 0) or a.nc))

    def batches():
        for batch in loader:
            images = torch.from_numpy(batch.images)  # uint8 [B,640,640,3], no copy
            boxes = torch.from_numpy(batch.boxes)    # float32 [N,6]: image, class, cx, cy, w, h
            yield images, boxes[:, 0], boxes[:, 1], boxes[:, 2:]

    def run_epoch(epoch):
        loader.set_epoch(epoch)
        return take.epoch(batches(), loader.samples_per_epoch, epoch)

    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    with loader:
        r = measure(run_epoch, a.epochs, a.seconds, log)
        try:
            st = stoker.stats(socket=a.socket)
            r["daemon_stats"] = {k: st.get(k) for k in ("ring_bytes", "worker_busy", "samples_decoded",
                                                        "decode_errors")}
            r["daemon_stats"]["cache"] = st.get("cache")
        except (stoker.StokerError, ValueError) as e:
            r["daemon_stats"] = {"error": str(e)}
    r.update(take.fields(), batch_size=a.batch_size)
    if r["output"] != {"dtype": "torch.uint8", "shape": [IMAGE_SIZE, IMAGE_SIZE, 3], "boxes_dtype": "torch.float32",
                       "box_columns": 6}:
        r["box_problems"].append(f"unexpected output {r['output']}")
    result(**r)


def peer_main(argv):
    p = argparse.ArgumentParser(prog="detect.py peer")
    p.add_argument("which", choices=["ultralytics", "stoker"])
    p.add_argument("--yaml")
    p.add_argument("--mode", default="train", choices=["train", "val"])
    p.add_argument("--cache", default="")
    p.add_argument("--cores", type=int, default=1)
    p.add_argument("--socket")
    p.add_argument("--dataset")
    p.add_argument("--nc", type=int, default=0)
    p.add_argument("--transform", default="mosaic")
    p.add_argument("--resample", default="")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--task", default="detect", choices=["detect", "segment", "pose"])
    p.add_argument("--daemon-pid", type=int, default=0)
    a = p.parse_args(argv)
    if a.task != "detect":
        (peer_ultralytics_instances if a.which == "ultralytics" else peer_stoker_instances)(a)
    else:
        (peer_ultralytics if a.which == "ultralytics" else peer_stoker)(a)


# --------------------------------------------------------------------------
# the orchestrator


def build_yolo(path, images, cores):
    """The data set, made once by scripts/mkyolo.py and kept."""
    stamp = os.path.join(path, ".bench-complete")
    if os.path.exists(stamp):
        run.say(f"data set: reusing {path}")
        return
    shutil.rmtree(path, ignore_errors=True)
    tool = os.path.join(run.REPO, "scripts", "mkyolo.py")
    if not os.path.exists(tool):
        raise SystemExit(f"detect: {tool} missing (the YOLO data set generator)")
    t0 = time.monotonic()
    subprocess.run([run.PY, tool, path, "--kind", "photos", "--images", str(images), "--jobs", str(cores)],
                   check=True)
    open(stamp, "w").close()
    run.say(f"data set: built {images} images in {time.monotonic() - t0:.1f}s")


def build_instances(path, images):
    """The segment and pose rows' data set, made once by bench/mkinstances.py
    (real-photo scenes, 512-704 px, exact polygons and keypoints) and kept."""
    stamp = os.path.join(path, ".bench-complete")
    if os.path.exists(stamp):
        run.say(f"instance data set: reusing {path}")
        return
    subprocess.run([run.PY, os.path.join(HERE, "mkinstances.py"), path, "--train", str(images), "--val", "8",
                    "--scale", "2"], check=True)
    open(stamp, "w").close()


def classes(yaml_path):
    """The number of classes data.yaml names (0: unknown, not checked)."""
    try:
        import yaml
        with open(yaml_path) as f:
            names = yaml.safe_load(f).get("names") or {}
        return len(names)
    except (ImportError, OSError, AttributeError, ValueError):
        return 0


def snapshot(out):
    """Copy what the rows run out of the build directory: other work in this
    tree may rebuild it mid-run."""
    dst = os.path.join(out, "build-snapshot-detect")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for f in ("stokerd", "stokerctl", "libstoker.so.0", "bench/jpeg_limit"):
        if f.startswith("bench/") and not os.path.exists(os.path.join(run.BUILD, f)):
            continue  # optional: the decode-limit row says "not available"
        os.makedirs(os.path.dirname(os.path.join(dst, f)), exist_ok=True)
        shutil.copy2(os.path.join(run.BUILD, f), os.path.join(dst, f))
    run.BUILD = dst  # run.Daemon and run.Runner read it
    return dst


# (key, label, kind, arguments); kind "stoker" rows start their own stokerd.
ROWS = [
    ("limit", "decode limit (1 thread x cores) [context]", "limit", {}),
    ("stoker_mosaic", "stoker mosaic-640", "stoker", {"transform": "mosaic"}),
    ("ultralytics_train", "Ultralytics train loader (mosaic 1.0)", "ultralytics", {"mode": "train"}),
    ("stoker_letterbox", "stoker letterbox-640", "stoker", {"transform": "letterbox"}),
    ("ultralytics_val", "Ultralytics val loader (LetterBox, rect=False)", "ultralytics", {"mode": "val"}),
    ("stoker_mosaic_decoded", "stoker mosaic-640, decoded cache tier [extra]", "stoker",
     {"transform": "mosaic", "decoded": True}),
    # the resamplers side by side, and the cv2 one on its portable kernels (before issue 22's SIMD)
    ("stoker_mosaic_cv2", "stoker mosaic-640, resample=cv2 [extra]", "stoker",
     {"transform": "mosaic", "resample": "cv2"}),
    ("stoker_letterbox_antialias", "stoker letterbox-640, resample=antialias [extra]", "stoker",
     {"transform": "letterbox", "resample": "antialias"}),
    ("stoker_letterbox_scalar", "stoker letterbox-640, portable resize [extra]", "stoker",
     {"transform": "letterbox", "env": {"STOKER_RESIZE_ISA": "scalar"}}),
    # AVX2 kernels only (the default before AVX-512 was chosen on CPUs with AVX512_VBMI2)
    ("stoker_letterbox_avx2", "stoker letterbox-640, AVX2 kernels [extra]", "stoker",
     {"transform": "letterbox", "env": {"STOKER_RESIZE_ISA": "avx2"}}),
    ("stoker_mosaic_avx2", "stoker mosaic-640, AVX2 kernels [extra]", "stoker",
     {"transform": "mosaic", "env": {"STOKER_RESIZE_ISA": "avx2"}}),
    ("ultralytics_train_ram", "Ultralytics train loader, cache=ram [extra]", "ultralytics",
     {"mode": "train", "cache": "ram"}),
    # issue 21: segment (mosaic with overlap masks) and pose (keypoints) training loaders, on
    # bench/mkinstances.py's scenes; stoker's through stoker.ultralytics.YOLOLoader, the batch dicts
    # its trainers take, against Ultralytics' build_yolo_dataset + build_dataloader
    ("stoker_segment", "stoker segment mosaic-640 + masks", "stoker", {"task": "segment"}),
    ("ultralytics_segment", "Ultralytics segment train loader", "ultralytics", {"task": "segment"}),
    ("stoker_pose", "stoker pose mosaic-640 + keypoints", "stoker", {"task": "pose"}),
    ("ultralytics_pose", "Ultralytics pose train loader", "ultralytics", {"task": "pose"}),
]
INSTANCE_ROWS = ("stoker_segment", "ultralytics_segment", "stoker_pose", "ultralytics_pose")
# Each Ultralytics row against the stoker row it is compared with, and the target.
COMPARE = {"ultralytics_train": ("stoker_mosaic", ">= 5x"), "ultralytics_val": ("stoker_letterbox", ">= 2x"),
           "ultralytics_train_ram": ("stoker_mosaic_decoded", ""),
           "ultralytics_segment": ("stoker_segment", ">= 4x"), "ultralytics_pose": ("stoker_pose", ">= 4x")}


def run_instance_row(r, tmp, key, kind, opts, a, common):
    """A segment or pose row: the peer samples the memory of every process it
    runs on (its DataLoader workers; stoker's: its stokerd)."""
    me, task = os.path.abspath(__file__), opts["task"]
    args = [me, "peer", kind, "--task", task, "--yaml", a.instance_yaml[task], "--cores", str(a.cores), *common]
    if kind == "ultralytics":
        return r.peer(args)
    try:
        dm = run.Daemon(r, tmp, a.cores, key)
    except RuntimeError as e:
        return {"status": "failed", "reason": str(e)}
    try:
        row = r.peer(args + ["--socket", dm.sock, "--daemon-pid", str(dm.pid)])
        row["stokerd_vm_hwm_bytes"] = dm.status().get("VmHWM")
    finally:
        rc = dm.stop()
    if rc != 0:
        row.setdefault("problems", []).append(f"stokerd exited with status {rc} on SIGTERM "
                                              f"(see {r.logdir}/stokerd-{key}.log)")
    return row


def run_row(r, tmp, key, kind, opts, a, data, yaml, nc):
    if kind == "limit":
        if not os.path.exists(os.path.join(run.BUILD, "bench", "jpeg_limit")):
            return {"status": "not available", "reason": "build/bench/jpeg_limit missing (make bench builds it)"}
        files = run.list_files(os.path.join(data, "images"))
        d, par = run.bench_limit(r, files, a.cores, argparse.Namespace(epochs=1, min_seconds=min(a.seconds, 10)))
        if par and par.get("status") == "ok":
            d["parallel_images_per_second"] = par["images_per_second"]
        return d
    common = ["--batch-size", str(a.batch), "--epochs", str(a.epochs), "--seconds", str(a.seconds)]
    if opts.get("task"):
        return run_instance_row(r, tmp, key, kind, opts, a, common)
    me = os.path.abspath(__file__)
    if kind == "ultralytics":
        return r.peer([me, "peer", "ultralytics", "--yaml", yaml, "--mode", opts["mode"], "--cores", str(a.cores),
                       "--cache", opts.get("cache", ""), *common])
    extra = ["--set", f"cache_decoded_side={a.decoded_side}"] if opts.get("decoded") else []
    try:
        dm = run.Daemon(r, tmp, a.cores, key, extra_env=opts.get("env"), extra_args=extra)
    except RuntimeError as e:
        return {"status": "failed", "reason": str(e)}
    try:
        row = r.peer([me, "peer", "stoker", "--socket", dm.sock, "--dataset", yaml, "--nc", str(nc),
                      "--transform", opts["transform"], "--resample", opts.get("resample", ""), *common])
        row["stokerd_vm_hwm_bytes"] = dm.status().get("VmHWM")
    finally:
        rc = dm.stop()
    if rc != 0:
        row.setdefault("problems", []).append(f"stokerd exited with status {rc} on SIGTERM "
                                              f"(see {r.logdir}/stokerd-{key}.log)")
    return row


def table(res):
    rows, summary = res["rows"], {}
    cols = "{:50} {:>9} {:>8} {:>9} {:>11}  {:7} {:>5}  {}"
    lines = [cols.format("row", "images/s", "of limit", "boxes/img", "stoker/row", "target", "other", "note"),
             "-" * 115]
    limit = (rows.get("limit") or {}).get("images_per_second")
    for key, label, *_ in (x for x in ROWS if x[0] in rows):
        row = rows[key]
        ref, target = COMPARE.get(key, (None, ""))
        x = run.ratio(rows.get(ref), row) if ref else None
        note = "" if row.get("status") == "ok" else f"{row.get('status')}: {row.get('reason', '')}"
        if row.get("num_workers") is not None:
            note = f"{row['num_workers']} workers, cache={row.get('cache')}" + (
                f", mosaic buffer {row.get('buffer_images_per_worker')} images per worker"
                if row.get("cache") is None and row.get("buffer_images_per_worker") else "")
        if row.get("parallel_images_per_second"):
            note = (f"one thread {row['single_thread_images_per_second']:.0f}/s; measured on {res['cores']} cores "
                    f"at once: {row['parallel_images_per_second']:.0f}/s")
        probs = row.get("box_problems", []) + row.get("problems", [])
        if probs:
            note += ("; " if note else "") + "PROBLEM: " + "; ".join(probs)
        other = row.get("foreign_cpu")
        bpi = row.get("boxes_per_image")
        ips = row.get("images_per_second")
        of_limit = ips / limit if ips and limit and key != "limit" else None
        lines.append(cols.format(label, run.fmt_rate(row), "" if of_limit is None else f"{of_limit:.2f}",
                                 "—" if bpi is None else bpi, run.fx(x, 11).strip(),
                                 target, "" if other is None else f"{other:.0%}", note[:200]))
        summary[key] = {"images_per_second": row.get("images_per_second"), "of_decode_limit": of_limit,
                        "stoker_over_row": x,
                        "target": target or None, "status": row.get("status"), "boxes_per_image": bpi}
    lines.append("-" * 115)
    u = rows.get("ultralytics_train")
    for key, what in (("stoker_mosaic_decoded", "with the decoded cache tier"), ("stoker_mosaic_cv2", "resample=cv2")):
        x = run.ratio(rows.get(key), u)
        if x is not None:
            lines.append(f"stoker mosaic-640 {what} / Ultralytics train loader: {x:.2f}x")
    for a_key, b_key, what in (("stoker_letterbox", "stoker_letterbox_antialias", "letterbox cv2 / antialias"),
                               ("stoker_mosaic_cv2", "stoker_mosaic", "mosaic cv2 / antialias"),
                               ("stoker_letterbox", "stoker_letterbox_scalar", "letterbox SIMD / portable resize")):
        x = run.ratio(rows.get(a_key), rows.get(b_key))
        if x is not None:
            lines.append(f"{what}: {x:.2f}x")
    if a_cores := res.get("cores"):
        for key in ("stoker_mosaic", "stoker_letterbox", "stoker_mosaic_decoded"):
            ips = (rows.get(key) or {}).get("images_per_second")
            if ips:
                lines.append(f"{key:22} per worker: {ips / a_cores:.0f} images/s ({a_cores} workers)")
    for key in ("stoker_mosaic", "stoker_letterbox", "stoker_mosaic_decoded", "stoker_mosaic_cv2",
                "stoker_letterbox_antialias", "stoker_letterbox_scalar", "ultralytics_train",
                "ultralytics_val", "ultralytics_train_ram"):
        row = rows.get(key) or {}
        if row.get("stokerd_vm_hwm_bytes"):
            lines.append(f"{key:22} stokerd peak RSS (VmHWM, ring included): "
                         f"{row['stokerd_vm_hwm_bytes'] / 2**20:5.0f} MiB")
        elif row.get("pss_bytes"):
            lines.append(f"{key:22} main + {row.get('worker_processes')} workers, PSS at the end: "
                         f"{row['pss_bytes'] / 2**20:5.0f} MiB")
    for task in ("segment", "pose"):
        st, ul = rows.get(f"stoker_{task}") or {}, rows.get(f"ultralytics_{task}") or {}
        for key, row in ((f"stoker_{task}", st), (f"ultralytics_{task}", ul)):
            if row.get("peak_pss_bytes"):
                lines.append(f"{key:22} peak of all its processes (sampled every 0.2 s): PSS "
                             f"{row['peak_pss_bytes'] / 2**20:5.0f} MiB, RSS {row['peak_rss_bytes'] / 2**20:5.0f} MiB; "
                             f"PSS above the consumer alone {row['loader_pss_bytes'] / 2**20:5.0f} MiB"
                             + (f" ({row.get('worker_processes')} workers)" if row.get("worker_processes") else ""))
        for key, row in ((f"stoker_{task}", st), (f"ultralytics_{task}", ul)):
            if row.get("cpu_ms_per_image"):
                lines.append(f"{key:22} CPU per image, all its processes (user + system): "
                             f"{row['cpu_ms_per_image']:.1f} ms")
        if st.get("cpu_ms_per_image") and ul.get("cpu_ms_per_image"):
            c = ul["cpu_ms_per_image"] / st["cpu_ms_per_image"]
            lines.append(f"{task}: Ultralytics / stoker CPU per image {c:.2f}x (images per CPU-second, "
                         "what the images/s ratio is on cores nothing else uses)")
            summary[f"stoker_{task}"]["cpu_per_image_ratio"] = c
        if st.get("peak_pss_bytes") and ul.get("peak_pss_bytes"):
            m = st["peak_pss_bytes"] / ul["peak_pss_bytes"]
            ml = st["loader_pss_bytes"] / max(1, ul["loader_pss_bytes"])
            lines.append(f"{task}: stoker / Ultralytics peak PSS {m:.2f}x, above the consumer {ml:.2f}x "
                         "(target <= 0.5x)")
            summary[f"stoker_{task}"].update(pss_over_ultralytics=m, loader_pss_over_ultralytics=ml)
    lines.append("other = CPU share taken by processes outside the bench during the row's best pass")
    return "\n".join(lines), summary


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "peer":
        return peer_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=512, help="data set size (scripts/mkyolo.py --kind photos)")
    ap.add_argument("--cores", type=int, default=0, help="cores for every row (default: nproc)")
    ap.add_argument("--batch", type=int, default=16, help="batch size (Ultralytics' default 16)")
    ap.add_argument("--epochs", type=int, default=1, help="minimum timed epochs per row, after one warm-up epoch")
    ap.add_argument("--seconds", type=float, default=20, help="minimum timed seconds per row")
    ap.add_argument("--repeat", type=int, default=2,
                    help="passes over the main rows (extras: one); each row reports its best")
    ap.add_argument("--wait-quiet", type=float, default=30,
                    help="before each row, wait up to this many seconds for other work to stop")
    ap.add_argument("--retries", type=int, default=2,
                    help="extra passes a row may take when other processes took over 10%% of the CPUs during one")
    ap.add_argument("--budget", type=float, default=600,
                    help="seconds after which no row is repeated or retried (each row still runs once)")
    ap.add_argument("--decoded-side", type=int, default=IMAGE_SIZE,
                    help="cache_decoded_side for the decoded-tier row (0: skip that row)")
    ap.add_argument("--no-extras", action="store_true", help="skip the [extra] rows")
    ap.add_argument("--only", help="comma-separated row keys (" + ",".join(k for k, *_ in ROWS) + ")")
    ap.add_argument("--data", help="use this YOLO data set (with data.yaml) instead of building one")
    ap.add_argument("--instance-images", type=int, default=256,
                    help="segment and pose rows: scenes in their data set (bench/mkinstances.py --scale 2)")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    a = ap.parse_args()

    avail = sorted(os.sched_getaffinity(0))
    a.cores = a.cores or len(avail)
    if a.cores > len(avail):
        ap.error(f"--cores {a.cores}: only {len(avail)} CPUs available")
    only = set(a.only.split(",")) if a.only else None
    rows = [x for x in ROWS if (only is None or x[0] in only)
            and not (a.no_extras and "[extra]" in x[1]) and not (x[3].get("decoded") and a.decoded_side <= 0)]
    os.makedirs(a.out, exist_ok=True)
    if any(kind == "stoker" for _, _, kind, _ in rows):
        if not os.access(os.path.join(run.BUILD, "stokerd"), os.X_OK):
            ap.error(f"{run.BUILD}/stokerd missing: run make")
        snapshot(a.out)
    logdir = os.path.join(a.out, "logs-detect")
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)
    started = time.monotonic()

    data = os.path.abspath(a.data or os.path.join(a.out, "yolo", f"photos-{a.images}"))
    if not a.data:
        build_yolo(data, a.images, a.cores)
    yaml = os.path.join(data, "data.yaml")
    nc = classes(yaml)
    files = run.list_files(os.path.join(data, "images"))
    if any(key in INSTANCE_ROWS for key, *_ in rows):
        inst = os.path.join(a.out, "yolo", f"instances-{a.instance_images}")
        build_instances(inst, a.instance_images)
        a.instance_yaml = {t: os.path.join(inst, t, "data.yaml") for t in ("segment", "pose")}
        inst_files = run.list_files(os.path.join(inst, "segment", "images", "train")) + \
            run.list_files(os.path.join(inst, "pose", "images", "train"))
        a.instance_data = {"path": inst, "files": len(inst_files) // 2, "bytes": run.warm_cache(inst_files) // 2}
    nbytes = run.warm_cache(files)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "python3 bench/detect.py" + (f" {' '.join(sys.argv[1:])}" if sys.argv[1:] else ""),
           "cores": a.cores, "batch": a.batch, "image_size": IMAGE_SIZE, "machine": run.machine_info(a.cores),
           "dataset": {"path": data, "files": len(files), "bytes": nbytes, "classes": nc,
                       "mean_kib": round(nbytes / max(1, len(files)) / 1024, 1)},
           "instance_dataset": getattr(a, "instance_data", None),
           "rows": {}}
    res["load"] = {"cpu_busy_before": run.cpu_busy()}
    run.say(f"{res['machine']['cpu']}, {a.cores} cores; data set {len(files)} images, "
            f"{nbytes / 2**20:.0f} MiB, page cache warm")

    r = run.Runner(set(avail[:a.cores]), logdir)
    passes, retries = {}, {}
    with tempfile.TemporaryDirectory(prefix="stoker-detect-") as tmp:
        for n in range(a.repeat):
            for key, label, kind, opts in rows:
                once = "[extra]" in label or "[context]" in label
                if n > 0 and (once or not any(x.get("status") == "ok" for x in passes.get(key, []))
                              or time.monotonic() - started > a.budget):
                    continue  # extras run once; so does a row that failed or is not installed
                while True:
                    waited = run.wait_quiet(a.wait_quiet)
                    run.say(f"[pass {n + 1}/{a.repeat}] {label} ..."
                            + (f" (waited {waited:.0f}s for other work to stop)" if waited >= 4 else ""))
                    with run.Meter(a.cores) as m:
                        row = run_row(r, tmp, key, kind, opts, a, data, yaml, nc)
                    row["foreign_cpu"] = m.foreign
                    passes.setdefault(key, []).append(row)
                    run.say(f"  {row['images_per_second']:.1f} images/s, other work took {m.foreign:.0%} of the CPUs"
                            if row.get("status") == "ok" else f"  {row.get('status')}: {row.get('reason')}")
                    # A pass disturbed by other work runs again, up to --retries times a
                    # row, while the run is inside its --budget.
                    if m.foreign <= 0.1 or row.get("status") != "ok" or retries.get(key, 0) >= a.retries \
                            or time.monotonic() - started > a.budget:
                        break
                    retries[key] = retries.get(key, 0) + 1
    def rank(x):  # the fastest pass of those the machine was quiet for, else the fastest
        return x.get("status") == "ok", x["foreign_cpu"] <= 0.1, x.get("images_per_second") or 0

    for key, runs in passes.items():
        res["rows"][key] = dict(max(runs, key=rank), passes=[
            {"images_per_second": x.get("images_per_second"), "foreign_cpu": x["foreign_cpu"]} for x in runs])
    res["load"]["cpu_busy_after"] = run.cpu_busy()
    res["table"], res["summary"] = table(res)
    res["seconds"] = round(time.monotonic() - started, 1)
    with open(os.path.join(a.out, "detect.json"), "w") as f:
        json.dump(res, f, indent=2)
    print()
    print(res["table"])
    print(f"\nbench-detect: {res['seconds']:.0f}s; results in {os.path.join(a.out, 'detect.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
