"""Segment, pose and OBB labels in stokerd's YOLO data sets (make
check-ultralytics): real photos (data/photos) with polygons and keypoints
written by hand (tests/ultralytics/instances, with its notice), read by the
daemon with option yolo_task as Ultralytics' own YOLODataset(task=...)
reads them: the same images kept (a corrupt label file drops its image),
in the same order, with the same classes and boxes per image in its
rect=True validation batches; kpt_shape and flip_idx checked at attach."""

import pathlib
import shutil

import numpy as np
import pytest
import torch
from ultralytics.cfg import get_cfg
from ultralytics.data import build_dataloader, build_yolo_dataset
from ultralytics.data.utils import check_det_dataset

import stoker

HERE = pathlib.Path(__file__).parent
PHOTOS = HERE.parent.parent / "data" / "photos"
IMGSZ = 160
STRIDE = 32
# The photos the labels describe, and a copy of one whose label file is corrupt.
IMAGES = {"astronaut.png": "astronaut.png", "chelsea.png": "chelsea.png", "coffee.png": "coffee.png",
          "rocket.jpg": "rocket.jpg", "hubble_deep_field.jpg": "hubble_deep_field.jpg", "bad.png": "astronaut.png"}
KPT_SHAPE = [4, 3]
FLIP_IDX = [1, 0, 3, 2]


def make_instances_set(root, task):
    """A YOLO data set (data.yaml; train and val are the same images) of the
    photos with the task's hand-written labels."""
    labels = HERE / "instances" / task
    (root / "images" / "val").mkdir(parents=True)
    (root / "labels" / "val").mkdir(parents=True)
    for name, src in IMAGES.items():
        shutil.copy(PHOTOS / src, root / "images" / "val" / name)
        txt = labels / (pathlib.Path(name).stem + ".txt")
        if txt.exists():
            shutil.copy(txt, root / "labels" / "val" / txt.name)
    yaml = [f"path: {root}", "train: images/val", "val: images/val"]
    if task == "pose":
        yaml += ["kpt_shape: [4, 3]", "flip_idx: [1, 0, 3, 2]", "names:", "  0: thing"]
    else:
        yaml += ["names:", "  0: a", "  1: b", "  2: c", "  3: d"]
    (root / "data.yaml").write_text("\n".join(yaml) + "\n")
    return root / "data.yaml"


@pytest.fixture(scope="module", params=["segment", "pose", "obb"])
def instances_set(request, tmp_path_factory):
    task = request.param
    return task, make_instances_set(tmp_path_factory.mktemp(task), task)


def _args(yaml, task, **kw):
    return get_cfg(overrides=dict(data=str(yaml), task=task, imgsz=IMGSZ, workers=0, seed=0, **kw))


def ultralytics_val_batches(yaml, task, batch, **kw):
    args = _args(yaml, task, **kw)
    data = check_det_dataset(args.data)
    ds = build_yolo_dataset(args, data["val"], batch, data, mode="val", rect=True, stride=STRIDE)
    return list(build_dataloader(ds, batch, 0, shuffle=False, rank=-1))


def task_options(task):
    opts = {"yolo_task": task}
    if task == "pose":
        opts.update(kpt_shape=",".join(map(str, KPT_SHAPE)), flip_idx=",".join(map(str, FLIP_IDX)))
    return opts


def stoker_loader(d, yaml, task, batch, **kw):
    return stoker.Loader(str(yaml), socket=d.socket, task="detect", transform="letterbox", split="val",
                         image_size=IMGSZ, batch_size=batch, shuffle=False, rect=True, stride=STRIDE, pad=0.5,
                         resample="cv2", rank=0, world_size=1, **task_options(task), **kw)


