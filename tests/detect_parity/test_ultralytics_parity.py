"""stoker's evaluation batches against Ultralytics' own YOLODataset (the installed
ultralytics), image by image: rectangular batch shapes (its batch_shapes), the
order (set_rectangle's), each rank's share (its ContiguousDistributedSampler),
ori_shape / resized_shape / ratio_pad, boxes, file names, and the pixels of
resample="cv2" (bit-exact with opencv-python 5; within 1 of OpenCV 4); also for photos
carrying each EXIF orientation (JPEG, PNG, WebP), which cv2 turns upright.
Runs once, in `make check-detect-parity`."""

import os
import shutil

import numpy as np
import pytest

import stoker

ultralytics = pytest.importorskip("ultralytics")   # make check-detect-parity installs it
import cv2  # noqa: E402  (comes with ultralytics)
from ultralytics.cfg import get_cfg  # noqa: E402
from ultralytics.data.build import ContiguousDistributedSampler  # noqa: E402
from ultralytics.data.dataset import YOLODataset  # noqa: E402
from ultralytics.utils import DEFAULT_CFG, SETTINGS  # noqa: E402

from stoker_testutil import BUILD  # noqa: E402

# OpenCV 5 rounds every vertical-pass pixel as its SIMD kernel does; 4.x rounds a row's
# last partial vector exactly, which can differ by one.
PIXEL_SLACK = 0 if int(cv2.__version__.split(".")[0]) >= 5 else 1


def yolo_dataset(path, imgsz, batch, rect):
    return YOLODataset(img_path=str(path), imgsz=imgsz, augment=False, hyp=get_cfg(DEFAULT_CFG), rect=rect,
                       batch_size=batch, stride=32, pad=0.5,
                       data={"names": {i: str(i) for i in range(80)}, "nc": 80, "channels": 3})


def compare_batches(ld, ds):
    """Every batch of `ld` against `ds` item by item; returns the (H, W) of each batch."""
    index = {os.path.realpath(f): i for i, f in enumerate(ds.im_files)}
    shapes, order = [], []
    for b in ld:
        shapes.append(tuple(b.images.shape[1:3]))
        for i, p in enumerate(ld.sample_paths(b.indices)):
            k = index[p]
            order.append(k)
            u = ds[k]
            where = ds.im_files[k]
            assert tuple(u["ori_shape"]) == tuple(b.shapes[i, :2]), where
            assert tuple(u["resized_shape"]) == b.images.shape[1:3], where
            (rh, rw), (left, top) = u["ratio_pad"]
            assert [rh, rw, left, top] == b.ratio_pad[i].tolist(), where
            ref = u["img"].numpy().transpose(1, 2, 0)       # Format gives RGB CHW
            d = np.abs(ref.astype(np.int16) - b.images[i].astype(np.int16)).max()
            assert d <= PIXEL_SLACK, f"{where}: pixels differ by {d}"
            ub = u["bboxes"].numpy()
            sb = b.boxes[b.boxes[:, 0] == i]
            assert ub.shape[0] == sb.shape[0] and np.allclose(ub, sb[:, 2:], atol=1e-5), where
            assert np.array_equal(u["cls"].numpy().ravel(), sb[:, 1]), where
    return shapes, order


def test_ultralytics_settings_stay_in_the_build_tree():
    # conftest.py keeps Ultralytics offline and its settings out of the user's home.
    assert SETTINGS.file.resolve().is_relative_to(BUILD), SETTINGS.file


@pytest.fixture
def varied(make_yolo):
    """Real-photo objects on scenes of independent width and height: many aspect ratios."""
    root, _, _ = make_yolo(kind="scenes", images=27, classes=6, seed=31, background="photo")
    return root / "images" / "train"


@pytest.mark.parametrize("imgsz,batch", [(320, 4), (640, 8)])
def test_rect_batches_equal_ultralytics(daemon, varied, imgsz, batch):
    ds = yolo_dataset(varied, imgsz, batch, rect=True)
    d = daemon()
    with stoker.Loader(varied, socket=d.socket, task="detect", transform="letterbox", image_size=imgsz,
                       batch_size=batch, rect=True) as ld:
        assert len(ld) == len(ds.batch_shapes)
        shapes, order = compare_batches(ld, ds)
    assert shapes == [tuple(s) for s in ds.batch_shapes.tolist()]
    # set_rectangle reorders im_files by aspect ratio: ours is that order (no ties here)
    assert order == list(range(len(ds.im_files)))


def test_square_letterbox_equals_ultralytics(daemon, varied):
    ds = yolo_dataset(varied, 320, 8, rect=False)
    d = daemon()
    with stoker.Loader(varied, socket=d.socket, task="detect", transform="letterbox", image_size=320,
                       batch_size=8, shuffle=False) as ld:
        shapes, _ = compare_batches(ld, ds)
    assert set(shapes) == {(320, 320)}


@pytest.mark.parametrize("world", [2, 3])
def test_rect_ranks_equal_contiguous_sampler(daemon, varied, world):
    batch = 4
    ds = yolo_dataset(varied, 320, batch, rect=True)
    d = daemon()
    for rank in range(world):
        want = list(ContiguousDistributedSampler(ds, num_replicas=world, rank=rank, batch_size=batch))
        with stoker.Loader(varied, socket=d.socket, task="detect", transform="letterbox", image_size=320,
                           batch_size=batch, rect=True, rank=rank, world_size=world) as ld:
            shapes, order = compare_batches(ld, ds)
        assert order == want
        assert shapes == [tuple(ds.batch_shapes[ds.batch[want[k]]].tolist()) for k in range(0, len(want), batch)]


