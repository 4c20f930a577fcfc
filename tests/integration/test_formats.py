"""Image formats beside JPEG (issue 14): PNG, WebP, BMP, TIFF and PPM/PGM.

Every variant tests/tools/mkimages.py writes (Pillow's own files, and the
layouts Pillow reads but does not write, by hand or by libtiff's tiffcp) is
decoded as the workers decode it and compared with Pillow's
Image.open(f).convert("RGB"); then whole data sets of them go through real
daemons: every layout (ImageFolder, list file, YOLO), every transform, the
decoded cache tier, and hostile files of each format.
"""

import io
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image

import stoker
from faultutil import native_memory, proc_status, report
from stoker_testutil import BUILD, REPO, expected_samples, list_samples, read_epoch
from test_pixels import reference_center_crop

# mkimages writes a palette PNG with tRNS on purpose; Pillow warns when converting it.
pytestmark = pytest.mark.filterwarnings("ignore:Palette images with Transparency")

sys.path.insert(0, str(REPO / "tests" / "tools"))
import mkimages  # noqa: E402

IMGDECODE = BUILD / "tests" / "imgdecode"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def decode_all(paths, max_pixels=None):
    """[(code, RGB array or the reason)] from the workers' decoder, all the
    files through one pipeline (so one file's leftovers would show in the next)."""
    args = [str(IMGDECODE)] + (["-m", str(max_pixels)] if max_pixels else []) + [str(p) for p in paths]
    r = subprocess.run(args, capture_output=True, timeout=300, check=True)
    out, at = [], 0
    for _ in paths:
        nl = r.stdout.index(b"\n", at)
        head = r.stdout[at:nl].decode()
        if head.startswith("! "):
            code, reason = head[2:].split(" ", 1)
            out.append((int(code), reason))
            at = nl + 1
            continue
        w, h = map(int, head.split())
        out.append((0, np.frombuffer(r.stdout[nl + 1:nl + 1 + w * h * 3], np.uint8).reshape(h, w, 3)))
        at = nl + 1 + w * h * 3
    assert at == len(r.stdout)
    return out


def decode(path, max_pixels=None):
    return decode_all([path], max_pixels)[0]


def pillow_rgb(path):
    return np.asarray(Image.open(path).convert("RGB"))


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    return mkimages.variants(tmp_path_factory.mktemp("variants"))


def test_every_variant_matches_pillow(variants):
    """Lossless formats exactly; lossy ones (WebP, JPEG inside TIFF) as
    closely as the libraries allow: Debian's libwebp 1.2.4 and Pillow's
    1.6.0 measured identical here."""
    kinds = {v[0].split("_")[0] for v in variants}
    assert kinds == {"png", "webp", "bmp", "tiff", "pnm"}
    bad, lossy_diff = [], {}
    paths = [p for _, p, _ in variants]
    forward, backward = decode_all(paths), decode_all(paths[::-1])[::-1]
    for (name, path, lossy), (rc, got), again in zip(variants, forward, backward):
        if rc == 0 and (again[0] or not np.array_equal(again[1], got)):
            bad.append(f"{name}: decodes differently after other files")
        if rc:
            bad.append(f"{name}: refused: {got}")
            continue
        ref = pillow_rgb(path)
        if got.shape != ref.shape:
            bad.append(f"{name}: shape {got.shape} vs Pillow's {ref.shape}")
            continue
        diff = np.abs(got.astype(np.int16) - ref.astype(np.int16))
        if lossy:
            lossy_diff[name] = (int(diff.max()), float(diff.mean()))
            if diff.mean() > 0.5 or diff.max() > 8:
                bad.append(f"{name}: lossy, max {diff.max()} mean {diff.mean():.3f}")
        elif diff.any():
            bad.append(f"{name}: {np.count_nonzero(diff.any(axis=2))} pixels differ, max {diff.max()}")
    assert not bad, "\n".join(bad)
    report("formats_vs_pillow", variants=len(variants), lossy=lossy_diff)