def test_labels_and_images_as_ultralytics(daemon, instances_set):
    """The images Ultralytics keeps (bad.png's corrupt label file drops it;
    a photo without a label file stays, without objects), in its rect
    order, each with its classes and boxes (polygons' bounding boxes for
    segment and OBB), letterboxed as its validation loader does."""
    task, yaml = instances_set
    d = daemon(workers=2)
    ld = stoker_loader(d, yaml, task, 2)
    try:
        assert ld.dataset_samples == len(IMAGES) - 1
        got = []
        for b in ld:
            files = ld.sample_paths(b.indices.tolist())
            boxes = torch.from_numpy(np.array(b.boxes))
            for i, f in enumerate(files):
                m = boxes[:, 0] == i
                got.append((pathlib.Path(f).name, boxes[m][:, 1].tolist(), boxes[m][:, 2:6],
                            torch.from_numpy(np.array(b.images[i]))))
    finally:
        ld.close()
    want = []
    for b in ultralytics_val_batches(yaml, task, 2):
        for i, f in enumerate(b["im_file"]):
            m = b["batch_idx"] == i
            want.append((pathlib.Path(f).name, b["cls"][m].flatten().tolist(), b["bboxes"][m],
                         b["img"][i].permute(1, 2, 0)))
    assert [g[0] for g in got] == [w[0] for w in want]
    assert "bad.png" not in [g[0] for g in got]
    for (name, gc, gb, gi), (_, wc, wb, wi) in zip(got, want):
        assert torch.equal(gi, wi), name
        if task == "obb":  # its boxes are xywhr: test_val_batches_equal_ultralytics
            assert gc == wc, name
            continue
        order_g = np.lexsort(gb.numpy().T[::-1])
        order_w = np.lexsort(wb.numpy().T[::-1])
        assert [gc[k] for k in order_g] == [wc[k] for k in order_w], name
        assert torch.allclose(gb[order_g], wb[order_w], atol=1e-5), name


def test_corrupt_label_files_are_counted(daemon, instances_set):
    task, yaml = instances_set
    d = daemon(workers=1)
    ld = stoker_loader(d, yaml, task, 2)
    try:
        assert ld.label_errors == 1
    finally:
        ld.close()


@pytest.mark.parametrize("opts,why", [
    ({"yolo_task": "pose"}, "kpt_shape"),
    ({"yolo_task": "pose", "kpt_shape": "4,4"}, "kpt_shape"),
    ({"yolo_task": "pose", "kpt_shape": "0,3"}, "kpt_shape"),
    ({"yolo_task": "pose", "kpt_shape": "4,3", "flip_idx": "1,0,3"}, "flip_idx has 3 entries"),
    ({"yolo_task": "pose", "kpt_shape": "4,3", "flip_idx": "1,0,3,4"}, "flip_idx.* is not a keypoint"),
    ({"yolo_task": "segment", "kpt_shape": "4,3"}, "options of yolo_task pose"),
    ({"yolo_task": "segment", "transform": "mosaic", "copy_paste": 0.5, "copy_paste_mode": "mixup", "rect": True,
      "mosaic": 0.0, "mixup": 0.0}, "copy_paste_mode mixup is not built for rect"),
    ({"yolo_task": "segment", "transform": "mosaic", "copy_paste": 1.5}, "copy_paste must be in"),
    ({"yolo_task": "segment", "mask_ratio": 3}, "mask_ratio 3 is not a power of two"),
    ({"yolo_task": "segment", "mask_ratio": 64}, "mask_ratio 64"),
    ({"yolo_task": "segment", "overlap_mask": False}, "overlap_mask false"),
    ({"yolo_task": "pose", "kpt_shape": "4,3", "mask_ratio": 4}, "options of yolo_task segment"),
])
def test_bad_instance_options_are_refused(daemon, tmp_path, opts, why):
    yaml = make_instances_set(tmp_path, "pose")
    d = daemon(workers=1)
    kw = dict(transform="letterbox", split="val", image_size=IMGSZ, batch_size=2, shuffle=False)
    kw.update(opts)
    with pytest.raises(stoker.StokerError, match=why):
        stoker.Loader(str(yaml), socket=d.socket, task="detect", **kw)


def _per_image(batches, task):
    """Each image's tensors out of the batch dicts: its pixels, classes,
    boxes, and its masks (segment) or keypoints (pose)."""
    out = {}
    for b in batches:
        for i, f in enumerate(b["im_file"]):
            m = b["batch_idx"] == i
            d = dict(img=b["img"][i], cls=b["cls"][m], bboxes=b["bboxes"][m], rp=b["ratio_pad"][i],
                     ori=b["ori_shape"][i])
            if task == "segment":
                d.update(masks=b["masks"][i], sem=b["sem_masks"][i])
            elif task == "pose":
                d.update(kpts=b["keypoints"][m])
            out[pathlib.Path(f).name] = d
    return out