@pytest.fixture
def tagged(varied, tmp_path):
    """The varied photos with EXIF orientations 1..8 in turn, mostly JPEG, some PNG and WebP
    (lossless), as a camera or phone writes them."""
    from PIL import Image
    from stoker_testutil import exif_tagged as with_tag

    out = tmp_path / "tagged"
    (out / "images" / "train").mkdir(parents=True)
    shutil.copytree(varied.parent.parent / "labels", out / "labels")
    for k, f in enumerate(sorted(varied.iterdir())):
        fmt = "PNG" if k % 9 == 4 else "WEBP" if k % 9 == 7 else "JPEG"
        ext = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp"}[fmt]
        data = with_tag(Image.open(f).convert("RGB"), k % 8 + 1, fmt)
        (out / "images" / "train" / (f.stem + ext)).write_bytes(data)
    return out / "images" / "train"


@pytest.mark.parametrize("rect", [True, False])
def test_exif_orientation_equals_ultralytics(daemon, tagged, rect):
    ds = yolo_dataset(tagged, 320, 4, rect=rect)
    d = daemon()
    with stoker.Loader(tagged, socket=d.socket, task="detect", transform="letterbox", image_size=320,
                       batch_size=4, rect=rect, shuffle=False) as ld:
        shapes, order = compare_batches(ld, ds)
    if rect:
        assert shapes == [tuple(s) for s in ds.batch_shapes.tolist()]
    # some were turned: cv2's (upright) shape is not the stored one
    from PIL import Image
    turned = [f for f in ds.im_files if Image.open(f).size[::-1] != cv2.imdecode(
        np.fromfile(f, np.uint8), cv2.IMREAD_COLOR).shape[:2]]
    assert len(turned) >= 4


def test_exif_edge_cases_as_cv2(daemon, varied, tmp_path):
    """Where and how the tag is written, against cv2.imdecode itself: two Exif APP1 segments
    (the first counts), XMP before Exif, a LONG-typed tag, PNG's eXIf after IDAT, PNG's
    eXIf behind an "Exif\\0\\0" prefix (cv2: none), WebP's EXIF chunk without VP8X's flag
    (cv2: none). ori_shape is cv2's shape, and the pixels those of cv2's upright decode."""
    import io
    import struct
    import zlib

    from PIL import Image

    def app1(payload):
        return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload

    def exif(o):
        e = Image.Exif()
        e[274] = o
        return e.tobytes()                                   # "Exif\0\0" + TIFF

    def long_tag(o):
        return (b"Exif\0\0II*\0" + struct.pack("<IH", 8, 1) + struct.pack("<HHII", 0x112, 4, 1, o)
                + b"\0\0\0\0")

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    im = Image.open(sorted(varied.iterdir())[0]).convert("RGB")
    b = io.BytesIO()
    im.save(b, "JPEG", quality=95)
    j = b.getvalue()
    b = io.BytesIO()
    im.save(b, "PNG")
    p = b.getvalue()
    b = io.BytesIO()
    im.save(b, "WEBP", lossless=True, exif=exif(6))
    w = bytearray(b.getvalue())
    w[20] &= ~0x08                                           # VP8X: no EXIF flag
    iend = p.rfind(b"IEND") - 4
    files = {
        "a_two_app1.jpg": j[:2] + app1(exif(6)) + app1(exif(8)) + j[2:],
        "b_xmp_first.jpg": j[:2] + app1(b"http://ns.adobe.com/xap/1.0/\0<x/>") + app1(exif(5)) + j[2:],
        "c_long.jpg": j[:2] + app1(long_tag(7)) + j[2:],
        "d_after_idat.png": p[:iend] + chunk(b"eXIf", exif(8)[6:]) + p[iend:],
        "e_prefixed.png": p[:33] + chunk(b"eXIf", exif(6)) + p[33:],
        "f_unflagged.webp": bytes(w),
    }
    tagged = tmp_path / "edge" / "images" / "train"
    upright = tmp_path / "upright" / "images" / "train"
    tagged.mkdir(parents=True)
    upright.mkdir(parents=True)
    want = []
    for name, data in sorted(files.items()):
        (tagged / name).write_bytes(data)
        ref = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        cv2.imwrite(str(upright / (name.split(".")[0] + ".png")), ref)
        want.append(ref.shape[:2])
    assert [s != (im.height, im.width) for s in want] == [True, True, True, True, False, False]
    d = daemon()
    got = {}
    for key, path in (("tagged", tagged), ("upright", upright)):
        with stoker.Loader(path, socket=d.socket, task="detect", transform="letterbox", image_size=320,
                           batch_size=6, shuffle=False, resample="cv2") as ld:
            b = next(iter(ld))
            got[key] = (np.array(b.shapes), np.array(b.images), b.indices.tolist())
    assert got["tagged"][2] == list(range(6))
    assert [tuple(s[:2]) for s in got["tagged"][0]] == want
    assert np.array_equal(got["tagged"][0], got["upright"][0])
    assert np.abs(got["tagged"][1].astype(int) - got["upright"][1].astype(int)).max() <= PIXEL_SLACK
