"""rect=True training (Ultralytics' semantics) from stoker against Ultralytics'
own loader on real-photo scenes of many aspect ratios: the trainer's
dataloader (build_yolo_dataset with rect, its get_dataloader's shuffle rule),
batch by batch: the order, each batch's shape, boxes, classes, metadata and
pixels without random geometry; with random rotation, shear, scale,
translation and flips, sample by sample with stoker's draws injected into
Ultralytics' RandomPerspective and RandomFlip; the random parts (translate,
scale, flips, HSV) by their statistics over several epochs; and one rect=True
epoch through Ultralytics' own trainer (make check-ultralytics)."""

import csv
import math
import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch
from ultralytics import YOLO
from ultralytics.cfg import get_cfg
from ultralytics.data import augment
from ultralytics.data import build_dataloader, build_yolo_dataset
from ultralytics.data.utils import check_det_dataset
from ultralytics.utils.torch_utils import init_seeds

from stoker.ultralytics import StokerDetectionTrainer, YOLOLoader

STRIDE = 32
DRAWS = pathlib.Path(os.environ.get("STOKER_BUILD", "build")) / "tests" / "detectdraws"
# No random geometry, flip or colour: every training image is deterministic.
FLAT = dict(degrees=0.0, translate=0.0, scale=0.0, shear=0.0, perspective=0.0, fliplr=0.0, flipud=0.0,
            hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)


@pytest.fixture(scope="module")
def scenes(make_yolo):
    """16 real-photo scenes of independent width and height (120..400 px): many aspect ratios."""
    path, _, _ = make_yolo(kind="scenes", images=16, classes=6, seed=31, background="photo", min_side=120,
                           max_side=400)
    return path


def _args(path, **kw):
    return get_cfg(overrides=dict(data=str(path / "data.yaml"), workers=0, seed=0, rect=True, **kw))


def _ultralytics(args, data, batch):
    """DetectionTrainer.get_dataloader's training loader: build_yolo_dataset takes cfg.rect
    (pad 0, mosaic, mixup and cutmix set to 0), and the shuffle is off as the shapes differ."""
    ds = build_yolo_dataset(args, data["train"], batch, data, mode="train", rect=False, stride=STRIDE)
    assert ds.rect and not np.all(ds.batch_shapes == ds.batch_shapes[0])
    return ds, build_dataloader(ds, batch, 0, shuffle=False, rank=-1)


def _stoker(args, data, batch, socket, **kw):
    ld = YOLOLoader(data["train"], args, data, batch_size=batch, mode="train", rank=-1, epochs=3, stride=STRIDE,
                    socket=socket, **kw)
    assert ld._opts["shuffle"] is False and ld._opts["rect"] and ld._opts["pad"] == 0.0
    assert ld._opts["mosaic"] == ld._opts["mixup"] == ld._opts["cutmix"] == 0.0
    return ld


def _pass(loader):
    """One pass, each batch's tensors copied (stoker's views end with the next batch)."""
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