def test_val_batches_equal_ultralytics(daemon, instances_set):
    """StokerSegmentationValidator's / StokerPoseValidator's loader against
    Ultralytics' YOLODataset(task=..., rect=True) with its collate: the same
    keys and dtypes, and per image the same pixels, classes and boxes in
    the same order, the same overlap masks (mask_ratio 4) and sem_masks,
    the same keypoints, or the same xywhr boxes (obb)."""
    from stoker.ultralytics import YOLOLoader

    task, yaml = instances_set
    d = daemon(workers=2)
    args = _args(yaml, task)
    data = check_det_dataset(args.data)
    ld = YOLOLoader(data["val"], args, data, batch_size=2, mode="val", rank=-1, stride=STRIDE, socket=d.socket)
    try:
        got = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in ld]
    finally:
        ld.close()
    want = ultralytics_val_batches(yaml, task, 2)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert set(g) == set(w)
        for k, v in w.items():
            if isinstance(v, torch.Tensor):
                assert g[k].dtype == v.dtype and g[k].shape == v.shape, k
        assert [pathlib.Path(f).name for f in g["im_file"]] == [pathlib.Path(f).name for f in w["im_file"]]
    g, w = _per_image(got, task), _per_image(want, task)
    assert g.keys() == w.keys()
    for name in w:
        a, b = g[name], w[name]
        assert a["ori"] == b["ori"] and a["rp"] == b["rp"], name
        assert torch.equal(a["img"], b["img"]), name
        assert torch.equal(a["cls"], b["cls"]), name
        assert torch.allclose(a["bboxes"], b["bboxes"], atol=1e-5), name
        if task == "segment":
            assert int(a["masks"].max()) == len(a["cls"]), name  # every object has cells of its own
            assert torch.equal(a["masks"], b["masks"]), f"{name}: {(a['masks'] != b['masks']).sum()} mask cells"
            assert torch.equal(a["sem"], b["sem"]), name
        elif task == "pose":
            assert len(a["kpts"]) == len(a["cls"]), name
            assert torch.equal(a["kpts"], b["kpts"]), f"{name}: {(a['kpts'] - b['kpts']).abs().max()}"


def test_validator_on_its_own_equals_ultralytics(daemon, instances_set, monkeypatch):
    """model.val(validator=StokerSegmentationValidator / StokerPoseValidator)
    runs Ultralytics' own validator over stoker's batches (masks, keypoints,
    sem_masks as its metrics read them): the same metrics as with its own
    loader. The model is untrained (from its yaml, CPU): what this shows is
    that the validator runs on stoker's batches; their equality with
    Ultralytics' own is test_val_batches_equal_ultralytics'."""
    from ultralytics import YOLO

    from stoker.ultralytics import StokerOBBValidator, StokerPoseValidator, StokerSegmentationValidator

    task, yaml = instances_set
    d = daemon(workers=2)
    monkeypatch.setenv("STOKER_SOCKET", d.socket)
    torch.manual_seed(0)
    model = YOLO({"segment": "yolo11n-seg.yaml", "pose": "yolo11n-pose.yaml", "obb": "yolo11n-obb.yaml"}[task])
    if task == "pose":  # the head for the data set's kpt_shape
        from ultralytics.nn.tasks import PoseModel

        model.model = PoseModel("yolo11n-pose.yaml", nc=1, data_kpt_shape=tuple(KPT_SHAPE), verbose=False)
    kw = dict(data=str(yaml), imgsz=IMGSZ, batch=2, device="cpu", plots=False, workers=0, conf=0.0001,
              verbose=False)
    validator = {"segment": StokerSegmentationValidator, "pose": StokerPoseValidator, "obb": StokerOBBValidator}
    ours = model.val(validator=validator[task], **kw)
    theirs = model.val(**kw)
    assert ours.results_dict == pytest.approx(theirs.results_dict, abs=1e-9)
    assert ours.results_dict.keys() == theirs.results_dict.keys()