def test_refused_variants_say_why(tmp_path):
    """Layouts Pillow cannot convert or misreads (grey with premultiplied
    alpha, float and L*a*b* TIFFs, 2-bit and 10-10-10 BMPs, a 4-bit BMP
    with a grey-ramp palette, PNG inside BMP) are refused with the reason."""
    made = mkimages.refused(tmp_path)
    for (name, path, words), (rc, reason) in zip(made, decode_all([p for _, p, _ in made])):
        assert rc == 2 and words in reason, f"{name}: {rc} {reason}"


def folder_of_every_format(root, variants):
    """ImageFolder: one class per format, plus a PNG named .JPEG (ImageNet
    has one), a JPEG named .png, upper-case extensions, and files
    torchvision skips."""
    for name, path, _ in variants:
        cls = root / name.split("_")[0]
        cls.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, cls / name)
    odd = root / "odd"
    odd.mkdir()
    shutil.copy(next(p for n, p, _ in variants if n == "png_rgb8.png"), odd / "n02105855_2933.JPEG")
    Image.open(REPO / "data" / "photos" / "rocket.jpg").resize((90, 70)).save(odd / "jpeg_inside.png", "JPEG",
                                                                                quality=92)
    shutil.copy(next(p for n, p, _ in variants if n == "bmp_p8.bmp"), odd / "UPPER.BMP")
    Image.new("RGB", (8, 8)).save(odd / "skipped.gif", "GIF")
    (odd / "notes.txt").write_text("not an image\n")
    return root


@pytest.fixture(scope="module")
def every_format(tmp_path_factory, variants):
    return folder_of_every_format(tmp_path_factory.mktemp("every") / "ds", variants)


