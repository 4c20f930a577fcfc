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
    labels = HERE / "instances" / ("pose" if task == "pose" else "segment")
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


@pytest.fixture(scope="module", params=["segment", "pose"])
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
        order_g = np.lexsort(gb.numpy().T[::-1])
        order_w = np.lexsort(wb.numpy().T[::-1])
        assert [gc[k] for k in order_g] == [wc[k] for k in order_w], name
        assert torch.allclose(gb[order_g], wb[order_w], atol=1e-5), name
        assert torch.equal(gi, wi), name


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
    ({"yolo_task": "segment", "transform": "mosaic"}, "do not carry segments"),
])
def test_bad_instance_options_are_refused(daemon, tmp_path, opts, why):
    yaml = make_instances_set(tmp_path, "pose")
    d = daemon(workers=1)
    kw = dict(transform="letterbox", split="val", image_size=IMGSZ, batch_size=2, shuffle=False)
    kw.update(opts)
    with pytest.raises(stoker.StokerError, match=why):
        stoker.Loader(str(yaml), socket=d.socket, task="detect", **kw)