def test_training_batches_have_ultralytics_keys(daemon, instances_set):
    """The training loader's batches (mosaic, affine, flips; mixup and cutmix on): the
    keys and dtypes of Ultralytics' own training batches for the task, rows
    that lie in the image, one overlap mask per image whose objects each
    hold cells (segment), keypoints per row (pose), xywhr per row (obb)."""
    from stoker.ultralytics import YOLOLoader

    task, yaml = instances_set
    d = daemon(workers=2)
    args = _args(yaml, task, mixup=0.5, cutmix=0.5, fliplr=0.5, flipud=0.2)
    data = check_det_dataset(args.data)
    ds = build_yolo_dataset(args, data["train"], 2, data, mode="train", stride=STRIDE)
    want = next(iter(build_dataloader(ds, 2, 0, shuffle=False, rank=-1)))
    ld = YOLOLoader(data["train"], args, data, batch_size=2, mode="train", rank=-1, epochs=3, stride=STRIDE,
                    socket=d.socket)
    rows = 0
    try:
        for ep in range(2):
            ld.set_epoch(ep)
            for b in ld:
                assert set(want) <= set(b), set(want) - set(b)
                for k, v in want.items():
                    if isinstance(v, torch.Tensor) and k != "img":
                        assert b[k].dtype == v.dtype and b[k].shape[1:] == v.shape[1:], (k, b[k].shape, v.shape)
                n = len(b["cls"])
                rows += n
                assert b["bboxes"].shape[0] == n and b["batch_idx"].shape == (n,)
                assert bool((b["bboxes"][:, :2] >= 0).all() and (b["bboxes"][:, :2] <= 1).all())
                if task == "segment":
                    assert b["masks"].shape == (len(b["im_file"]), IMGSZ // 4, IMGSZ // 4)
                    for i in range(len(b["im_file"])):
                        k = int((b["batch_idx"] == i).sum())
                        assert int(b["masks"][i].max()) <= k
                elif task == "pose":
                    assert b["keypoints"].shape == (n, KPT_SHAPE[0], 3)
                elif task == "obb":
                    assert b["bboxes"].shape == (n, 5)
    finally:
        ld.close()
    assert rows > 0


@pytest.mark.parametrize("task, extra", [
    ("segment", {}), ("pose", {}), ("obb", {}),
    # CopyPaste on (close_mosaic 0: one epoch is otherwise a closed one, as Ultralytics' trainer has it)
    ("segment", {"copy_paste": 0.5, "close_mosaic": 0}),
    ("obb", {"copy_paste": 0.5, "copy_paste_mode": "mixup", "close_mosaic": 0}),
])
def test_trainers_train_one_epoch(daemon, tmp_path, task, extra, monkeypatch):
    """One epoch of each task through Ultralytics' own trainer with stoker's
    loaders (CPU, imgsz 128, the model from its yaml): every training batch
    from stokerd, finite losses, the validation's metrics present."""
    import csv
    import math

    from ultralytics import YOLO

    from stoker.ultralytics import StokerOBBTrainer, StokerPoseTrainer, StokerSegmentationTrainer, YOLOLoader

    yaml = make_instances_set(tmp_path / "data", task)
    d = daemon(workers=2)
    monkeypatch.setenv("STOKER_SOCKET", d.socket)
    model = YOLO({"segment": "yolo11n-seg.yaml", "pose": "yolo11n-pose.yaml", "obb": "yolo11n-obb.yaml"}[task])
    trainer = {"segment": StokerSegmentationTrainer, "pose": StokerPoseTrainer, "obb": StokerOBBTrainer}[task]
    seen = []

    def on_batch(tr):
        assert isinstance(tr.train_loader, YOLOLoader) and isinstance(tr.test_loader, YOLOLoader)
        seen.append(tr.epoch)

    model.add_callback("on_train_batch_end", on_batch)
    metrics = model.train(data=str(yaml), trainer=trainer, imgsz=128, epochs=1, batch=2, device="cpu", workers=0,
                          plots=False, amp=False, seed=0, project=str(tmp_path / "runs"), name="run",
                          exist_ok=True, verbose=False, **extra)
    assert len(seen) == 3  # 5 images (bad.png's label is corrupt), batches of 2
    with open(tmp_path / "runs" / "run" / "results.csv") as f:
        rows = [{k.strip(): v for k, v in r.items()} for r in csv.DictReader(f)]
    assert len(rows) == 1
    losses = [k for k in rows[0] if k.startswith("train/")]
    assert losses and all(math.isfinite(float(rows[0][k])) for k in losses), rows[0]
    assert metrics.results_dict and all(math.isfinite(v) for v in metrics.results_dict.values())