@pytest.mark.parametrize("imgsz,batch,fraction", [(160, 4, 1.0), (224, 3, 1.0), (192, 4, 0.75)])
def test_rect_training_batches_equal_ultralytics(daemon, scenes, imgsz, batch, fraction):
    """Without random geometry, flips or colour, every rect training batch equals
    Ultralytics' own: the same files in the same order (aspect ratio; fraction's first
    images), each batch's shape, classes, boxes, batch_idx, ori_shape, resized_shape,
    ratio_pad and pixels. RandomPerspective centres each load_image output in its
    batch's shape: on whole pixels (even padding) the bytes are equal; half a pixel off
    (odd padding), within 1 (OpenCV 5's float bilinear rounds half to even, stoker's
    fixed-point warp half up)."""
    d = daemon(workers=2)
    args = _args(scenes, imgsz=imgsz, fraction=fraction, **FLAT)
    data = check_det_dataset(args.data)
    ours = _stoker(args, data, batch, d.socket, resample="cv2")
    try:
        got = _pass(ours)
    finally:
        ours.close()
    ds, theirs = _ultralytics(args, data, batch)
    want = _pass(theirs)
    n = round(16 * fraction)
    assert len(ds) == n and len(got) == len(want) == math.ceil(n / batch)
    whole = half = 0
    for k, (g, w) in enumerate(zip(got, want)):
        assert g["im_file"] == w["im_file"], k
        assert g["img"].shape == w["img"].shape, k
        assert list(g["img"].shape[2:]) == ds.batch_shapes[k].tolist(), k
        assert torch.equal(g["cls"], w["cls"]) and torch.equal(g["batch_idx"], w["batch_idx"]), k
        assert torch.allclose(g["bboxes"], w["bboxes"], atol=1e-5, rtol=0), k
        assert g["ori_shape"] == w["ori_shape"], k
        assert [tuple(int(v) for v in r) for r in g["resized_shape"]] == \
            [tuple(int(v) for v in r) for r in w["resized_shape"]], k
        for a, b in zip(g["ratio_pad"], w["ratio_pad"]):
            assert a == pytest.approx(b, rel=1e-12), k
        out_h, out_w = g["img"].shape[2:]
        for i, (h0, w0) in enumerate(g["ori_shape"]):
            r = imgsz / max(h0, w0)
            w1, h1 = min(math.ceil(w0 * r), imgsz), min(math.ceil(h0 * r), imgsz)
            diff = (g["img"][i].int() - w["img"][i].int()).abs().max().item()
            if (out_w - w1) % 2 == 0 and (out_h - h1) % 2 == 0:
                assert diff == 0, (k, i, g["im_file"][i])
                whole += 1
            else:
                assert diff <= 1, (k, i, g["im_file"][i], diff)
                half += 1
    assert whole > 0 and half > 0


class _Injected:
    """Ultralytics' `random` inside ultralytics.data.augment, serving one sample's
    draws from stoker: uniform(0, 1) is the mix transforms' p test (0.5: never under
    p 0) and Format's bgr test (0.5 > bgr 0: its usual RGB); any other uniform is
    RandomPerspective's next draw, random() RandomFlip's (vertical, then horizontal)."""

    def __init__(self):
        self.affine, self.flips = [], []

    def uniform(self, a, b):
        if (a, b) == (0, 1):
            return 0.5
        v = self.affine.pop(0)
        assert a - 1e-6 <= v <= b + 1e-6, (a, b, v)
        return v

    def random(self):
        return self.flips.pop(0)


GEOMETRY = dict(degrees=10.0, translate=0.1, scale=0.5, shear=2.0, fliplr=0.5, flipud=0.5, hsv_h=0.0, hsv_s=0.0,
                hsv_v=0.0)


