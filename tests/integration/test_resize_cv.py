"""resample="cv2" against cv2.resize itself, for every resize kernel set this CPU runs
(STOKER_RESIZE_ISA=scalar, avx2, avx512: daemon/pixels/resize_cv.c's portable code and its
vector kernels): a real daemon letterboxes real photos, upscaled and downscaled, the exact
2x shrink (OpenCV's INTER_AREA case) among them, and every batch image must equal
Ultralytics' load_image + LetterBox done with OpenCV (cv2.imread, cv2.resize INTER_LINEAR,
114 padding) byte for byte. tests/unit/test_resize_cv.c compares the kernels with each
other on edge sizes."""

import math
import os
import shutil

import numpy as np
import pytest

import stoker

cv2 = pytest.importorskip("cv2")

PAD = 114


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def isas():
    flags = cpu_flags()
    out = ["scalar"]
    if "avx2" in flags:
        out.append("avx2")
    if {"avx2", "avx512f", "avx512bw"} <= flags:
        out.append("avx512")
    return out


def reference(path, size):
    """load_image (long side to size, INTER_LINEAR) then LetterBox(size, scaleup=False), RGB."""
    im = cv2.imread(str(path))
    h0, w0 = im.shape[:2]
    r = size / max(h0, w0)
    if r != 1:
        w, h = min(math.ceil(w0 * r), size), min(math.ceil(h0 * r), size)
        im = cv2.resize(im, (w, h), interpolation=cv2.INTER_LINEAR)
    h, w = im.shape[:2]
    top = round((size - h) / 2 - 0.1)
    left = round((size - w) / 2 - 0.1)
    out = np.full((size, size, 3), PAD, np.uint8)
    out[top:top + h, left:left + w] = im[..., ::-1]
    return out


@pytest.fixture(scope="module")
def photos(tmp_path_factory, make_yolo):
    """Real photos from 150 to 1400 pixels long, and two exactly 2x the output sides below
    (640x480 and 512x512: the INTER_AREA case at size 320 and 256)."""
    root, _, _ = make_yolo(kind="photos", images=14, classes=5, seed=22, min_side=150, max_side=1400)
    out = tmp_path_factory.mktemp("cvphotos")
    shutil.copytree(root / "images", out / "images")
    shutil.copytree(root / "labels", out / "labels")
    train = out / "images" / "train"
    src = cv2.imread(str(sorted(train.iterdir())[0]))
    cv2.imwrite(str(train / "twice_320.png"), cv2.resize(src, (640, 480), interpolation=cv2.INTER_CUBIC))
    cv2.imwrite(str(train / "twice_256.png"), cv2.resize(src, (512, 512), interpolation=cv2.INTER_CUBIC))
    for name in ("twice_320", "twice_256"):
        (out / "labels" / "train" / f"{name}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    return train


@pytest.mark.parametrize("isa", isas())
def test_letterbox_cv2_equals_cv2_resize(daemon, photos, isa):
    d = daemon(env={**os.environ, "STOKER_RESIZE_ISA": isa})
    files = sorted(photos.iterdir())
    sizes = {}
    for size in (640, 320, 256):
        opts = dict(socket=d.socket, batch_size=4, image_size=size, task="detect", transform="letterbox",
                    resample="cv2", shuffle=False)
        seen = 0
        with stoker.Loader(photos, **opts) as ld:
            for b in ld:
                images = np.array(b.images)
                if images.shape[1] == 3:
                    images = images.transpose(0, 2, 3, 1)
                for img, idx in zip(images, np.array(b.indices)):
                    want = reference(files[idx], size)
                    diff = np.argwhere(img != want)
                    assert diff.size == 0, f"{files[idx].name} at {size} ({isa}): {len(diff)} bytes differ, " \
                                           f"first at {diff[0].tolist()}"
                    h, w = cv2.imread(str(files[idx])).shape[:2]
                    sizes[(w, h, size)] = True
                    seen += 1
        assert seen == len(files)
    # up and down both covered, and the exact 2x shrinks
    assert any(max(w, h) < s for w, h, s in sizes) and any(max(w, h) > s for w, h, s in sizes)
    assert (640, 480, 320) in sizes and (512, 512, 256) in sizes
