"""Ultralytics' own trainer fed by a real stokerd (stoker.ultralytics): the
batch dicts against those of Ultralytics' own loader on the same real-photo
files, and a short training run (yolo11n from its yaml, on the CPU) whose
losses are finite and whose validation gives metrics. `make
check-ultralytics` runs this (once; not under tests/integration)."""

import csv
import math

import numpy as np
import pytest
import torch
from ultralytics import YOLO
from ultralytics.cfg import get_cfg
from ultralytics.data import build_dataloader, build_yolo_dataset
from ultralytics.data.utils import check_det_dataset
from ultralytics.models.yolo.detect import DetectionValidator

import stoker
from stoker.ultralytics import StokerDetectionTrainer, StokerDetectionValidator, YOLOLoader

IMGSZ = 160
STRIDE = 32


@pytest.fixture(scope="module")
def yolo(make_yolo):
    """12 real-photo images (photo crops with pasted photo patches), 4 classes."""
    path, manifest, _ = make_yolo(kind="photos", images=12, classes=4, min_side=200, max_side=400, seed=3)
    return path, manifest


def _args(path, **kw):
    return get_cfg(overrides=dict(data=str(path / "data.yaml"), imgsz=IMGSZ, workers=0, seed=0, **kw))


def _ultralytics_batches(args, data, mode, batch):
    ds = build_yolo_dataset(args, data["train"], batch, data, mode=mode, rect=mode == "val", stride=STRIDE)
    return list(build_dataloader(ds, batch, 0, shuffle=mode == "train", rank=-1))


def _stoker_batches(loader):
    """One pass, each batch's tensors copied (the views end with the next batch)."""
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


def _sig(x):
    """x's type, with those of its elements for tuples and arrays."""
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_sig(e) for e in x))
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), x.shape)
    return type(x).__name__


def _layout(b):
    """What a consumer of the dict can see besides the values: keys, tensor
    dtypes, ranks and trailing sizes, the per-image tuples' lengths and their
    elements' types (all the way down)."""
    out = {}
    for k, v in b.items():
        if isinstance(v, torch.Tensor):
            out[k] = (str(v.dtype), v.dim(), tuple(v.shape[1:]))
        else:
            out[k] = (type(v).__name__, len(v), _sig(v[0]))
    return out


@pytest.mark.parametrize("mode", ["train", "val"])
def test_batch_dicts_are_ultralytics(daemon, yolo, mode):
    """Same keys, dtypes, shapes and element types as Ultralytics' loader gives
    for the same data and arguments; every image once per epoch."""
    path, _ = yolo
    d = daemon(workers=2)
    args = _args(path)
    data = check_det_dataset(args.data)
    batch = 4
    ours = YOLOLoader(data["train"], args, data, batch_size=batch, mode=mode, rank=-1, epochs=3, stride=STRIDE,
                      socket=d.socket)
    try:
        got = _stoker_batches(ours)
        assert len(got) == len(ours) == math.ceil(12 / batch)
        assert len(ours.sampler) == len(ours.dataset) == 12
    finally:
        ours.close()
    want = _ultralytics_batches(args, data, mode, batch)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert _layout(g) == _layout(w)
        n = g["img"].shape[0]
        assert g["img"].shape[1] == 3 and g["bboxes"].shape[0] == g["cls"].shape[0] == g["batch_idx"].shape[0]
        assert set(g["batch_idx"].long().tolist()) <= set(range(n))
        assert torch.all((g["bboxes"] >= 0) & (g["bboxes"] <= 1))
        if mode == "train":
            assert tuple(g["img"].shape) == (n, 3, IMGSZ, IMGSZ)
        assert g["img"].shape[2] % STRIDE == 0 and g["img"].shape[3] % STRIDE == 0
    files = [f for b in got for f in b["im_file"]]
    assert sorted(files) == sorted(f for b in want for f in b["im_file"])


