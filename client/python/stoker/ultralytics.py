"""Ultralytics' YOLO training fed by stokerd.

    from ultralytics import YOLO
    from stoker.ultralytics import StokerDetectionTrainer

    YOLO("yolo11n.yaml").train(data="data.yaml", trainer=StokerDetectionTrainer, epochs=100, imgsz=640)

StokerDetectionTrainer is Ultralytics' DetectionTrainer with one change: its
train and validation loaders are stoker loaders, whose batches stokerd
decodes and augments (mosaic, affine, mixup, HSV, flips; letterboxed
rectangular batches for validation) in its own worker pool. Everything
else is Ultralytics' own: model, losses, optimizer, EMA, checkpoints and
resume, validation and its metrics, plots, callbacks, DDP.

The daemon's socket is $STOKER_SOCKET (DDP ranks inherit it), else
stoker's default; `StokerDetectionTrainer.using(socket=..., timeout=...)`
gives a trainer class with others. StokerDetectionValidator does the same
for a validation on its own: `YOLO("best.pt").val(data=...,
validator=StokerDetectionValidator)`. StokerSegmentationValidator and
StokerPoseValidator do it for segment (overlap masks, sem_masks) and pose
(keypoints), StokerOBBValidator for OBB (xywhr), with batches equal to
Ultralytics' own; StokerSegmentationTrainer, StokerPoseTrainer and
StokerOBBTrainer train them, the daemon carrying polygons, keypoints and
oriented boxes through mosaic, affine, mixup, cutmix and flips as
Ultralytics' transforms do, with copy_paste (modes flip and mixup;
mixup not with rect=True) for segments and oriented boxes.

The batches are the dict Ultralytics' own loader yields: img (uint8
[B, 3, H, W], a zero-copy view of the daemon's ring in channels_last
layout; the trainer's preprocess_batch makes a float copy), cls [N, 1],
bboxes [N, 4] (normalised cx, cy, w, h), batch_idx [N] (all float32),
im_file, ori_shape, resized_shape and ratio_pad. img is read-only and valid
until the next batch is taken: a callback that keeps it must .clone() it,
and writing into it faults (the ring is mapped read-only).
"""

import copy
import importlib.util
import os

import numpy as np
import torch
from ultralytics.data.dataset import YOLODataset
from ultralytics.models.yolo.classify import ClassificationTrainer, ClassificationValidator
from ultralytics.models.yolo.detect import DetectionTrainer, DetectionValidator
from ultralytics.models.yolo.obb import OBBTrainer, OBBValidator
from ultralytics.models.yolo.pose import PoseTrainer, PoseValidator
from ultralytics.models.yolo.segment import SegmentationTrainer, SegmentationValidator
from ultralytics.utils import LOGGER, colorstr
from ultralytics.utils.torch_utils import torch_distributed_zero_first, unwrap_model

import stoker.torch

__all__ = ["StokerDetectionTrainer", "StokerDetectionValidator", "YOLOLoader", "loader_options",
           "StokerClassificationTrainer", "StokerClassificationValidator", "ClassifyLoader",
           "StokerSegmentationValidator", "StokerPoseValidator", "StokerSegmentationTrainer", "StokerPoseTrainer",
           "StokerOBBValidator", "StokerOBBTrainer"]

# Ultralytics hyper-parameters that are stoker detect options of the same
# name and meaning (docs/detection.md).
_SAME_NAME = ("mosaic", "mixup", "cutmix", "degrees", "translate", "scale", "shear", "perspective", "flipud", "fliplr",
              "hsv_h", "hsv_s", "hsv_v")
# Ultralytics augmentations stoker does not make: refused when switched on,
# rather than silently training on other data.
_NOT_BUILT = ()
# Tasks whose labels and transforms stoker does not make yet (docs/ultralytics.md).
_TASKS_NOT_BUILT = {}
# The YOLO tasks stoker's loaders serve (classify has its own, ClassifyLoader).
_TASKS = ("detect", "segment", "pose", "obb")
# Tasks whose validation stoker makes, but not yet their training transforms
# (none: segment, pose and OBB train since issue 21).
_TRAINING_NOT_BUILT = {}
# Training switches a task's instances do not go through yet (docs/ultralytics.md).
_INSTANCES_NOT_BUILT = {}


# Ultralytics' default Albumentations ops that stokerd makes (pixels/albu.h,
# OpenCV's arithmetic): the parameters its port takes. Any other op of the
# defaults must have p = 0 (Ultralytics' RandomBrightnessContrast,
# RandomGamma and ImageCompression have).
_ALBU_MADE = {"Blur": {"blur_limit": (3, 7)}, "MedianBlur": {"blur_limit": (3, 7)},
              "ToGray": {"num_output_channels": 3, "method": "weighted_average"},
              "CLAHE": {"clip_limit": (1.0, 4.0), "tile_grid_size": (8, 8)}}