def test_rect_training_samples_with_stokers_draws_equal_ultralytics(daemon, scenes, monkeypatch):
    """Random rotation, shear, scale, translation and both flips under rect, each sample's
    draws (build/tests/detectdraws: detect.c's own plan, from the sample's Philox stream)
    injected into Ultralytics' own RandomPerspective and RandomFlip: over 3 epochs every
    training sample equals Ultralytics' for its file (its batch's shape, classes, boxes
    within 1e-4 of the image, stoker's matrix in double against Ultralytics' float32;
    pixels within 1, its fixed-point bilinear against OpenCV 5's float one)."""
    d = daemon(workers=2)
    imgsz, batch, epochs = 160, 4, 3
    args = _args(scenes, imgsz=imgsz, **GEOMETRY)
    data = check_det_dataset(args.data)
    ours = _stoker(args, data, batch, d.socket, resample="cv2")
    got = []
    try:
        files = ours._stoker.sample_paths(range(len(ours.dataset)))
        for e in range(epochs):
            ours.set_epoch(e)
            got.append(_pass(ours))
    finally:
        ours.close()
    index = {f: i for i, f in enumerate(files)}
    lines = [f"0 {e} {index[f]} {b['img'].shape[0]}" for e, ep in enumerate(got) for b in ep for f in b["im_file"]]
    out = subprocess.run([str(DRAWS), str(imgsz)] + [str(getattr(args, k)) for k in (
        "degrees", "translate", "scale", "shear", "perspective", "flipud", "fliplr")],
        input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout.split("\n")
    draws = iter([float(v) for v in line.split()] for line in out if line)

    ds, _ = _ultralytics(args, data, batch)
    at = {f: k for k, f in enumerate(ds.im_files)}
    fake = _Injected()
    monkeypatch.setattr(augment, "random", fake)
    flipped = rotated = 0
    for ep in got:
        for b in ep:
            for i, f in enumerate(b["im_file"]):
                v = next(draws)
                fake.affine, fake.flips = v[:8], [0.0 if flip else 1.0 for flip in v[8:10]]
                w = ds[at[f]]
                assert not fake.affine and not fake.flips, f
                flipped += v[8] + v[9]
                rotated += abs(v[2]) > 1
                m = b["batch_idx"] == i
                assert w["img"].shape == b["img"][i].shape, f
                assert torch.equal(b["cls"][m], w["cls"]), f
                assert torch.allclose(b["bboxes"][m], w["bboxes"], atol=1e-4, rtol=0), f
                diff = (b["img"][i].int() - w["img"].int()).abs()
                assert diff.max().item() <= 1, (f, diff.max().item())
    assert next(draws, None) is None
    assert flipped > 20 and rotated > 20


def test_square_training_without_mosaic_equals_ultralytics(daemon, scenes):
    """The same path square (rect=False, mosaic 0: what close_mosaic's last epochs
    train on): each sample centred in imgsz x imgsz as Ultralytics' RandomPerspective
    puts load_image's output (no LetterBox before it), boxes equal, pixels equal on
    whole-pixel shifts and within 1 half a pixel off."""
    d = daemon(workers=2)
    imgsz = 160
    args = get_cfg(overrides=dict(data=str(scenes / "data.yaml"), workers=0, seed=0, imgsz=imgsz, mosaic=0.0,
                                  mixup=0.0, cutmix=0.0, **FLAT))
    data = check_det_dataset(args.data)
    ours = YOLOLoader(data["train"], args, data, batch_size=4, mode="train", rank=-1, epochs=3, stride=STRIDE,
                      socket=d.socket, resample="cv2")
    try:
        got = _pass(ours)
    finally:
        ours.close()
    ds = build_yolo_dataset(args, data["train"], 4, data, mode="train", rect=False, stride=STRIDE)
    at = {f: k for k, f in enumerate(ds.im_files)}
    whole = half = 0
    for b in got:
        for i, f in enumerate(b["im_file"]):
            w = ds[at[f]]
            m = b["batch_idx"] == i
            assert torch.equal(b["cls"][m], w["cls"]), f
            assert torch.allclose(b["bboxes"][m], w["bboxes"], atol=1e-5, rtol=0), f
            (h0, w0), r = w["ori_shape"], imgsz / max(w["ori_shape"])
            w1, h1 = min(math.ceil(w0 * r), imgsz), min(math.ceil(h0 * r), imgsz)
            diff = (b["img"][i].int() - w["img"].int()).abs().max().item()
            if (imgsz - w1) % 2 == 0 and (imgsz - h1) % 2 == 0:
                assert diff == 0, f
                whole += 1
            else:
                assert diff <= 1, (f, diff)
                half += 1
    assert whole > 0 and half > 0


def _stats(batches):
    """Per image: its number of boxes, their mean area (normalised) and mean centre x."""
    out = []
    for b in batches:
        for i in range(b["img"].shape[0]):
            m = b["batch_idx"] == i
            bb = b["bboxes"][m]
            out.append((float(m.sum()), float((bb[:, 2] * bb[:, 3]).mean()) if len(bb) else math.nan,
                        float(bb[:, 0].mean()) if len(bb) else math.nan))
    return np.array(out)


def test_rect_training_random_parts_as_ultralytics(daemon, scenes):
    """Ultralytics' default augmentation under rect (translate 0.1, scale 0.5, fliplr
    0.5, HSV): over 8 epochs each, stoker's boxes per image, their area and their centre
    (flips) have Ultralytics' distribution (means within 5 standard errors), every
    batch in Ultralytics' shape, every box inside its image; and the draws do vary
    (the same image differs between epochs)."""
    d = daemon(workers=2)
    imgsz, batch, epochs = 160, 4, 8
    args = _args(scenes, imgsz=imgsz)
    data = check_det_dataset(args.data)
    ours = _stoker(args, data, batch, d.socket)
    got = []
    try:
        for e in range(epochs):
            ours.set_epoch(e)
            got.append(_pass(ours))
    finally:
        ours.close()
    init_seeds(0)
    ds, theirs = _ultralytics(args, data, batch)
    want = [_pass(theirs) for _ in range(epochs)]
    for ep in got:
        assert [list(b["img"].shape[2:]) for b in ep] == ds.batch_shapes.tolist()
        for b in ep:
            assert torch.all((b["bboxes"] >= 0) & (b["bboxes"] <= 1))
    assert not torch.equal(got[0][0]["img"], got[1][0]["img"])
    a = _stats([b for ep in got for b in ep])
    w = _stats([b for ep in want for b in ep])
    for k, name in enumerate(("boxes per image", "box area", "box centre x")):
        x, y = a[:, k][~np.isnan(a[:, k])], w[:, k][~np.isnan(w[:, k])]
        se = math.sqrt(x.var() / len(x) + y.var() / len(y))
        assert abs(x.mean() - y.mean()) < 5 * se, (name, x.mean(), y.mean(), se)


def test_rect_epoch_through_ultralytics_trainer(daemon, scenes, tmp_path, monkeypatch):
    """YOLO("yolo11n.yaml").train(rect=True, trainer=StokerDetectionTrainer): one epoch on
    the CPU, every training batch from stokerd in the shapes of Ultralytics' own rect
    batches, in their order, finite losses, the validation's metrics."""
    d = daemon(workers=2)
    monkeypatch.setenv("STOKER_SOCKET", d.socket)
    seen, batch_of = [], YOLOLoader._batch

    def recorded(self, b):
        out = batch_of(self, b)
        if self.mode == "train":
            seen.append((tuple(out["img"].shape[2:]), tuple(out["im_file"])))
        return out

    monkeypatch.setattr(YOLOLoader, "_batch", recorded)
    model = YOLO("yolo11n.yaml")
    metrics = model.train(data=str(scenes / "data.yaml"), trainer=StokerDetectionTrainer, epochs=1, rect=True,
                          imgsz=160, batch=4, device="cpu", workers=0, plots=False, amp=False, seed=0,
                          project=str(tmp_path), name="run", exist_ok=True, verbose=False)
    args = _args(scenes, imgsz=160)
    data = check_det_dataset(args.data)
    ds, _ = _ultralytics(args, data, 4)
    assert [s for s, _ in seen] == [tuple(x) for x in ds.batch_shapes.tolist()]
    assert [f for _, files in seen for f in files] == ds.im_files
    res = metrics.results_dict
    for k in ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)"):
        assert 0.0 <= res[k] <= 1.0, (k, res[k])
    with open(tmp_path / "run" / "results.csv") as f:
        row = {k.strip(): v for k, v in next(csv.DictReader(f)).items()}
    for k in ("train/box_loss", "train/cls_loss", "train/dfl_loss"):
        assert math.isfinite(float(row[k])), (k, row[k])
