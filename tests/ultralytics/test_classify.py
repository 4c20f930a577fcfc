"""YOLO-cls through Ultralytics' own ClassificationTrainer fed by stokerd
(stoker.ultralytics.StokerClassificationTrainer): the evaluation batches
against Ultralytics' own ClassificationDataset (Resize + CenterCrop) within
1 per pixel, the training pipeline's translation, what is not built refused,
and two training epochs of yolo11n-cls on the CPU (each epoch its own
order and augmentations)."""

import csv
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from ultralytics import YOLO
from ultralytics.cfg import get_cfg
from ultralytics.data.dataset import ClassificationDataset

from stoker.transforms import translate
from stoker.ultralytics import ClassifyLoader, StokerClassificationTrainer, StokerClassificationValidator
from stoker_testutil import REPO

IMGSZ = 64


@pytest.fixture(scope="module")
def cls_root(tmp_path_factory):
    """An Ultralytics classify root: train/ and val/, 3 classes of real photos each."""
    root = tmp_path_factory.mktemp("cls")
    for split, seed in (("train", 1), ("val", 2)):
        r = subprocess.run([sys.executable, str(REPO / "scripts" / "mkdataset.py"), str(root / split), "--classes",
                            "3", "--per-class", "8", "--seed", str(seed), "--min-side", "80", "--max-side", "200"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    return root


def test_eval_batches_within_one_of_ultralytics(daemon, cls_root):
    d = daemon()
    args = get_cfg(overrides=dict(imgsz=IMGSZ))
    ds = ClassificationDataset(str(cls_root / "val"), args, augment=False, prefix="val")
    ld = ClassifyLoader(ds, batch_size=8, mode="val", socket=d.socket)
    try:
        at = 0
        for batch in ld:
            imgs, cls = batch["img"], batch["cls"]
            assert imgs.dtype == torch.float32 and tuple(imgs.shape[1:]) == (3, IMGSZ, IMGSZ)
            for k in range(len(cls)):
                want = ds[at + k]
                assert int(cls[k]) == want["cls"]
                diff = (imgs[k] - want["img"]).abs().max().item() * 255
                assert diff <= 1.0 + 1e-4, f"sample {at + k}: {diff:.3f} levels"
            at += len(cls)
        assert at == len(ds.samples)
    finally:
        ld.close()


def test_training_transforms_translated_with_hyper_parameters(cls_root):
    args = get_cfg(overrides=dict(imgsz=IMGSZ, scale=0.4, fliplr=0.3, flipud=0.1, erasing=0.25, hsv_h=0.02,
                                  hsv_s=0.5, hsv_v=0.3, auto_augment=None))
    ds = ClassificationDataset(str(cls_root / "train"), args, augment=True, prefix="train")
    ops = dict(translate(ds.torch_transforms))
    assert ops["RandomResizedCrop"]["scale"] == (0.6, 1)  # (1 - scale, 1)
    assert ops["RandomHorizontalFlip"]["p"] == 0.3 and ops["RandomVerticalFlip"]["p"] == 0.1
    assert ops["RandomErasing"]["p"] == 0.25
    cj = ops["ColorJitter"]
    assert cj["brightness"] == (0.7, 1.3) and cj["saturation"] == (0.5, 1.5) and cj["hue"] == (-0.02, 0.02)


def test_not_built_refused(daemon, cls_root):
    d = daemon()
    args = get_cfg(overrides=dict(imgsz=IMGSZ, fraction=0.5))
    ds = ClassificationDataset(str(cls_root / "train"), args, augment=True, prefix="train")
    with pytest.raises(ValueError, match="fraction"):
        ClassifyLoader(ds, batch_size=8, socket=d.socket)


def test_two_epochs_through_ultralytics_trainer(daemon, cls_root, tmp_path, monkeypatch):
    d = daemon()
    monkeypatch.setenv("STOKER_SOCKET", str(d.socket))
    trainer = type("T", (StokerClassificationTrainer,), {"socket": str(d.socket)})
    model = YOLO("yolo11n-cls.yaml")
    # each epoch's first training batch: Ultralytics sets the sampler's epoch
    # only under DDP, so the trainer must, or every epoch replays the first
    seen = []

    def first_batch(tr):
        if not seen or seen[-1][0] != tr.epoch:
            b = next(iter(tr.train_loader))
            seen.append((tr.epoch, tr.train_loader._epoch, b["cls"].clone(), b["img"].clone()))

    model.add_callback("on_train_epoch_start", first_batch)
    model.train(data=str(cls_root), trainer=trainer, epochs=2, imgsz=IMGSZ, batch=8, device="cpu", workers=0,
                project=str(tmp_path), name="run", exist_ok=True, plots=False, auto_augment="randaugment",
                erasing=0.4, amp=False, val=True)
    t = model.trainer
    assert isinstance(t.train_loader, ClassifyLoader) and isinstance(t.test_loader, ClassifyLoader)
    assert "metrics/accuracy_top1" in t.metrics and 0.0 <= t.metrics["metrics/accuracy_top1"] <= 1.0
    with open(t.csv) as f:
        rows = list(csv.DictReader(f))
    losses = [float(v) for r in rows for k, v in r.items() if "loss" in k.strip()]
    assert len(rows) == 2 and losses and all(np.isfinite(losses)), rows
    assert [(e, le) for e, le, _, _ in seen] == [(0, 0), (1, 1)]
    (_, _, c0, i0), (_, _, c1, i1) = seen
    assert not (torch.equal(c0, c1) and torch.equal(i0, i1))  # another order or other augmentations
    # a validation on its own, through StokerClassificationValidator
    validator = type("V", (StokerClassificationValidator,), {"socket": str(d.socket)})
    m = YOLO(str(t.last)).val(data=str(cls_root), validator=validator, imgsz=IMGSZ, batch=8, device="cpu",
                              workers=0, plots=False, project=str(tmp_path), name="val")
    assert 0.0 <= m.top1 <= 1.0 and m.top5 == 1.0  # 3 classes: top-5 always holds
    shutil.rmtree(tmp_path / "run", ignore_errors=True)