def albumentations_p(args):
    """stokerd's `albumentations` option for a training: the p of
    Ultralytics' own default Albumentations ops (Blur, MedianBlur, ToGray,
    CLAHE) when its loader applies them (albumentations importable at a
    version it accepts, no custom `augmentations`), else 0. Read from the
    Albumentations object Ultralytics builds; a default op or parameter
    stoker does not make raises ValueError naming it."""
    if getattr(args, "augmentations", None) or importlib.util.find_spec("albumentations") is None:
        return 0.0
    from ultralytics.data.augment import Albumentations

    compose = Albumentations(p=1.0).transform
    if compose is None:  # Ultralytics could not build it: it applies nothing
        return 0.0
    applied = {}
    for op in compose.transforms:
        if not op.p:
            continue
        name, want = type(op).__name__, _ALBU_MADE.get(type(op).__name__)
        got = {k: tuple(v) if isinstance(v, (list, tuple)) else v
               for k, v in ((k, getattr(op, k, None)) for k in (want or {}))}
        if want is None or got != want:
            raise ValueError(f"Ultralytics' default Albumentations op {op!r}: stoker makes {sorted(_ALBU_MADE)} "
                             f"with {want or 'p=0'}; train with Ultralytics' own loader")
        applied[name] = float(op.p)
    if applied and (set(applied) != set(_ALBU_MADE) or len(set(applied.values())) != 1):
        raise ValueError(f"Ultralytics' default Albumentations {applied}: stoker makes the four ops "
                         f"{sorted(_ALBU_MADE)} with one p")
    return next(iter(applied.values()), 0.0)


def split_fraction(args, data, mode="train"):
    """The share of a split Ultralytics' build_yolo_dataset takes: a ratio
    (float) or an image count (int) of the split's first images (sorted
    paths), as its get_split_fraction resolves `fraction` (a scalar: the
    train split only; a list: [train, val, test]); 1.0: all."""
    if data.get("complete"):  # Ultralytics: already limited when downloaded
        return 1.0
    split = "train" if mode == "train" else (getattr(args, "split", None) or "val")
    fraction = getattr(args, "fraction", 1.0)
    if fraction is None:
        return 1.0
    try:
        from ultralytics.data.utils import get_split_fraction
    except ImportError:  # older Ultralytics: a float ratio of the training set
        return float(fraction) if split == "train" else 1.0
    return get_split_fraction(fraction, split)