def test_val_batches_match_ultralytics_per_image(daemon, yolo):
    """Validation is deterministic: per image, the rectangular batch shape,
    original shape, ratio_pad, classes, boxes and pixels equal Ultralytics'
    own."""
    path, _ = yolo
    d = daemon(workers=2)
    args = _args(path)
    data = check_det_dataset(args.data)
    ours = YOLOLoader(data["train"], args, data, batch_size=4, mode="val", rank=-1, stride=STRIDE,
                      socket=d.socket)
    try:
        got = _stoker_batches(ours)
    finally:
        ours.close()
    want = _ultralytics_batches(args, data, "val", 4)

    def per_image(batches):
        out = {}
        for b in batches:
            for i, f in enumerate(b["im_file"]):
                m = b["batch_idx"] == i
                order = np.lexsort(b["bboxes"][m].numpy().T[::-1])
                out[f] = dict(img=b["img"][i], ori=b["ori_shape"][i], rp=b["ratio_pad"][i],
                              resized=tuple(int(x) for x in b["resized_shape"][i]),
                              cls=b["cls"][m].flatten()[order].tolist(), boxes=b["bboxes"][m][order])
        return out

    g, w = per_image(got), per_image(want)
    assert g.keys() == w.keys()
    for f in w:
        a, b = g[f], w[f]
        assert a["ori"] == b["ori"], f
        assert a["resized"] == b["resized"] == tuple(a["img"].shape[1:]), f
        (grh, grw), gpad = a["rp"]
        (wrh, wrw), wpad = b["rp"]
        assert gpad == wpad and grh == pytest.approx(wrh, rel=1e-9) and grw == pytest.approx(wrw, rel=1e-9), f
        assert a["cls"] == b["cls"], f
        assert torch.allclose(a["boxes"], b["boxes"], atol=1e-4), f
        # Validation resamples as cv2 does (resample="cv2"): the same pixels.
        assert torch.equal(a["img"], b["img"]), f"{f}: max pixel difference " \
            f"{(a['img'].int() - b['img'].int()).abs().max().item()}"


def test_trainer_trains_and_validates(daemon, yolo, tmp_path, monkeypatch):
    """YOLO("yolo11n.yaml").train(trainer=StokerDetectionTrainer): two epochs
    (the second with the mosaic closed) on the CPU, losses finite, the
    validation's metrics present, checkpoints written, and every batch from
    stokerd, the epoch set on each."""
    path, _ = yolo
    d = daemon(workers=2)
    monkeypatch.setenv("STOKER_SOCKET", d.socket)
    seen = []

    def on_batch(trainer):
        loader = trainer.train_loader
        assert isinstance(loader, YOLOLoader) and isinstance(trainer.test_loader, YOLOLoader)
        seen.append((trainer.epoch, loader._stoker.epoch))

    model = YOLO("yolo11n.yaml")
    model.add_callback("on_train_batch_end", on_batch)
    metrics = model.train(data=str(path / "data.yaml"), trainer=StokerDetectionTrainer, epochs=2, close_mosaic=1,
                          imgsz=IMGSZ, batch=4, device="cpu", workers=0, plots=False, amp=False, seed=0,
                          project=str(tmp_path), name="run", exist_ok=True, verbose=False)
    assert seen and all(e == le for e, le in seen) and {e for e, _ in seen} == {0, 1}
    assert len(seen) == 2 * math.ceil(12 / 4)
    run = tmp_path / "run"
    with open(run / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for r in rows:
        r = {k.strip(): v for k, v in r.items()}
        for k in ("train/box_loss", "train/cls_loss", "train/dfl_loss", "val/box_loss"):
            assert math.isfinite(float(r[k])), (k, r[k])
    res = metrics.results_dict
    for k in ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)"):
        assert 0.0 <= res[k] <= 1.0, (k, res[k])
    assert (run / "weights" / "last.pt").exists() and (run / "weights" / "best.pt").exists()
    st = stoker.stats(socket=d.socket)
    # Training batches and the validations (each epoch and the final one) came from the daemon.
    assert st["batches_served"] >= 2 * math.ceil(12 / 4) + 3 * math.ceil(12 / 8)

    # best.pt validated on its own, by Ultralytics' validator and by stoker's:
    # the same pixels, so the same predictions for every image and the same metrics.
    results = {}
    for name, cls in (("ultralytics", DetectionValidator), ("stoker", StokerDetectionValidator)):
        v = _recording(cls)(args=dict(model=str(run / "weights" / "best.pt"), data=str(path / "data.yaml"),
                                      imgsz=IMGSZ, batch=8, device="cpu", plots=False, project=str(tmp_path),
                                      name=f"val-{name}", exist_ok=True))
        r = v(model=str(run / "weights" / "best.pt"))
        results[name] = dict(metrics=r, seen=v.seen, instances=v.metrics.nt_per_class.tolist(),
                             loader=type(v.dataloader).__name__, preds=v.recorded)
    ours, theirs = results["stoker"], results["ultralytics"]
    assert ours["loader"] == "YOLOLoader" and theirs["loader"] != "YOLOLoader"
    assert ours["seen"] == theirs["seen"] == 12 and ours["instances"] == theirs["instances"]
    assert sum(ours["instances"]) == 50 and ours["metrics"] == theirs["metrics"]
    assert ours["preds"].keys() == theirs["preds"].keys() and len(ours["preds"]) == 12
    assert sum(len(p["conf"]) for p in ours["preds"].values()) > 0
    for f, p in theirs["preds"].items():
        q = ours["preds"][f]
        assert len(q["conf"]) == len(p["conf"]), f
        for k in ("bboxes", "conf", "cls"):
            assert torch.allclose(q[k], p[k], atol=1e-3), (f, k)


