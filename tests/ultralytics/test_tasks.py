"""Ultralytics' switches and tasks in stoker.ultralytics (make
check-ultralytics): `fraction` takes the images Ultralytics' own
YOLODataset takes (which images, in which order), and what stoker does not
build yet (copy_paste)
is refused with the reason, never trained without."""

import numpy as np
import pytest
from ultralytics.cfg import get_cfg
from ultralytics.data import build_dataloader, build_yolo_dataset
from ultralytics.data.utils import check_det_dataset

import stoker
from stoker.ultralytics import YOLOLoader

IMGSZ = 160
STRIDE = 32
N = 12


@pytest.fixture(scope="module")
def yolo(make_yolo):
    """12 real-photo images (photo crops with pasted photo patches), 4 classes."""
    path, manifest, _ = make_yolo(kind="photos", images=N, classes=4, min_side=200, max_side=400, seed=3)
    return path, manifest


def _args(path, **kw):
    return get_cfg(overrides=dict(data=str(path / "data.yaml"), imgsz=IMGSZ, workers=0, seed=0, **kw))


def _files(batches):
    return [f for b in batches for f in b["im_file"]]


# 12 images: 0.25 -> 3; 0.125 -> round(1.5) = 2 and 0.375 -> round(4.5) = 4
# (Python's round: half to even); 0.01 -> at least 1; 5 (an int) -> 5 images;
# 99 (more than there are) -> all.
@pytest.mark.parametrize("fraction", [0.25, 0.125, 0.375, 0.01, 5, 99])
def test_fraction_takes_ultralytics_images(daemon, yolo, fraction):
    """Training: one epoch of stoker's loader draws each of the images
    Ultralytics' own training set holds, once; the data set's length, files
    and label scan are Ultralytics'."""
    path, _ = yolo
    d = daemon(workers=2)
    args = _args(path, fraction=fraction)
    data = check_det_dataset(args.data)
    want = build_yolo_dataset(args, data["train"], 4, data, mode="train", stride=STRIDE)
    assert 0 < len(want.im_files) <= N
    ours = YOLOLoader(data["train"], args, data, batch_size=4, mode="train", rank=-1, epochs=3, stride=STRIDE,
                      socket=d.socket)
    try:
        assert len(ours.dataset) == len(ours.sampler) == len(want.im_files)
        assert list(ours.dataset.im_files) == list(want.im_files)
        assert [lb["im_file"] for lb in ours.dataset.labels] == [lb["im_file"] for lb in want.labels]
        got = _files(list(ours))
    finally:
        ours.close()
    assert sorted(got) == sorted(want.im_files)


def test_fraction_list_applies_per_split_in_rect_validation(daemon, yolo):
    """A list [train, val, test] gives the validation split its own share
    (Ultralytics' get_split_fraction): the rect validation batches hold the
    images, in the order and with the batch shapes, of Ultralytics' own."""
    path, _ = yolo
    d = daemon(workers=2)
    args = _args(path, fraction=[1.0, 0.5])
    data = check_det_dataset(args.data)
    ds = build_yolo_dataset(args, data["train"], 4, data, mode="val", rect=True, stride=STRIDE)
    want = list(build_dataloader(ds, 4, 0, shuffle=False, rank=-1))
    assert len(ds.im_files) == N // 2
    ours = YOLOLoader(data["train"], args, data, batch_size=4, mode="val", rank=-1, stride=STRIDE,
                      socket=d.socket)
    try:
        got = [{"im_file": b["im_file"], "shape": tuple(b["img"].shape), "bboxes": b["bboxes"].clone()}
               for b in ours]
    finally:
        ours.close()
    assert _files(got) == _files(want)
    assert [g["shape"] for g in got] == [tuple(w["img"].shape) for w in want]
    for g, w in zip(got, want):
        assert g["bboxes"].shape == w["bboxes"].shape


def test_fraction_in_the_daemon(daemon, yolo):
    """The daemon's own options: images=N and fraction=f take the first
    images of the data set in its (sorted) order; a bad value is refused."""
    path, _ = yolo
    d = daemon(workers=2)
    full = stoker.Loader(str(path / "images" / "train"), socket=d.socket, task="detect", transform="letterbox",
                         image_size=IMGSZ, batch_size=4, shuffle=False)
    try:
        names = full.sample_paths(range(full.dataset_samples))
    finally:
        full.close()
    assert names == sorted(names) and len(names) == N
    for opts, k in (({"images": 7}, 7), ({"images": 99}, N), ({"fraction": 0.125}, 2), ({"fraction": 0.375}, 4)):
        ld = stoker.Loader(str(path / "images" / "train"), socket=d.socket, task="detect", transform="letterbox",
                           image_size=IMGSZ, batch_size=4, shuffle=False, **opts)
        try:
            assert ld.dataset_samples == k, opts
            seen = sorted(i for b in ld for i in b.indices.tolist())
        finally:
            ld.close()
        assert seen == list(range(k)), opts
    for bad in (0.0, -0.5, float("nan"), float("inf")):
        with pytest.raises(stoker.StokerError, match="fraction"):
            stoker.Loader(str(path / "images" / "train"), socket=d.socket, task="detect", image_size=IMGSZ,
                          batch_size=4, fraction=bad)


@pytest.mark.parametrize("kw,what", [({"copy_paste": 0.5}, "copy_paste")])
def test_switches_not_built_are_refused(yolo, kw, what):
    path, _ = yolo
    args = _args(path, **kw)
    data = check_det_dataset(args.data)
    with pytest.raises(ValueError, match=what):
        YOLOLoader(data["train"], args, data, mode="train")


def _train_images(d, path, **kw):
    ld = stoker.Loader(str(path / "images" / "train"), socket=d.socket, task="detect", image_size=IMGSZ,
                       batch_size=4, seed=7, epochs=3, **kw)
    try:
        return [(b.indices.tolist(), np.array(b.images, copy=True)) for b in ld]
    finally:
        ld.close()


def test_bgr(daemon, yolo):
    """bgr: each training sample left in BGR order with probability bgr, its
    other draws unchanged: with bgr=1 every image is bgr=0's with its
    channels reversed, with 0.5 each image is one or the other and both
    occur; bgr is for training only (refused for letterbox), and the
    trainer's bgr reaches the loader."""
    path, _ = yolo
    d = daemon(workers=2)
    rgb = _train_images(d, path)
    every = _train_images(d, path, bgr=1.0)
    half = _train_images(d, path, bgr=0.5)
    kinds = set()
    for (i0, a), (i1, b), (i2, c) in zip(rgb, every, half):
        assert i0 == i1 == i2
        assert np.array_equal(b, a[..., ::-1])
        for k in range(len(a)):
            same, flipped = np.array_equal(c[k], a[k]), np.array_equal(c[k], a[k][..., ::-1])
            assert same or flipped
            kinds.add("rgb" if same else "bgr")
    assert kinds == {"rgb", "bgr"}
    with pytest.raises(stoker.StokerError, match="bgr"):
        stoker.Loader(str(path / "images" / "train"), socket=d.socket, task="detect", transform="letterbox",
                      image_size=IMGSZ, batch_size=4, bgr=0.5)
    args = _args(path, bgr=0.25)
    data = check_det_dataset(args.data)
    ours = YOLOLoader(data["train"], args, data, batch_size=4, mode="train", rank=-1, socket=d.socket)
    try:
        assert ours._opts["bgr"] == 0.25
    finally:
        ours.close()
