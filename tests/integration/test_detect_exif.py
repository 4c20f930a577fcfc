"""EXIF orientation for detection, as Ultralytics sees images (cv2.imdecode turns them
upright by the Orientation tag of JPEG, PNG and WebP): every detection path (letterbox with
resample="cv2" and "antialias", rect batches' shapes, mosaic, the decoded cache tier) works
on the upright image; classification (torchvision's PIL loader) ignores the tag.

The references are upright copies made with Pillow's ImageOps.exif_transpose and stored
lossless (PNG), so stoker's output from the tagged file must equal its output from the
upright copy. tests/detect_parity compares the same against Ultralytics' YOLODataset."""

import io
import math
import shutil

import numpy as np
import pytest
from PIL import Image, ImageOps

import stoker
from stoker_testutil import exif_tagged as tagged

PAD = 114


def upright(data):
    return ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")


@pytest.fixture
def oriented(make_yolo, tmp_path):
    """Two data sets of the same 16 photos: `tagged` holds each as a JPEG (a few PNG and
    WebP) with EXIF orientation 1..8; `upright` holds exif_transpose of it as PNG.
    Same labels (they describe the upright image, as Ultralytics reads them)."""
    root, _, _ = make_yolo(kind="photos", images=16, classes=5, seed=12, min_side=300, max_side=520)
    src = sorted((root / "images" / "train").iterdir())
    out = {}
    for name in ("tagged", "upright"):
        (tmp_path / name / "images" / "train").mkdir(parents=True)
        shutil.copytree(root / "labels", tmp_path / name / "labels")
    for k, f in enumerate(src):
        o = k % 8 + 1
        fmt = "PNG" if k in (3, 14) else "WEBP" if k in (5, 12) else "JPEG"
        ext = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp"}[fmt]
        data = tagged(Image.open(f).convert("RGB"), o, fmt)
        (tmp_path / "tagged" / "images" / "train" / (f.stem + ext)).write_bytes(data)
        upright(data).save(tmp_path / "upright" / "images" / "train" / (f.stem + ".png"))
        out[f.stem] = o
    return tmp_path / "tagged" / "images" / "train", tmp_path / "upright" / "images" / "train", out


def batches(d, path, **kw):
    opts = dict(socket=d.socket, batch_size=4, image_size=256, task="detect", transform="letterbox",
                shuffle=False)
    opts.update(kw)
    out = []
    with stoker.Loader(path, **opts) as ld:
        for b in ld:
            out.append(dict(images=np.array(b.images), boxes=np.array(b.boxes), indices=np.array(b.indices),
                            shapes=np.array(b.shapes), ratio_pad=np.array(b.ratio_pad)))
    return out


def test_letterbox_cv2_is_the_upright_image(daemon, oriented):
    tagged_dir, upright_dir, orient = oriented
    assert sorted(set(orient.values())) == list(range(1, 9))
    d = daemon()
    a = batches(d, tagged_dir, resample="cv2")
    b = batches(d, upright_dir, resample="cv2")
    files = sorted(upright_dir.iterdir())
    for x, y in zip(a, b):
        for key in ("indices", "boxes", "shapes", "ratio_pad"):
            assert np.array_equal(x[key], y[key]), key
        # the same decoder on both sides (libjpeg-turbo), resampled the same: equal
        assert np.array_equal(x["images"], y["images"])
        for i, idx in enumerate(x["indices"]):
            w, h = Image.open(files[idx]).size
            assert x["shapes"][i, :2].tolist() == [h, w]      # ori_shape: upright


def test_letterbox_antialias_and_decoded_tier_upright(daemon, oriented):
    """The DCT-reduced decode is turned after reduction: sizes exact, pixels close to the
    upright copy's (which has no DCT step); the decoded cache tier gives the same again."""
    tagged_dir, upright_dir, _ = oriented
    d = daemon()
    a = batches(d, tagged_dir, resample="antialias")
    b = batches(d, upright_dir, resample="antialias")
    for x, y in zip(a, b):
        for key in ("indices", "boxes", "shapes", "ratio_pad"):
            assert np.array_equal(x[key], y[key]), key
        assert np.abs(x["images"].astype(int) - y["images"].astype(int)).mean() < 2.0
    c = daemon(extra=["--set", "cache_bytes=64M", "--set", "cache_decoded_side=256"])
    runs = [batches(c, tagged_dir, resample="antialias") for _ in range(2)]   # cold, then from the tier
    for x, y in zip(*runs):
        assert np.array_equal(x["images"], y["images"])
    for t in runs:
        for x, y in zip(t, b):
            for key in ("indices", "boxes", "shapes", "ratio_pad"):
                assert np.array_equal(x[key], y[key]), key
            assert np.abs(x["images"].astype(int) - y["images"].astype(int)).mean() < 2.0


def test_rect_shapes_follow_the_upright_size(daemon, oriented):
    tagged_dir, upright_dir, orient = oriented
    d = daemon()
    a = batches(d, tagged_dir, rect=True, resample="cv2")
    b = batches(d, upright_dir, rect=True, resample="cv2")
    assert len(a) == len(b) == math.ceil(16 / 4)
    for x, y in zip(a, b):
        assert x["images"].shape == y["images"].shape
        assert np.array_equal(x["indices"], y["indices"])
        assert np.array_equal(x["images"], y["images"])


def test_mosaic_samples_are_upright(daemon, oriented):
    tagged_dir, upright_dir, _ = oriented
    d = daemon()
    kw = dict(transform="mosaic", seed=5, resample="cv2")
    a = batches(d, tagged_dir, **kw)
    b = batches(d, upright_dir, **kw)
    for x, y in zip(a, b):
        assert np.array_equal(x["shapes"], y["shapes"])
        assert np.array_equal(x["boxes"], y["boxes"])
        assert np.array_equal(x["images"], y["images"])


def test_classification_ignores_the_tag(daemon, tmp_path, make_yolo):
    """torchvision's ImageFolder (PIL, no exif_transpose) sees the stored pixels: the same
    JPEG scan with tag 1 or 6 gives the same classification sample."""
    root, _, _ = make_yolo(kind="photos", images=2, classes=2, seed=3, min_side=300, max_side=400)
    f = sorted((root / "images" / "train").iterdir())[0]
    im = Image.open(f).convert("RGB")
    for o in (1, 6):
        (tmp_path / f"o{o}" / "c").mkdir(parents=True)
        (tmp_path / f"o{o}" / "c" / "x.jpg").write_bytes(tagged(im, o))
    d = daemon()
    got = []
    for o in (1, 6):
        with stoker.Loader(tmp_path / f"o{o}", socket=d.socket, batch_size=1, image_size=96,
                           transform="center_crop", shuffle=False) as ld:
            got.append(np.array(next(iter(ld)).images))
    assert np.array_equal(got[0], got[1])