def _recording(validator):
    """`validator` keeping each image's predictions (after NMS), by file."""

    class Recording(validator):
        def update_metrics(self, preds, batch):
            if not hasattr(self, "recorded"):
                self.recorded = {}
            for si, p in enumerate(preds):
                self.recorded[batch["im_file"][si]] = {k: p[k].clone() for k in ("bboxes", "conf", "cls")}
            super().update_metrics(preds, batch)

    return Recording


@pytest.mark.parametrize("mode", ["train", "val"])
def test_ranks_get_their_share(daemon, yolo, monkeypatch, mode):
    """Under a launcher (RANK/WORLD_SIZE, as Ultralytics' DDP subprocesses
    have them) each rank's loader takes its own share: together every image
    once (12 images split evenly, so no padding)."""
    path, _ = yolo
    d = daemon(workers=2)
    args = _args(path)
    data = check_det_dataset(args.data)
    monkeypatch.setenv("WORLD_SIZE", "2")
    shares = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        ours = YOLOLoader(data["train"], args, data, batch_size=2, mode=mode, rank=rank, epochs=3,
                          stride=STRIDE, socket=d.socket)
        try:
            assert len(ours.sampler) == 6 and len(ours) == 3 and len(ours.dataset) == 12
            shares.append([f for b in ours for f in b["im_file"]])
            everything = ours.dataset.im_files
        finally:
            ours.close()
    assert len(shares[0]) == len(shares[1]) == 6 and not set(shares[0]) & set(shares[1])
    assert set(shares[0]) | set(shares[1]) == set(everything) and len(everything) == 12


# No geometric or colour change: with the mosaic closed, each training image
# is its own letterboxed sample, with exactly its own objects.
IDENTITY = dict(degrees=0.0, translate=0.0, scale=0.0, shear=0.0, perspective=0.0, fliplr=0.0, flipud=0.0,
                hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, mixup=0.0, mosaic=1.0)


@pytest.mark.parametrize("time_mode", [False, True])
def test_close_mosaic(daemon, yolo, time_mode):
    """The trainer's _close_dataloader_mosaic (dataset.close_mosaic(hyp)) takes
    the mosaic off: natively from epoch epochs - close_mosaic on, and, when
    the loader was given no epoch count (time= training), by attaching anew."""
    path, manifest = yolo
    d = daemon(workers=2)
    args = _args(path, close_mosaic=1, **IDENTITY)
    data = check_det_dataset(args.data)
    own = {e["image"].rsplit("/", 1)[1]: len(e["boxes"]) for e in manifest["images"]}

    def counts(loader):
        return [(own[f.rsplit("/", 1)[1]], int((b["batch_idx"] == i).sum())) for b in loader
                for i, f in enumerate(b["im_file"])]

    ours = YOLOLoader(data["train"], args, data, batch_size=4, mode="train", rank=-1,
                      epochs=None if time_mode else 3, stride=STRIDE, socket=d.socket)
    try:
        before = counts(ours)
        assert any(a != b for a, b in before), "mosaic images have other objects than their sample"
        ours.set_epoch(2)
        ours.dataset.close_mosaic(args)
        ours.reset()
        after = counts(ours)
        assert len(after) == 12 and all(a == b for a, b in after), after
        assert (ours._opts["mosaic"] == 0.0) == time_mode
    finally:
        ours.close()


def test_unsupported_settings_are_refused(yolo):
    path, _ = yolo
    args = _args(path, copy_paste=0.5)
    data = check_det_dataset(args.data)
    with pytest.raises(ValueError, match="copy_paste"):
        YOLOLoader(data["train"], args, data, mode="train")