def test_image_folder_center_crop_matches_torchvision(daemon, every_format):
    """torchvision's ImageFolder order (its IMG_EXTENSIONS, any case) and
    Resize + CenterCrop pixels, uint8 and normalised float32, for every
    variant; nothing replaced."""
    want = expected_samples(every_format)
    assert len(want) > 100 and not any(p.endswith((".gif", ".txt")) for p, _ in want)
    d = daemon()
    size = 56  # Resize(64): 256/224 of it exactly, as in test_pixels
    with stoker.Loader(every_format, socket=d.socket, transform="center_crop", image_size=size, batch_size=16,
                       shuffle=False) as ld:
        r = read_epoch(ld, keep_images=True)
    with stoker.Loader(every_format, socket=d.socket, transform="center_crop", image_size=size, batch_size=16,
                       shuffle=False, dtype="float32", mean=MEAN, std=STD) as ld:
        f = read_epoch(ld, keep_images=True)
    assert r["replaced"] == 0 and f["replaced"] == 0
    assert d.stats()["decode_errors"] == 0
    assert r["indices"] == list(range(len(want)))
    assert r["labels"] == [label for _, label in want]
    got, got_f = np.concatenate(r["images"]), np.concatenate(f["images"])
    try:  # torchvision itself where it is installed, else test_pixels' replica of it
        from torchvision import transforms as T
        tv = T.Compose([T.Resize(size * 256 // 224), T.CenterCrop(size)])
        reference = lambda path, size: np.asarray(tv(Image.open(path).convert("RGB")))  # noqa: E731
    except ImportError:
        reference = reference_center_crop
    worst, bad = 0, []
    for i, (path, _) in enumerate(want):
        ref = reference(path, size)
        diff = np.abs(got[i].astype(np.int16) - ref.astype(np.int16))
        worst = max(worst, int(diff.max()))
        # stoker's fixed-point resampling against Pillow's: at most 1 apart (as for JPEG)
        if diff.max() > 1 or diff.mean() > 0.1:
            bad.append(f"{path}: max {diff.max()} mean {diff.mean():.3f}")
        # the float output is the uint8 output normalised, exactly as ToTensor + Normalize
        want_f = ((got[i].astype(np.float32) / np.float32(255) - np.float32(MEAN)) / np.float32(STD))
        assert np.array_equal(got_f[i], want_f.transpose(2, 0, 1)), path
    assert not bad, "\n".join(bad)
    report("formats_center_crop", images=len(want), max_diff=worst)


def test_list_file_and_random_crops_are_deterministic(daemon, every_format, tmp_path):
    """A list file naming the files of every format; random_resized_crop
    gives the same pixels across daemons and worker counts, and from the
    decoded cache tier cold and warm (lossless formats are decoded whole
    either way, so the tier changes nothing)."""
    samples = expected_samples(every_format)
    lst = tmp_path / "list.txt"
    lst.write_text("".join(f"{p} {label}\n" for p, label in reversed(samples)))
    want = list_samples(lst)
    opts = dict(transform="random_resized_crop", image_size=48, batch_size=8, seed=5)
    a = daemon(workers=1)
    with stoker.Loader(lst, socket=a.socket, shuffle=False, **opts) as ld:
        ra = read_epoch(ld)
    assert ra["replaced"] == 0 and ra["indices"] == list(range(len(want)))
    assert ra["labels"] == [label for _, label in want]
    b = daemon(workers=3, extra=["--set", "cache_bytes=64M", "--set", "cache_decoded_side=32"])
    with stoker.Loader(lst, socket=b.socket, shuffle=False, **opts) as ld:
        cold = read_epoch(ld)
        warm = read_epoch(ld)
    jpeg = {i for i, (p, _) in enumerate(want) if open(p, "rb").read(3) == b"\xff\xd8\xff"}
    assert len(jpeg) == 1  # the .png that is a JPEG: the decoded tier may scale it in the DCT
    same = [ra["hashes"][i] == cold["hashes"][i] for i in range(len(want)) if i not in jpeg]
    assert all(same), f"{same.count(False)} samples differ with the decoded tier"
    assert warm["hashes"] == cold["hashes"]
    assert b.stats()["decode_errors"] == 0


def yolo_tree(root, picture):
    """One picture in each lossless format Ultralytics lists, with a box each."""
    img, lab = root / "images" / "train", root / "labels" / "train"
    img.mkdir(parents=True)
    lab.mkdir(parents=True)
    names = []
    for fmt, ext, kw in (("PNG", "png", {}), ("BMP", "bmp", {}), ("TIFF", "tif", {"compression": "tiff_lzw"}),
                         ("TIFF", "TIFF", {}), ("WEBP", "webp", {"lossless": True})):
        name = f"{ext.lower()}_{len(names)}.{ext}"
        picture.save(img / name, fmt, **kw)
        (lab / (name.rsplit(".", 1)[0] + ".txt")).write_text("0 0.5 0.5 0.4 0.3\n")
        names.append(name)
    (img / "skipped.pgm").write_bytes(b"P5\n2 2\n255\n\0\0\0\0")  # not in Ultralytics' IMG_FORMATS
    return root / "images" / "train", names


def test_yolo_formats_letterbox_and_mosaic(daemon, tmp_path):
    """The same pixels in five lossless files give the same letterboxed
    image and boxes; mosaic decodes them all."""
    pic = Image.open(REPO / "data" / "photos" / "coffee.png").convert("RGB").resize((150, 100))
    train, names = yolo_tree(tmp_path / "yolo", pic)
    d = daemon()
    with stoker.Loader(train, socket=d.socket, task="detect", transform="letterbox", image_size=64,
                       batch_size=len(names), shuffle=False) as ld:
        batches = list(ld)
        imgs = batches[0].images.copy()
        boxes = batches[0].boxes.copy()
    assert len(batches) == 1 and imgs.shape[0] == len(names)
    for i in range(1, len(names)):
        assert np.array_equal(imgs[i], imgs[0]), f"{names[i]} differs from {names[0]}"
    assert boxes.shape[0] == len(names)
    assert np.array_equal(boxes[:, 1:], np.repeat(boxes[:1, 1:], len(names), axis=0))
    with stoker.Loader(train, socket=d.socket, task="detect", image_size=64, batch_size=len(names),
                       seed=3) as ld:
        b = next(iter(ld))
        assert b.replaced == 0 and sorted(int(i) for i in b.indices) == list(range(len(names)))
    assert d.stats()["decode_errors"] == 0


# ---- hostile files ----

def png_claiming(w, h, idat=None):
    """A grey PNG whose header claims w x h, with `idat` (compressed) as its data."""
    idat = zlib.compress(b"\0" * 64) if idat is None else idat
    return (b"\x89PNG\r\n\x1a\n" + mkimages._chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
            mkimages._chunk(b"IDAT", idat) + mkimages._chunk(b"IEND", b""))


def webp_claiming(w, h):
    """A lossless WebP (VP8L) whose header claims w x h; its data cut short."""
    b = io.BytesIO()
    Image.new("RGB", (4, 4), (9, 9, 9)).save(b, "WEBP", lossless=True)
    data = bytearray(b.getvalue())
    assert data[12:16] == b"VP8L" and data[20] == 0x2F
    orig = struct.unpack("<I", data[21:25])[0]
    data[21:25] = struct.pack("<I", (w - 1) | (h - 1) << 14 | (orig >> 28) << 28)
    return bytes(data)


def tiff_claiming(w, h):
    """A grey uncompressed TIFF whose tags claim w x h, with 64 bytes of strip."""
    tags = [(256, 4, w), (257, 4, h), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, 0), (277, 3, 1),
            (278, 4, h), (279, 4, 64)]
    ifd_at, strip_at = 8, 8 + 2 + 12 * len(tags) + 4
    body = struct.pack("<H", len(tags))
    for tag, kind, value in tags:
        value = strip_at if tag == 273 else value
        body += struct.pack("<HHI", tag, kind, 1) + (struct.pack("<HH", value, 0) if kind == 3 else
                                                    struct.pack("<I", value))
    return b"II*\0" + struct.pack("<I", ifd_at) + body + b"\0\0\0\0" + b"\x80" * 64


def zlib_bomb():
    """256 MiB of zeros, 256 KiB compressed."""
    z = zlib.compressobj(9)
    zero = b"\0" * (1 << 20)
    return b"".join(z.compress(zero) for _ in range(256)) + z.flush()


def hostile_files():
    """name -> (bytes, words of the expected error)"""
    b = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(b, "PNG")
    png = b.getvalue()
    b = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(b, "TIFF", compression="tiff_lzw")
    tif = b.getvalue()
    b = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(b, "WEBP", quality=80)
    webp = b.getvalue()
    b = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(b, "BMP")
    bmp = b.getvalue()
    return {
        "png_60000x60000": (png_claiming(60000, 60000), "over the limit"),
        "png_truncated": (png[:len(png) // 2], "PNG"),
        "png_bad_header_crc": (png[:29] + bytes([png[29] ^ 0xFF]) + png[30:], "checksum"),
        "png_corrupt_idat": (png[:43] + bytes([png[43] ^ 0xFF]) + png[44:], "PNG"),
        "webp_16383x16383": (webp_claiming(16383, 16383), "over the limit"),
        "webp_truncated": (webp[:len(webp) * 2 // 3], "WebP"),
        "tiff_200000x200000": (tiff_claiming(200000, 200000), "over the limit"),
        "tiff_truncated": (tif[:len(tif) // 3], "TIFF"),
        "bmp_60000x60000": (bmp[:18] + struct.pack("<ii", 60000, 60000) + bmp[26:], "over the limit"),
        "bmp_truncated": (bmp[:len(bmp) - 100], "truncated"),
        "bmp_jpeg_inside": (bmp[:30] + struct.pack("<I", 4) + bmp[34:], "unsupported compression"),
        "pnm_60000x60000": (b"P6\n60000 60000\n255\n" + b"\0" * 64, "over the limit"),
        "pnm_truncated": (b"P5\n40 30\n255\n" + b"\0" * 100, "not enough image data"),
        "unknown_format": (b"GIF89a" + b"\0" * 100, "Not an image format stoker reads"),
    }


def test_hostile_files_of_every_format(daemon, tmp_path):
    """Bombs (headers claiming 60000x60000 and more), truncated and corrupt
    files of each format (Pillow refuses each of them too): each refused before its pixels cost memory,
    counted, replaced by the next good file, and logged once with its
    reason; the peak memory stays small. A zlib bomb (256 MiB of zeros
    behind a 100x100 PNG header) is inflated only as far as the image needs,
    as Pillow does: it decodes, to Pillow's pixels, and costs nothing more."""
    files = hostile_files()
    cls = tmp_path / "hostile" / "a"
    cls.mkdir(parents=True)
    names = {}
    for i, (name, (data, _)) in enumerate(sorted(files.items())):
        ext = {"png": "png", "webp": "webp", "tiff": "tif", "bmp": "bmp", "pnm": "ppm"}.get(name.split("_")[0], "png")
        (cls / f"{i:02d}_{name}.{ext}").write_bytes(data)
        names[f"{i:02d}_{name}"] = name
    Image.new("RGB", (30, 20), (1, 2, 3)).save(cls / "99_good.png")
    (cls / "98_zlib_bomb.png").write_bytes(png_claiming(100, 100, zlib_bomb()))
    d = daemon(workers=2)
    hwm0 = proc_status(d.proc.pid, "VmHWM")
    with stoker.Loader(tmp_path / "hostile", socket=d.socket, image_size=32, batch_size=5, shuffle=False) as ld:
        for _ in range(2):  # the second epoch skips the files known bad
            r = read_epoch(ld)
            bomb, good = len(names), len(names) + 1
            assert r["indices"][bomb:] == [bomb, good] and r["replaced"] == len(files)
            assert set(r["indices"][:bomb]) == {bomb}, "every bad file is replaced by the next good one"
    hwm = proc_status(d.proc.pid, "VmHWM")
    st = d.stats()
    assert st["decode_errors"] >= len(files)
    err = d.stderr()
    for stem, name in names.items():
        lines = [x for x in err.splitlines() if stem in x]
        assert len(lines) == 1, f"{name}: logged {len(lines)} times: {lines}"
        assert files[name][1] in lines[0], f"{name}: {lines[0]}"
    # A 60000x60000 image would need 13 GiB decoded, the bomb 256 MiB inflated.
    if native_memory():
        assert hwm - hwm0 < (96 << 20), f"peak RSS grew {(hwm - hwm0) >> 20} MiB"
    report("formats_hostile", files=len(files), decode_errors=st["decode_errors"], peak_rss_growth=hwm - hwm0)


def test_zlib_bomb_decodes_as_pillow(tmp_path):
    """256 MiB of zeros behind a 100x100 header: inflated only as far as the image needs."""
    path = tmp_path / "bomb.png"
    path.write_bytes(png_claiming(100, 100, zlib_bomb()))
    rc, got = decode(path)
    assert rc == 0, got
    assert np.array_equal(got, pillow_rgb(path))


def test_pixel_cap_applies_to_every_format(variants, tmp_path):
    """max_image_pixels is checked from each format's header: one pixel
    under the image passes, at it refuses (exit 3: E2BIG)."""
    seen = set()
    for name, path, _ in variants:
        kind = name.split("_")[0]
        if kind in seen:
            continue
        seen.add(kind)
        w, h = Image.open(path).size
        rc, got = decode(path, w * h)
        assert rc == 0, f"{name}: {got}"
        rc, msg = decode(path, w * h - 1)
        assert rc == 3 and "over the limit" in msg, f"{name}: {rc} {msg}"
    assert seen == {"png", "webp", "bmp", "tiff", "pnm"}