def _fraction_options(fraction):
    """stoker's options for a resolved fraction: images=N for a count,
    fraction=f for a ratio, none for the whole split."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise ValueError(f"fraction={fraction!r}: a ratio or an image count")
    if isinstance(fraction, int):
        if fraction < 1:
            raise ValueError(f"fraction={fraction}: an image count must be at least 1")
        return {"images": fraction}
    if not fraction > 0:
        raise ValueError(f"fraction={fraction}: a ratio above 0")
    return {} if fraction >= 1 else {"fraction": float(fraction)}


def loader_options(args, mode="train", epochs=None):
    """The stoker.Loader options for Ultralytics' trainer arguments `args`
    (imgsz, seed, workers and, for mode "train", the augmentation
    hyper-parameters, close_mosaic and `epochs`); ValueError for settings
    stoker cannot honour."""
    task = getattr(args, "task", "detect") or "detect"
    if task == "classify":
        raise ValueError("task=classify: YOLO-cls trains with StokerClassificationTrainer and validates with "
                         "StokerClassificationValidator")
    if task in _TRAINING_NOT_BUILT and mode == "train":
        raise ValueError(f"stoker does not build task={task} training: {_TRAINING_NOT_BUILT[task]}; train with "
                         "Ultralytics' own loader")
    if task not in _TASKS:
        why = _TASKS_NOT_BUILT.get(task, "stoker.ultralytics serves task=detect")
        raise ValueError(f"stoker does not build task={task}: {why}; train with Ultralytics' own loader")
    if task == "segment" and args.classes is not None:
        raise ValueError("classes= with task=segment is not built (the masks would keep the other classes' "
                         "objects); unset it, or use Ultralytics' own loader")
    bad = [f"{k}={getattr(args, k)}" for k in _NOT_BUILT if getattr(args, k, 0)]
    if getattr(args, "augmentations", None):
        bad.append("augmentations (Albumentations)")
    if mode == "train" and task != "detect":
        bad += [f"{k}={getattr(args, k)} with task={task} ({why})" for k, why in _INSTANCES_NOT_BUILT.items()
                if getattr(args, k, 0)]
    copy_paste = float(getattr(args, "copy_paste", 0.0) or 0.0)
    cp_mode = getattr(args, "copy_paste_mode", "flip") or "flip"
    if mode == "train" and copy_paste and task == "detect":
        bad.append(f"copy_paste={copy_paste} with task=detect (Ultralytics pastes the polygons of segment label "
                   "files; stoker's detect samples carry their boxes only)")
    elif mode == "train" and copy_paste and cp_mode == "mixup" and task in ("segment", "obb") and args.rect:
        bad.append("copy_paste_mode=mixup with rect=True (its partner sample in another batch's shape: not built; "
                   "copy_paste_mode=flip is)")
    elif mode == "train" and copy_paste and cp_mode == "mixup" and task in ("segment", "obb") and \
            float(getattr(args, "cutmix", 0.0) or 0.0) and not args.rect:
        bad.append("copy_paste_mode=mixup with cutmix (CutMix's partner would need a CopyPaste partner of its own: "
                   "not built; either alone is)")
    if bad:
        raise ValueError(f"stoker does not build {', '.join(bad)}: unset it, or train with Ultralytics' own loader")
    imgsz = args.imgsz
    if isinstance(imgsz, (list, tuple)):
        if len(set(imgsz)) != 1:
            raise ValueError(f"imgsz={imgsz}: stoker makes square training images; give one size")
        imgsz = imgsz[0]
    opts = {"task": "detect", "image_size": int(imgsz), "seed": int(args.seed),
            # Batches the daemon keeps ready ahead, as Ultralytics' workers
            # each prepare one; 0 (its CPU default): the daemon's `prefetch`.
            "prefetch": int(args.workers or 0)}
    if mode == "train":
        opts.update(transform="mosaic", shuffle=True, close_mosaic=int(args.close_mosaic or 0))
        opts.update((k, float(getattr(args, k))) for k in _SAME_NAME)
        if args.rect:  # YOLODataset.build_transforms: no mosaic, mixup or cutmix under rect
            opts.update(mosaic=0.0, mixup=0.0, cutmix=0.0)
        opts["bgr"] = float(getattr(args, "bgr", 0.0) or 0.0)  # Ultralytics applies it in training only
        if copy_paste:  # CopyPaste (daemon/pixels/copypaste.h); pose samples carry no segments: none pasted
            opts.update(copy_paste=copy_paste, copy_paste_mode=cp_mode)
        albu = albumentations_p(args)
        if albu:
            opts["albumentations"] = albu
        if epochs is not None:
            opts["epochs"] = int(epochs)
    else:
        opts.update(transform="letterbox", shuffle=False)
    if task == "segment":
        opts.update(yolo_task="segment", mask_ratio=int(args.mask_ratio), overlap_mask=bool(args.overlap_mask))
    elif task == "obb":
        opts["yolo_task"] = "obb"
    return opts


def _instance_options(task, data, mode="val"):
    """The daemon's options for the data.yaml's keypoints (task pose). As
    Ultralytics' v8_transforms: training without flip_idx flips nothing
    (fliplr and flipud 0, with its warning)."""
    if task != "pose":
        return {}
    kpt = data.get("kpt_shape")
    if not kpt or len(kpt) != 2:
        raise ValueError(f"task=pose needs the data.yaml's kpt_shape [points, 2 or 3], not {kpt!r}")
    opts = {"yolo_task": "pose", "kpt_shape": f"{int(kpt[0])},{int(kpt[1])}"}
    flip_idx = data.get("flip_idx") or []
    if flip_idx:
        if len(flip_idx) != int(kpt[0]):
            raise ValueError(f"data.yaml flip_idx={flip_idx} length must be equal to kpt_shape[0]={kpt[0]}")
        opts["flip_idx"] = ",".join(str(int(i)) for i in flip_idx)
    return opts


class _Sampler:
    """What the trainer reads of a DataLoader's sampler: len() (this rank's
    samples per epoch) and set_epoch()."""

    def __init__(self, loader):
        self._loader = loader

    def __len__(self):
        return self._loader._stoker.samples_per_epoch

    def __iter__(self):
        return iter(range(len(self)))

    def set_epoch(self, epoch):
        self._loader.set_epoch(epoch)


def _yolo_dataset(path, args, data, stride, fraction, rect_batch=None):
    """Ultralytics' own YOLODataset of the split, without transforms that
    read images: its labels (its label scan, cached beside them) and, with
    rect_batch, its set_rectangle at training's pad 0 (batch_shapes, the
    labels in aspect-ratio order)."""
    return YOLODataset(img_path=path, imgsz=args.imgsz, augment=False, hyp=copy.copy(args),
                       rect=rect_batch is not None, batch_size=rect_batch, cache=False,
                       single_cls=args.single_cls or False, stride=stride, pad=0.0, prefix=colorstr("labels: "),
                       task="detect", classes=args.classes, data=data, fraction=fraction)


class _Dataset:
    """What Ultralytics reads of a loader's dataset: len() (images in the
    data set), im_files, and labels for its label statistics (the max_det
    check, label plots, class weights), which come from Ultralytics' own
    label scan (cached beside the labels as it always is) the first time
    they are read. close_mosaic() is what the trainer calls to close the
    mosaic."""

    def __init__(self, loader, path, args, data, stride, fraction=1.0, yolo=None):
        self._loader = loader
        self._fraction = fraction
        self._path, self._args, self._data, self._stride = path, args, data, stride
        self._labels = None if yolo is None else yolo.labels  # rect training's: in aspect-ratio order
        self._im_files = None

    def __len__(self):
        return self._loader._stoker.dataset_samples

    @property
    def im_files(self):
        if self._im_files is None:
            self._im_files = self._loader._stoker.sample_paths(range(len(self)))
        return self._im_files

    @property
    def labels(self):
        if self._labels is None:
            self._labels = _yolo_dataset(self._path, self._args, self._data, self._stride, self._fraction).labels
        return self._labels

    def close_mosaic(self, hyp):
        self._loader.close_mosaic()


class YOLOLoader:
    """An Ultralytics dataloader (InfiniteDataLoader's interface) over a
    stoker.Loader: iterating gives one epoch of Ultralytics batch dicts;
    len() is this rank's batches per epoch; .dataset, .sampler,
    .batch_size, .num_workers, .drop_last, set_epoch(), reset(), close().

    mode "train": stoker's mosaic pipeline with the trainer's augmentation
    hyper-parameters, shuffled; with args.rect, Ultralytics' rect training
    (rectangular batches in aspect-ratio order, no mosaic, mixup or cutmix;
    shuffled only when every batch has one shape). "val": letterboxed, in
    order, rectangular batches as Ultralytics' validator builds them
    (rect=True; rect=False: square imgsz, as it does for models exported
    with a fixed shape). rect None: args.rect for "train", True for "val"."""

    def __init__(self, path, args, data, batch_size=16, mode="train", rank=-1, epochs=None, stride=32,
                 socket=None, timeout=None, resample=None, rect=None):
        if mode not in ("train", "val"):
            raise ValueError(f"mode {mode!r}: 'train' or 'val'")
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"data set {path!r}: stoker takes one directory or .txt list per split")
        if data.get("channels", 3) != 3:
            raise ValueError(f"channels={data['channels']}: stoker serves 3-channel RGB images")
        self.mode = mode
        self._path = os.fspath(path)
        # rank -1: the whole data set (Ultralytics' loaders outside DDP);
        # else this process's share, the rank and world size of
        # torch.distributed (what DistributedSampler takes), as stoker.torch finds them.
        whole = {"rank": 0, "world_size": 1} if rank == -1 else {}
        # fraction: the split's first images, as Ultralytics' build_yolo_dataset takes them.
        self._fraction = split_fraction(args, data, mode)
        self._task = getattr(args, "task", "detect") or "detect"
        self._opts = dict(loader_options(args, mode, epochs), socket=socket, timeout=timeout,
                          batch_size=int(batch_size), **whole, **_fraction_options(self._fraction),
                          **_instance_options(self._task, data, mode))
        if mode == "train" and self._task == "pose" and "flip_idx" not in self._opts and \
                (self._opts["fliplr"] or self._opts["flipud"]):
            LOGGER.warning("No 'flip_idx' array defined in data.yaml, disabling 'fliplr' and 'flipud' augmentations.")
            self._opts.update(fliplr=0.0, flipud=0.0)
        if rect is None:
            rect = bool(args.rect) if mode == "train" else True
        self._rect = bool(rect)
        yolo = None
        if self._rect and mode == "train":
            # build_yolo_dataset's pad 0 for training; Ultralytics' own
            # YOLODataset(rect=True) says whether its batches have one shape,
            # the only case in which its get_dataloader keeps the shuffle.
            yolo = _yolo_dataset(self._path, args, data, stride, self._fraction, int(batch_size))
            if not np.all(yolo.batch_shapes == yolo.batch_shapes[0]):
                LOGGER.warning("'rect=True' is incompatible with DataLoader shuffle, setting shuffle=False")
                self._opts["shuffle"] = False
            self._opts.update(rect=True, stride=int(stride), pad=0.0)
        elif self._rect:
            self._opts.update(rect=True, stride=int(stride), pad=0.5)
        if resample is not None:
            self._opts["resample"] = resample
        self._epochs = self._opts.get("epochs")
        self._stoker = stoker.torch.Loader(self._path, **self._opts)
        self._epoch = 0
        self._taken = False
        self._single_cls = bool(args.single_cls)
        classes = args.classes
        self._classes = None if classes is None else torch.tensor(
            [classes] if isinstance(classes, int) else classes, dtype=torch.float32)
        self._names = len(data["names"])
        if self._stoker.num_classes > self._names:
            self.close()
            raise ValueError(f"{self._path}: labels have classes up to {self._stoker.num_classes - 1}, "
                             f"but the data set names {self._names} (nc)")
        # Ultralytics' build_dataloader: a batch never exceeds the data set.
        self.batch_size = min(int(batch_size), self._stoker.dataset_samples)
        self.drop_last = False
        self.num_workers = 0  # no loader processes: stokerd's workers do the work
        self.dataset = _Dataset(self, self._path, args, data, stride, self._fraction, yolo)
        self.sampler = _Sampler(self)
        LOGGER.info(f"{colorstr(mode + ':')} stoker: {self._stoker.dataset_samples} images of {self._path}, "
                    f"{len(self)} batches of {self.batch_size} per epoch for this rank "
                    f"({self._opts['transform']}{', rect' if self._rect else ''})")

    def __len__(self):
        return len(self._stoker)

    def __bool__(self):  # the validator tests `self.dataloader or ...`
        return True

    def set_epoch(self, epoch):
        """Make `epoch` the one the next pass yields (a no-op when it already is
        and nothing of it was taken)."""
        if epoch != self._epoch or self._taken:
            self._stoker.set_epoch(epoch)
            self._epoch, self._taken = epoch, False

    def close_mosaic(self):
        """Mosaic, mixup, cutmix and copy_paste off from the current epoch on. The daemon does it
        by itself from epoch `epochs - close_mosaic` on; a trainer that closes
        at another epoch (time= training re-plans its epochs) gets a loader
        attached anew without them."""
        opts = self._opts
        if self._epochs is not None and self._epoch + opts["close_mosaic"] >= self._epochs:
            return
        if opts["mosaic"] == 0 and opts["mixup"] == 0 and opts.get("cutmix", 0) == 0 and not opts.get("copy_paste"):
            return
        LOGGER.info("stoker: reattaching without mosaic, mixup, cutmix and copy_paste")
        self._opts = dict(opts, mosaic=0.0, mixup=0.0, cutmix=0.0, copy_paste=0.0, epoch=self._epoch)
        self._stoker.close()
        self._stoker = stoker.torch.Loader(self._path, **self._opts)
        self._taken = False

    def reset(self):
        """InfiniteDataLoader.reset(): nothing to rebuild; the next pass
        begins the current epoch."""

    def close(self):
        self._stoker.close()

    def __iter__(self):
        if self.mode == "val":
            self.set_epoch(0)  # each validation is the same pass over the data set
        elif self._taken:
            self.set_epoch(self._epoch)  # a pass restarted within an epoch
        for b in self._stoker:
            self._taken = True
            yield self._batch(b)

    def _batch(self, b):
        boxes = b.boxes.clone()  # N x 24 bytes: copied, so they are writable and contiguous
        keep = None
        if self._classes is not None:
            if self._task == "segment":
                raise ValueError("classes= with task=segment is not built (the masks keep every object)")
            keep = torch.isin(boxes[:, 1], self._classes)
            boxes = boxes[keep]
        if self._single_cls:
            boxes[:, 1] = 0
        img = b.images  # uint8 NCHW, channels_last: the ring's NHWC slot, not copied
        files = self._stoker.sample_paths(b.indices.tolist())
        ori = tuple((h0, w0) for h0, w0, _, _ in b.shapes.tolist())
        rp = b.ratio_pad.tolist()
        h, w = img.shape[2:]
        if self.mode == "train":
            # Mosaic and affine: the sample's own load_image ratio (as
            # Ultralytics'); resized_shape the image's (its rect shape under rect).
            resized = ((h, w),) * len(files)
            ratio_pad = tuple((rh, rw) for rh, rw, _, _ in rp)
        else:
            # LetterBox's new_shape: the batch's rect_shape, or the square imgsz.
            resized = tuple(np.array([h, w]) for _ in files) if self._rect else ((h, w),) * len(files)
            ratio_pad = tuple(((rh, rw), (int(left), int(top))) for rh, rw, left, top in rp)
        out = {"batch_idx": boxes[:, 0].contiguous(), "bboxes": boxes[:, 2:6].contiguous(),
               "cls": boxes[:, 1:2].contiguous(), "im_file": tuple(files), "img": img, "ori_shape": ori,
               "ratio_pad": ratio_pad, "resized_shape": resized}
        if self._task == "segment":
            out.update(_masks(b, out["cls"]))
        elif self._task == "obb":
            rows = b.labels.tolist()
            xywhr = torch.cat([b.obb[i, :n] for i, n in enumerate(rows)], 0) if rows else torch.zeros(0, 5)
            out["bboxes"] = xywhr[keep] if keep is not None else xywhr.clone()
        elif self._task == "pose":
            rows = b.labels.tolist()
            kpts = torch.cat([b.keypoints[i, :n] for i, n in enumerate(rows)], 0) if rows else \
                torch.zeros(0, b.keypoints.shape[2], 3)
            out["keypoints"] = kpts[keep] if keep is not None else kpts.clone()
        return out

    def __repr__(self):
        return f"<stoker.ultralytics.YOLOLoader {self.mode} {self._path!r} batches={len(self)}>"


def _masks(b, cls):
    """masks and sem_masks as Ultralytics' Format and collate make them:
    per image its overlap mask [1, h, w] (uint8, int32 past 255 objects;
    float32 zeros for an image without objects), concatenated (torch.cat's
    dtype promotion over the images); sem_masks the class of the mask's
    object at each pixel (Format's cls[masks - 1], the last row's class
    where there is none), float32, stacked.

    In numpy, a few whole-batch passes: torch ops on these sizes would run
    on torch's OpenMP threads, whose spinning after each op took the
    daemon's cores (1.4 ms of CPU an image, against 0.3 with numpy)."""
    rows = np.asarray(b.labels, dtype=np.int64)
    count = len(rows)
    slot = b.masks[:count]
    if not count:
        return {"masks": torch.zeros(0, *slot.shape[1:]), "sem_masks": torch.zeros(0, *slot.shape[1:])}
    empty = rows == 0
    if empty.any():
        dtype = np.float32  # torch.cat of uint8 or int32 with float32 zeros
    else:
        dtype = np.int32 if (rows > 255).any() else np.uint8
    masks = slot.astype(dtype)
    masks[empty] = 0
    # Per image a table: entry k the class of its row k - 1, entry 0 its last row's (index -1).
    width = int(rows.max()) + 1
    table = np.zeros((count, width), dtype=np.float32)
    c = cls.numpy().reshape(-1)
    start = np.concatenate(([0], np.cumsum(rows)[:-1]))
    for i in np.flatnonzero(~empty):
        n, at = int(rows[i]), int(start[i])
        table[i, 1:n + 1] = c[at:at + n]
        table[i, 0] = c[at + n - 1]
    index = slot.astype(np.intp)
    np.minimum(index, width - 1, out=index)  # the daemon numbers at most the image's rows
    index += (np.arange(count, dtype=np.intp) * width)[:, None, None]
    sem = np.take(table.reshape(-1), index)
    return {"masks": torch.from_numpy(masks), "sem_masks": torch.from_numpy(sem)}


def _set_loader_epoch(trainer):
    # Ultralytics sets the sampler's epoch only under DDP; stoker's order and
    # augmentation draws are keyed by the epoch on every rank (without it
    # every epoch would replay the first one's order and augmentations).
    loader = getattr(trainer, "train_loader", None)
    if isinstance(loader, (YOLOLoader, ClassifyLoader)):
        loader.set_epoch(trainer.epoch)


class _Configurable:
    """Where a trainer or validator class finds the daemon."""

    socket = None    # None: $STOKER_SOCKET, else stoker's default
    timeout = None   # seconds to wait for a batch (None: forever)
    resample = None  # None: the daemon's per transform (antialias for training, cv2 for validation)

    @classmethod
    def using(cls, socket=None, timeout=None, resample=None):
        """A subclass with another daemon socket, batch timeout or resampling
        ("cv2": Ultralytics' own pixels in training too, at some decode speed),
        e.g. `YOLO(...).train(trainer=StokerDetectionTrainer.using(socket=...))`."""
        return type(cls.__name__, (cls,), {"socket": socket, "timeout": timeout, "resample": resample,
                                           "__module__": cls.__module__})


class _StokerTrainer:
    """A YOLO trainer's loaders made stoker's (YOLOLoader)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if _set_loader_epoch not in self.callbacks["on_train_epoch_start"]:
            self.callbacks["on_train_epoch_start"].insert(0, _set_loader_epoch)

    def get_dataloader(self, dataset_path, batch_size=16, rank=0, mode="train"):
        assert mode in {"train", "val"}, f"Mode must be 'train' or 'val', not {mode}."
        gs = max(int(unwrap_model(self.model).stride.max()), 32)
        # The time= mode re-plans the epoch count: the loader then closes the
        # mosaic when the trainer says so (YOLOLoader.close_mosaic).
        epochs = None if self.args.time else self.epochs
        with torch_distributed_zero_first(rank):  # the first rank makes the label scan's cache
            loader = YOLOLoader(dataset_path, self.args, self.data, batch_size=batch_size, mode=mode, rank=rank,
                                epochs=epochs, stride=gs, socket=self.socket, timeout=self.timeout,
                                resample=self.resample)
            try:
                loader.dataset.labels  # the trainer's max_det check reads them next
            except BaseException:
                loader.close()
                raise
        return loader


class StokerDetectionTrainer(_Configurable, _StokerTrainer, DetectionTrainer):
    """Ultralytics' DetectionTrainer whose train and validation loaders are
    stoker's (YOLOLoader). Pass it as `trainer=` to YOLO(...).train()."""


class _StokerValidatorLoader:
    """get_dataloader of a validator on its own: stoker's rect loader."""

    def get_dataloader(self, dataset_path, batch_size):
        stride = max(int(self.stride.max() if isinstance(self.stride, torch.Tensor) else self.stride), 32)
        loader = YOLOLoader(dataset_path, self.args, self.data, batch_size=batch_size, mode="val", rank=-1,
                            stride=stride, socket=self.socket, timeout=self.timeout, resample=self.resample,
                            rect=bool(self.args.rect))
        if self.names and len(self.names) < self.data["nc"]:  # as Ultralytics' get_dataloader does
            LOGGER.warning(f"Skipping labels of classes the model (nc={len(self.names)}) cannot predict.")
            keep = torch.arange(len(self.names), dtype=torch.float32)
            loader._classes = keep if loader._classes is None else loader._classes[torch.isin(loader._classes, keep)]
        return loader


class StokerDetectionValidator(_Configurable, _StokerValidatorLoader, DetectionValidator):
    """Ultralytics' DetectionValidator whose loader is stoker's, for a
    validation on its own: `YOLO("best.pt").val(data="data.yaml",
    validator=StokerDetectionValidator)`. (In training, the trainer's own
    validator already reads stoker's validation loader.)"""


class StokerSegmentationValidator(_Configurable, _StokerValidatorLoader, SegmentationValidator):
    """Ultralytics' SegmentationValidator with stoker's loader: rect
    letterboxed batches with overlap masks (mask_ratio, overlap_mask=True)
    made by stokerd as Ultralytics' loader makes them:
    `YOLO("yolo11n-seg.pt").val(data=..., validator=StokerSegmentationValidator)`."""


class StokerPoseValidator(_Configurable, _StokerValidatorLoader, PoseValidator):
    """Ultralytics' PoseValidator with stoker's loader (keypoints of the
    data.yaml's kpt_shape, letterboxed as Ultralytics' loader does):
    `YOLO("yolo11n-pose.pt").val(data=..., validator=StokerPoseValidator)`."""


class StokerOBBValidator(_Configurable, _StokerValidatorLoader, OBBValidator):
    """Ultralytics' OBBValidator with stoker's loader (xywhr of the
    letterboxed corners, as Ultralytics' loader computes them):
    `YOLO("yolo11n-obb.pt").val(data=..., validator=StokerOBBValidator)`."""


class StokerSegmentationTrainer(_Configurable, _StokerTrainer, SegmentationTrainer):
    """Ultralytics' SegmentationTrainer with stoker's loaders: training
    batches whose polygons went through Mosaic, RandomPerspective, MixUp
    and the flips as Ultralytics' own (segments resampled to 1000 points,
    boxes re-derived from them), with overlap masks (mask_ratio) and
    sem_masks; validation as StokerSegmentationValidator."""


class StokerOBBTrainer(_Configurable, _StokerTrainer, OBBTrainer):
    """Ultralytics' OBBTrainer with stoker's loaders: training batches'
    bboxes are xywhr of the corners (resampled to 100 points, clipped with
    preserve_obb) after Mosaic, RandomPerspective, MixUp and the flips;
    validation as StokerOBBValidator."""


class StokerPoseTrainer(_Configurable, _StokerTrainer, PoseTrainer):
    """Ultralytics' PoseTrainer with stoker's loaders: training batches'
    keypoints went through Mosaic, RandomPerspective (visibility zeroed
    outside the image), MixUp and the flips with the data.yaml's flip_idx;
    validation as StokerPoseValidator."""


# ---- classification (YOLO-cls) ----

class ClassifyLoader:
    """Ultralytics' classification dataloader over a stoker.torch.Loader.

    `dataset` is Ultralytics' own ClassificationDataset for the split: its
    torch_transforms (classify_augmentations for training: RandomResizedCrop
    with scale=(1 - scale, 1), flips, auto_augment or the hsv ColorJitter,
    RandomErasing; classify_transforms for evaluation: Resize + CenterCrop)
    are translated into stokerd's per-sample pipeline by stoker.transforms
    (what cannot run exactly raises ValueError naming it), and its samples
    must be the folder's own (a `fraction` below 1, or class folders the
    model's names reorder or drop, are refused). Iterating yields one
    epoch of {"img": float32 [B, 3, H, W], "cls": int64 [B]}, as Ultralytics'
    collate of the dataset does."""

    def __init__(self, dataset, batch_size=16, mode="train", rank=-1, socket=None, timeout=None):
        from stoker.transforms import translate

        # Ultralytics' samples are [path, class, .npy path, image]: the
        # paths and classes must be the folder's own, in its order
        if [(str(x[0]), int(x[1])) for x in dataset.samples] != [(str(p), int(c)) for p, c in dataset.base.samples]:
            raise ValueError(f"{dataset.root}: a fraction of the split, or class folders the model's names "
                             "reorder or drop, are not built (stoker serves the folder's ImageFolder order)")
        ops = translate(dataset.torch_transforms)
        whole = {"rank": 0, "world_size": 1} if rank == -1 else {}
        self.mode = mode
        self._stoker = stoker.torch.Loader(dataset.root, transforms=ops, batch_size=int(batch_size),
                                           shuffle=mode == "train", socket=socket, timeout=timeout, **whole)
        self._epoch, self._taken = 0, False
        self.dataset = dataset
        self.batch_size = min(int(batch_size), len(dataset.samples))
        self.drop_last = False
        self.num_workers = 0  # stokerd's workers do the work
        self.sampler = self
        LOGGER.info(f"{colorstr(mode + ':')} stoker: {len(dataset.samples)} images of {dataset.root}, "
                    f"{len(self)} batches of {self.batch_size} per epoch for this rank")

    def __len__(self):
        return len(self._stoker)

    def __bool__(self):
        return True

    def set_epoch(self, epoch):
        """As DistributedSampler.set_epoch (the trainer calls it on .sampler)."""
        if epoch != self._epoch or self._taken:
            self._stoker.set_epoch(epoch)
            self._epoch, self._taken = epoch, False

    def reset(self):
        pass

    def close(self):
        self._stoker.close()

    def __iter__(self):
        if self._taken:  # another pass over the same epoch (the validator's)
            self._stoker.set_epoch(self._epoch)
        self._taken = True
        for images, labels in self._stoker:
            yield {"img": images, "cls": labels}


def _classify_loader(dataset, batch_size, mode, rank, cls):
    return ClassifyLoader(dataset, batch_size, mode, rank, socket=cls.socket, timeout=cls.timeout)


class StokerClassificationTrainer(ClassificationTrainer):
    """Ultralytics' ClassificationTrainer whose train and validation loaders
    are stoker's (ClassifyLoader): `YOLO("yolo11n-cls.yaml").train(data=root,
    trainer=StokerClassificationTrainer)`."""

    socket = None
    timeout = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if _set_loader_epoch not in self.callbacks["on_train_epoch_start"]:
            self.callbacks["on_train_epoch_start"].insert(0, _set_loader_epoch)

    def get_dataloader(self, dataset_path, batch_size=16, rank=0, mode="train"):
        with torch_distributed_zero_first(rank):
            dataset = self.build_dataset(dataset_path, mode)
        loader = _classify_loader(dataset, batch_size, mode, rank, type(self))
        if mode != "train":  # the model's inference transforms, as Ultralytics attaches them
            unwrap_model(self.model).transforms = dataset.torch_transforms
        return loader

    def get_validator(self):
        v = super().get_validator()
        v.__class__ = type("StokerClassificationValidator", (StokerClassificationValidator,),
                           {"socket": self.socket, "timeout": self.timeout})
        return v


class StokerClassificationValidator(ClassificationValidator):
    """Ultralytics' ClassificationValidator with stoker's loader (Resize +
    CenterCrop, its own transforms translated)."""

    socket = None
    timeout = None

    def get_dataloader(self, dataset_path, batch_size):
        return _classify_loader(self.build_dataset(dataset_path), batch_size, "val", -1, type(self))
