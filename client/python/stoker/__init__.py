"""Python binding for libstoker: iterate batches that stokerd decodes and
augments into shared memory.

    loader = stoker.Loader(dataset="/data/imagenet/train", batch_size=256)
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:   # uint8 [B,H,W,3], int64 [B]
            ...

Detection (YOLO data sets, Ultralytics' transforms):

    loader = stoker.Loader("data/coco/data.yaml", task="detect", transform="mosaic",
                           image_size=640, batch_size=16, epochs=100)
    for batch in loader:        # .images uint8 [B,640,640,3], .boxes float32 [N,6]
        ...                     # boxes rows: (image in batch, class, cx, cy, w, h)

Arrays are read-only, zero-copy views of the daemon's ring. A batch stays
valid until the next one is taken (or the loader is closed): copy what you
need to keep longer. PyTorch users: stoker.torch.Loader yields the same
memory as tensors (NCHW channels_last). This module imports no framework.
"""

import ctypes
import ctypes.util
import errno as _errno
import json
import math
import numbers
import os
import re

import numpy as np

from . import _userd

__all__ = ["Loader", "Batch", "DeviceArray", "StokerError", "stats", "metrics", "config", "set_config", "reload", "drain",
           "library_version", "load_library", "launcher_rank", "option_keys", "transforms_text",
           "MIX_DTYPE"]

_ERR_NO_LIBRARY = ("libstoker not found (install the stoker wheel or Debian's libstoker0, or set STOKER_LIB, "
                   "or STOKER_BUILD to a build directory)")


class StokerError(OSError):
    """A libstoker call failed; .errno is the error number, .strerror the message."""


_lib = None
_libc = None


def _candidates():
    env = os.environ.get("STOKER_LIB")
    if env:
        return [env]  # explicit choice: do not fall back to anything else
    out = []
    build = os.environ.get("STOKER_BUILD")
    if build:
        out.append(os.path.join(build, "libstoker.so.0"))
    here = os.path.dirname(os.path.abspath(__file__))
    # A wheel carries its own copy (client/python/setup.py builds it).
    out.append(os.path.join(here, "libstoker.so.0"))
    out.append(os.path.normpath(os.path.join(here, "..", "..", "..", "build", "libstoker.so.0")))
    # Installed on the system (Debian's libstoker0): the loader's own search.
    out.append("libstoker.so.0")
    found = ctypes.util.find_library("stoker")
    if found:
        out.append(found)
    return list(dict.fromkeys(out))  # in order, without repeats


def _declare(lib):
    P = ctypes.c_void_p
    sigs = {
        "stoker_version": (ctypes.c_char_p, []),
        "stoker_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(P)]),
        "stoker_close": (None, [P]),
        "stoker_last_error": (ctypes.c_char_p, [P]),
        "stoker_opts_new": (ctypes.c_int, [ctypes.POINTER(P)]),
        "stoker_opts_free": (None, [P]),
        "stoker_opts_set": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_char_p]),
        "stoker_opts_key": (ctypes.c_int, [ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)]),
        "stoker_attach": (ctypes.c_int, [P, ctypes.c_char_p, P]),
        "stoker_dataset_samples": (ctypes.c_uint64, [P]),
        "stoker_samples_per_epoch": (ctypes.c_uint64, [P]),
        "stoker_batches_per_epoch": (ctypes.c_uint64, [P]),
        "stoker_num_classes": (ctypes.c_uint32, [P]),
        "stoker_epoch": (ctypes.c_uint64, [P]),
        "stoker_set_epoch": (ctypes.c_int, [P, ctypes.c_uint64]),
        "stoker_next": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(P)]),
        "stoker_release": (None, [P]),
        "stoker_batch_images": (P, [P]),
        "stoker_batch_labels": (P, [P]),
        "stoker_batch_indices": (P, [P]),
        "stoker_batch_count": (ctypes.c_uint32, [P]),
        "stoker_batch_height": (ctypes.c_uint32, [P]),
        "stoker_batch_width": (ctypes.c_uint32, [P]),
        "stoker_batch_channels": (ctypes.c_uint32, [P]),
        "stoker_batch_epoch": (ctypes.c_uint64, [P]),
        "stoker_batch_index": (ctypes.c_uint64, [P]),
        "stoker_batch_replaced": (ctypes.c_uint32, [P]),
        "stoker_batch_dtype": (ctypes.c_int, [P]),
        "stoker_batch_device_images": (ctypes.c_uint64, [P]),
        "stoker_batch_wait": (ctypes.c_int, [P, P]),
        "stoker_device": (ctypes.c_int, [P]),
        "stoker_pinned": (ctypes.c_int, [P]),
        "stoker_batch_boxes": (ctypes.c_void_p, [P, ctypes.POINTER(ctypes.c_uint32)]),
        "stoker_batch_shapes": (ctypes.c_void_p, [P]),
        "stoker_batch_ratio_pad": (ctypes.c_void_p, [P]),
        "stoker_batch_masks": (ctypes.c_void_p, [P, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32)]),
        "stoker_batch_keypoints": (ctypes.c_void_p, [P, ctypes.POINTER(ctypes.c_uint32),
                                                     ctypes.POINTER(ctypes.c_uint32)]),
        "stoker_batch_obb": (ctypes.c_void_p, [P, ctypes.POINTER(ctypes.c_uint32)]),
        "stoker_batch_soft_labels": (ctypes.c_void_p, [P, ctypes.POINTER(ctypes.c_uint32)]),
        "stoker_batch_mix": (ctypes.c_void_p, [P]),
        "stoker_sample_path": (ctypes.c_int, [P, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t]),
        "stoker_task": (ctypes.c_int, [P]),
        "stoker_label_errors": (ctypes.c_uint64, [P]),
        "stoker_decode_error_files": (ctypes.c_uint64, [P]),
        "stoker_class_name": (ctypes.c_char_p, [P, ctypes.c_uint32]),
        "stoker_checkpoint": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t]),
        "stoker_restore": (ctypes.c_int, [P, ctypes.c_char_p]),
        "stoker_stats_json": (ctypes.c_int, [P, ctypes.POINTER(P)]),
        "stoker_metrics": (ctypes.c_int, [P, ctypes.POINTER(P)]),
        "stoker_config_json": (ctypes.c_int, [P, ctypes.POINTER(P)]),
        "stoker_config_set": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_char_p]),
        "stoker_reload": (ctypes.c_int, [P, ctypes.POINTER(P)]),
        "stoker_drain": (ctypes.c_int, [P, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def load_library():
    """Load libstoker (once) and return the ctypes handle."""
    global _lib, _libc
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)  # CDLL, not PyDLL: calls release the GIL
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        _declare(lib)
        _libc = ctypes.CDLL(None)
        _libc.free.restype = None
        _libc.free.argtypes = [ctypes.c_void_p]
        _lib = lib
        return lib
    raise StokerError(_errno.ENOENT, _ERR_NO_LIBRARY + ("; tried " + "; ".join(tried) if tried else ""))


def library_version():
    """libstoker's version string, "MAJOR.MINOR.PATCH"."""
    return load_library().stoker_version().decode()


def _enc(s):
    return None if s is None else os.fsencode(s)


def _error(rc, handle=None, what=""):
    err = -rc
    msg = ""
    if handle:
        raw = _lib.stoker_last_error(handle)
        msg = raw.decode(errors="replace") if raw else ""
    if not msg:
        msg = os.strerror(err)
    if what:
        msg = f"{what}: {msg}"
    return StokerError(err, msg)


def _connect_to(path):
    lib = load_library()
    h = ctypes.c_void_p()
    rc = lib.stoker_connect(_enc(path), ctypes.byref(h))
    if rc < 0:
        where = path or os.environ.get("STOKER_SOCKET") or _userd.SYSTEM_SOCKET
        raw = lib.stoker_last_error(None)  # why this thread's connect failed
        msg = raw.decode(errors="replace") if raw else os.strerror(-rc)
        raise StokerError(-rc, f"cannot connect to stokerd at {where}: {msg}")
    return h


def _connect(socket, start=False):
    """socket None: $STOKER_SOCKET, else the system daemon, else this user's
    own (started when `start`: stoker/_userd.py)."""
    if socket is not None:
        return _connect_to(socket)
    try:
        return _userd.connect(_connect_to, start)
    except _userd.UserModeError as e:
        raise StokerError(e.errno, e.strerror) from None


class _ForeignView:
    """Exposes an __array_interface__ over foreign memory."""

    __slots__ = ("__array_interface__",)

    def __init__(self, addr, shape, typestr, readonly):
        self.__array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": typestr,
            "data": (addr, readonly),
        }


def _view(addr, shape, dtype, readonly=True):
    """A numpy array over the ring's memory. readonly=False only drops the
    flag (for frameworks that warn about it, such as torch.from_numpy): the
    mapping itself is PROT_READ, so a write still faults."""
    if not addr:
        raise StokerError(_errno.EPROTO, "libstoker returned a NULL batch pointer")
    arr = np.asarray(_ForeignView(addr, shape, np.dtype(dtype).str, readonly))
    if readonly:
        arr.flags.writeable = False
    return arr


def _masks_view(mem, readonly=True):
    """uint16 [B, H / mask_ratio, W / mask_ratio] over the slot's masks (each
    image's at its own stride), or None."""
    if mem.masks is None:
        return None
    n, mh, mw = mem.mask_shape
    flat = _view(mem.masks, (n, mem.mask_stride), np.uint16, readonly)
    return flat[:, :mh * mw].reshape(n, mh, mw)


def _keypoints_view(mem, readonly=True):
    return None if mem.keypoints is None else _view(mem.keypoints, mem.keypoint_shape, np.float32, readonly)


def _mix_view(addr, count):
    """The batch's mix records (MIX_DTYPE [count]), read-only."""
    return _view(addr, (count * MIX_DTYPE.itemsize,), np.uint8).view(MIX_DTYPE)


class DeviceArray:
    """A batch's images in GPU memory (Loader(device="cuda:N")), exposed with
    __cuda_array_interface__ (version 3): `torch.as_tensor(images,
    device="cuda:N")`, CuPy or Numba take it without a copy. Its "stream" is
    None: the batch is complete on the GPU when it is handed out (the daemon
    announces it once its copy has finished), so consumers need not
    synchronise on any stream (naming the trainer's stream would make CuPy
    and Numba wait on the host for the work queued there). Valid until the
    loader takes the next batch."""

    __slots__ = ("__cuda_array_interface__", "shape", "dtype", "device")

    def __init__(self, addr, shape, dtype, device, stream):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.device = device
        self.__cuda_array_interface__ = {
            "version": 3,
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (int(addr), False),
            "strides": None,  # C-contiguous
            "stream": None,  # complete when handed out: nothing to order on
        }

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"<stoker.DeviceArray cuda:{self.device} shape={self.shape} dtype={self.dtype}>"


class Batch:
    """One batch: .images (uint8 [B,H,W,C], or float [B,C,H,W] with a float
    dtype) and .labels int64 [B] (unpack as
    `images, labels = batch`), .indices int64 [B] (the samples actually
    delivered), .epoch, .index (batch number), .replaced (unreadable samples
    that were replaced). Detection batches also have .boxes, float32 [N, 6]
    rows (image index in the batch, class, cx, cy, w, h), normalised, as
    Ultralytics' collate lays them out; .labels then holds each image's box
    count, and unpacking gives `images, boxes`. Detection batches carry
    Ultralytics' per-image metadata too: .shapes int32 [B, 4] (original
    h, w; load_image's resized h, w) and .ratio_pad float64 [B, 4]
    (ratio h, ratio w, pad left, pad top: Ultralytics' ratio_pad is
    ((r[0], r[1]), (r[2], r[3]))). Rectangular batches (rect=True) have
    each their own image height and width. With a batch op
    (batch_transform=: MixUp / CutMix), .soft_labels float32 [B, classes]
    holds the mixed soft targets (unpacking gives `images, soft_labels`;
    .labels keeps the hard ones) and .mix what each sample got (MIX_DTYPE
    records: lam, lam_drawn, partner, kind, x1, y1, x2, y2). With
    yolo_task=segment, .masks is uint16 [B, H / mask_ratio, W / mask_ratio],
    each image's overlap mask (0 background, k + 1 its k-th box row, the rows
    in the mask's area order); with yolo_task=pose, .keypoints is float32
    [B, max_boxes, kpt_points, 3], image i's first .labels[i] rows its box
    rows' keypoints (x, y normalised, visibility); with yolo_task=obb, .obb
    is float32 [B, max_boxes, 5], each box row's xywhr. Valid until the loader
    takes the next batch."""

    __slots__ = ("images", "labels", "indices", "epoch", "index", "replaced", "boxes", "shapes", "ratio_pad",
                 "soft_labels", "mix", "masks", "keypoints", "obb")

    def __init__(self, images, labels, indices, epoch, index, replaced, boxes=None, shapes=None, ratio_pad=None,
                 soft_labels=None, mix=None, masks=None, keypoints=None, obb=None):
        self.masks = masks
        self.keypoints = keypoints
        self.obb = obb
        self.images = images
        self.labels = labels
        self.indices = indices
        self.epoch = epoch
        self.index = index
        self.replaced = replaced
        self.boxes = boxes
        self.shapes = shapes
        self.ratio_pad = ratio_pad
        self.soft_labels = soft_labels
        self.mix = mix

    def __iter__(self):
        yield self.images
        yield (self.boxes if self.boxes is not None else
               self.soft_labels if self.soft_labels is not None else self.labels)

    def __len__(self):
        return len(self.labels)

    def __repr__(self):
        return (f"<stoker.Batch epoch={self.epoch} index={self.index} "
                f"shape={tuple(self.images.shape)} replaced={self.replaced}>")


# A batch op's record per sample (stoker.h stoker_batch_mix): kind 0 none,
# 1 mixup, 2 cutmix; the box [x1, x2) x [y1, y2).
MIX_DTYPE = np.dtype([("lam", "<f8"), ("lam_drawn", "<f8"), ("partner", "<i4"), ("kind", "<i4"),
                      ("x1", "<i4"), ("y1", "<i4"), ("x2", "<i4"), ("y2", "<i4")])

# enum stoker_dtype -> numpy; uint8 is HWC, the float types CHW.
_DTYPES = {0: np.uint8, 1: np.float32, 2: np.float16}


class _BatchMemory:
    """Where a batch's arrays lie in the ring and what they hold: addresses,
    shapes and numpy dtypes, for whichever framework wraps them."""

    __slots__ = ("count", "images", "image_shape", "image_dtype", "labels", "label_dtype", "indices",
                 "boxes", "box_rows", "shapes", "ratio_pad", "epoch", "index", "replaced", "device", "stream",
                 "soft", "soft_classes", "mix", "masks", "mask_shape", "mask_stride", "keypoints",
                 "keypoint_shape", "obb", "obb_shape")

    def __init__(self, b, device=-1, stream=0):
        n = int(_lib.stoker_batch_count(b))
        h, w, c = (int(_lib.stoker_batch_height(b)), int(_lib.stoker_batch_width(b)),
                   int(_lib.stoker_batch_channels(b)))
        self.count = n
        self.image_dtype = _DTYPES[int(_lib.stoker_batch_dtype(b))]
        self.image_shape = (n, h, w, c) if self.image_dtype == np.uint8 else (n, c, h, w)
        # device >= 0: images are a CUdeviceptr on cuda:device, ordered on
        # `stream` (a CUstream handle; 0 the legacy default stream).
        self.device, self.stream = device, stream
        self.images = _lib.stoker_batch_device_images(b) if device >= 0 else _lib.stoker_batch_images(b)
        self.labels = _lib.stoker_batch_labels(b)
        self.label_dtype = np.int64  # stoker.h: int64_t labels
        self.indices = _lib.stoker_batch_indices(b)
        nboxes = ctypes.c_uint32()
        # A detection batch has an address even with no rows; NULL otherwise.
        self.boxes = _lib.stoker_batch_boxes(b, ctypes.byref(nboxes)) or None
        self.box_rows = int(nboxes.value)
        # Detection's per-image metadata: int32 [count, 4] and float64 [count, 4].
        self.shapes = _lib.stoker_batch_shapes(b) or None
        self.ratio_pad = _lib.stoker_batch_ratio_pad(b) or None
        classes = ctypes.c_uint32()
        self.soft = _lib.stoker_batch_soft_labels(b, ctypes.byref(classes)) or None
        self.soft_classes = int(classes.value)
        self.mix = _lib.stoker_batch_mix(b) or None
        # yolo_task segment: uint16 masks, image i's at masks + i * stride elements; pose: keypoints.
        ratio, stride = ctypes.c_uint32(), ctypes.c_uint32()
        self.masks = _lib.stoker_batch_masks(b, ctypes.byref(ratio), ctypes.byref(stride)) or None
        self.mask_stride = int(stride.value)
        self.mask_shape = (n, h // ratio.value, w // ratio.value) if self.masks else None
        points, rows = ctypes.c_uint32(), ctypes.c_uint32()
        self.keypoints = _lib.stoker_batch_keypoints(b, ctypes.byref(points), ctypes.byref(rows)) or None
        self.keypoint_shape = (n, int(rows.value), int(points.value), 3) if self.keypoints else None
        obb_rows = ctypes.c_uint32()
        self.obb = _lib.stoker_batch_obb(b, ctypes.byref(obb_rows)) or None
        self.obb_shape = (n, int(obb_rows.value), 5) if self.obb else None
        self.epoch = int(_lib.stoker_batch_epoch(b))
        self.index = int(_lib.stoker_batch_index(b))
        self.replaced = int(_lib.stoker_batch_replaced(b))


_option_keys = None


def option_keys():
    """The attach options libstoker takes, from its one table of them
    (stoker_opts_key): {name: (task, kind)}, task "detect" for the options
    of task="detect" (Ultralytics' hyper-parameter names and ours), "" for
    every task's; kind as stoker.h says ("u32", "bool", "number", "a|b", ...)."""
    global _option_keys
    if _option_keys is None:
        lib = load_library()
        name, task, kind = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_char_p()
        keys, i = {}, 0
        while lib.stoker_opts_key(i, ctypes.byref(name), ctypes.byref(task), ctypes.byref(kind)) == 0:
            keys[name.value.decode()] = (task.value.decode(), kind.value.decode())
            i += 1
        _option_keys = keys
    return _option_keys


def _opt_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def _param_text(op, key, v):
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, numbers.Real):
        if not math.isfinite(v):
            raise ValueError(f"{op}: parameter {key}: {v!r} is not a finite number")
        return repr(float(v)) if isinstance(v, float) else str(int(v))
    if isinstance(v, str):
        if not v or '"' in v or "'" in v or any(ord(c) < 32 for c in v):
            raise ValueError(f"{op}: parameter {key}: text {v!r} is empty or has quotes or control characters")
        return f'"{v}"'
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_param_text(op, key, x) if isinstance(x, numbers.Real) and not isinstance(x, bool)
                               else _bad_item(op, key, x) for x in v) + ")"
    raise ValueError(f"{op}: parameter {key}: {v!r} is not a number, a text, None or a tuple of numbers")


def _bad_item(op, key, x):
    raise ValueError(f"{op}: parameter {key}: {x!r} in a tuple is not a number")


def transforms_text(ops):
    """The text form of a transform pipeline (docs/transforms.md) from a list
    of (name, {parameter: value}) pairs: the "transforms" option of
    libstoker and stokerctl. Values: numbers, tuples of numbers, texts,
    booleans, None. ValueError names the op and parameter at fault."""
    if isinstance(ops, str):
        return ops
    parts = []
    for item in ops:
        name, params = (item, {}) if isinstance(item, str) else item
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"transform name {name!r} is not a name")
        args = []
        for k, v in dict(params).items():
            if not isinstance(k, str) or not _NAME.match(k):
                raise ValueError(f"{name}: parameter name {k!r} is not a name")
            args.append(f"{k}={_param_text(name, k, v)}")
        parts.append(f"{name}({', '.join(args)})")
    if not parts:
        raise ValueError("transforms: an empty pipeline")
    return "; ".join(parts)


# Launchers' variables for (rank, world size), first match wins: torchrun
# (and torch.distributed's env:// init), then Slurm's srun.
_LAUNCHER_ENV = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def launcher_rank(environ=None):
    """(rank, world_size) as the launcher set them in the environment:
    RANK/WORLD_SIZE (torchrun), else SLURM_PROCID/SLURM_NTASKS (srun);
    None when neither pair is set. ValueError for half a pair or a value
    that is not a rank of the world."""
    env = os.environ if environ is None else environ
    for rank_var, world_var in _LAUNCHER_ENV:
        rank, world = env.get(rank_var), env.get(world_var)
        if rank is None and world is None:
            continue
        if rank is None or world is None:
            have, miss = (rank_var, world_var) if world is None else (world_var, rank_var)
            raise ValueError(f"{have} is set but {miss} is not: pass rank= and world_size= explicitly")
        try:
            r, w = int(rank), int(world)
        except ValueError:
            raise ValueError(f"{rank_var}={rank!r} {world_var}={world!r}: not integers") from None
        if w < 1 or not 0 <= r < w:
            raise ValueError(f"{rank_var}={r} is not a rank of {world_var}={w}")
        return r, w
    return None


def _rank_defaults(rank, world_size, launcher=None):
    """Explicit arguments win, then `launcher` (a callable giving (rank,
    world) or None), then the environment, then a single process."""
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    found = (launcher() if launcher else None) or launcher_rank() or (0, 1)
    return (found[0] if rank is None else int(rank)), (found[1] if world_size is None else int(world_size))


class Loader:
    """Attach to stokerd and iterate one epoch per pass.

    timeout: seconds to wait for a batch (None: forever); on expiry
    StokerError(ETIMEDOUT). socket None: $STOKER_SOCKET, else the system
    daemon, else this user's own (started if none runs: auto_start).
    dct_scaling: decode large crops at 1/2..1/8 scale in the DCT domain
    (faster, sharper than PIL); None: on for random_resized_crop, off for
    center_crop, which then matches torchvision's PIL path within 1.
    rank, world_size None: from the launcher (launcher_rank(): torchrun's
    RANK/WORLD_SIZE, Slurm's SLURM_PROCID/SLURM_NTASKS), else 0 and 1.
    One thread at a time; not picklable (create one per process).
    order: "samples" (DistributedSampler's order) or "shards" (tar shard data
    sets: WebDataset's shard order with a shuffle_buffer of samples).
    shuffle None: True, but for rect=True.
    Detection options (task="detect"): Ultralytics' hyper-parameters by
    name, close_mosaic, epochs, max_boxes, split; rect=True (letterbox):
    Ultralytics' rectangular validation batches, in aspect-ratio order, each
    its own height and width (stride=32, pad=0.5; with transform="mosaic",
    pad=0 and mosaic, mixup and cutmix 0: its rect training, shuffled only
    when every batch has one shape); resample="cv2" (OpenCV's
    INTER_LINEAR, the letterbox default) or "antialias" (faster, the mosaic
    default). sample_path(i) / sample_paths(batch.indices): file names.
    """

    # While waiting "forever", wake up this often so Ctrl-C is handled.
    _SLICE_MS = 500
    # A framework layer's (rank, world_size) source, before the environment.
    _launcher_rank = None

    def __init__(self, dataset, socket=None, batch_size=256, image_size=None, seed=0, rank=None,
                 world_size=None, transform=None, shuffle=None, drop_last=False,
                 epoch=0, prefetch=0, timeout=None, dtype=None, mean=None, std=None,
                 coordinated=False, task="classify", order="samples", shuffle_buffer=1000, dct_scaling=None,
                 device="cpu", pin_memory=False, stream=None, auto_start=None, transforms=None,
                 batch_transform=None, aug_repeats=0, aug_selected_round=256, aug_selected_ratio=0, **detect):
        """device: "cpu" or "cuda:N": with a GPU, .images is a DeviceArray in
        that GPU's memory (labels, indices and boxes stay numpy; docs/gpu.md).
        stream: the CUstream handle (int) on which each batch's release is
        ordered: the daemon refills the slot only after the work queued there
        when the next batch is taken. None: the legacy default stream, which
        work on non-blocking streams (torch's side streams, CuPy's) is NOT
        ordered with: pass the stream the batch is used on, or use
        stoker.torch, which takes torch's current stream. pin_memory:
        page-lock the host ring so that tensor.cuda(non_blocking=True) is an
        asynchronous DMA, in the calling thread's CUDA context (else one the
        process already has; never a new one); where CUDA or a context is not
        there the batches stay pageable with a warning, as PyTorch's
        DataLoader does (pin_memory="required" raises instead).
        transforms: classification's per-sample pipeline instead of
        `transform`, a list of (name, {parameter: value}) in order, e.g.
        [("RandomResizedCrop", {"size": 176}), ("RandomHorizontalFlip", {}),
        ("ToDtype", {"dtype": "float32", "scale": True}),
        ("Normalize", {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224,
        0.225)})], or its text (transforms_text(); docs/transforms.md). The
        output's size and dtype come from it (image_size and dtype, if
        given, must agree); a bad op or parameter raises StokerError naming
        it. stoker.torch.Loader(transform=...) translates torchvision's and
        timm's transforms into it (stoker.transforms).
        auto_start: with no system daemon and no STOKER_SOCKET, start this
        user's own stokerd on this node if none runs (None: unless
        STOKER_AUTOSTART=0; README "Without root").
        batch_transform: a batch op after the per-sample transforms, as
        ("MixUp", {"alpha": 0.2, "num_classes": 10}), ("CutMix", {...}),
        ("RandomChoice", {"transforms": [...], "p": [...]}) or
        ("timm.Mixup", {...}), or a list of one (stoker.batch_transforms;
        docs/transforms.md): batches then carry .soft_labels.
        aug_repeats: repeated augmentation (torchvision's RASampler, timm's
        RepeatAugSampler with selected_round=aug_selected_round and
        selected_ratio=aug_selected_ratio, 0: world_size), each copy
        augmented differently."""
        self._h = None
        self._stream = int(stream or 0)
        self._batch = None
        self._fresh = True  # nothing taken since attach / set_epoch
        self._done = False  # the current pass met end of epoch
        self._pass = 0      # bumped by each __iter__; older iterators stop
        self.timeout = timeout
        self.dataset = os.fspath(dataset)
        lib = load_library()
        # transforms: the per-sample pipeline, [(name, {parameter: value})] or its text
        pipeline = None if transforms is None else transforms_text(transforms)
        if pipeline is not None and transform is not None:
            raise TypeError("transform and transforms both given: the pipeline replaces the transform")
        if pipeline is None and transform is None:  # each task's training transform
            transform = "mosaic" if task == "detect" else "random_resized_crop"
        if shuffle is None:  # rectangular batches come in aspect-ratio order
            shuffle = not detect.get("rect")
        unknown = set(detect) - {k for k, (t, _) in option_keys().items() if t == "detect"}
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        if detect and task != "detect":
            raise TypeError(f"{', '.join(sorted(detect))}: options of task='detect'")
        rank, world_size = _rank_defaults(rank, world_size, self._launcher_rank)
        opts = {
            "task": task,
            "batch_size": batch_size, "seed": seed, "rank": rank,
            "world_size": world_size, "shuffle": shuffle,
            "drop_last": drop_last, "epoch": epoch, "prefetch": prefetch, "coordinated": coordinated,
            "order": order, "shuffle_buffer": shuffle_buffer,
            "device": str(device),
            "pin_memory": "true" if pin_memory == "required" else "try" if pin_memory else "false",
        }
        # A pipeline says its output size and dtype; the fixed transforms take these.
        if pipeline is not None:
            opts["transforms"] = pipeline
        else:
            opts["transform"] = transform
            image_size = 224 if image_size is None else image_size
            dtype = "uint8" if dtype is None else dtype
        if image_size is not None:
            opts["image_size"] = image_size
        if dtype is not None:
            opts["dtype"] = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        # Float output: CHW, (x/255 - mean)/std, as ToTensor()+Normalize().
        if mean is not None:
            opts["mean"] = ",".join(repr(float(v)) for v in mean)
        if std is not None:
            opts["std"] = ",".join(repr(float(v)) for v in std)
        if dct_scaling is not None:  # None: the transform's default
            opts["dct_scaling"] = bool(dct_scaling)
        opts.update((k, v) for k, v in detect.items() if v is not None)
        if batch_transform is not None:
            from . import batch_transforms
            opts["batch_transform"] = batch_transforms.to_text(batch_transform)
        if aug_repeats and aug_repeats > 1:
            opts.update(aug_repeats=int(aug_repeats), aug_selected_round=int(aug_selected_round),
                        aug_selected_ratio=int(aug_selected_ratio))
        if pin_memory:
            self._pin_context()
        opts.update(_s3_credentials(self.dataset))
        h = _connect(socket, _userd.autostart_wanted(auto_start))
        self._h = h
        o = ctypes.c_void_p()
        rc = lib.stoker_opts_new(ctypes.byref(o))
        if rc < 0:
            self.close()
            raise _error(rc, None, "stoker_opts_new")
        try:
            for k, v in opts.items():
                rc = lib.stoker_opts_set(o, k.encode(), _opt_text(v).encode())
                if rc < 0:
                    raise _error(rc, None, f"bad option {k}={_opt_text(v)!r}")
            rc = lib.stoker_attach(h, _enc(self.dataset), o)
            if rc < 0:
                raise _error(rc, h, f"cannot attach to {self.dataset}")
            if pin_memory and not lib.stoker_pinned(h):
                import warnings
                warnings.warn((lib.stoker_last_error(h) or b"pin_memory: not pinned").decode(errors="replace"),
                              RuntimeWarning, stacklevel=2)
        except BaseException:
            self.close()
            raise
        finally:
            lib.stoker_opts_free(o)

    # -- facts of the attachment
    def _handle(self):
        if not self._h:
            raise StokerError(_errno.EBADF, "loader is closed")
        return self._h

    @property
    def dataset_samples(self):
        return int(_lib.stoker_dataset_samples(self._handle()))

    @property
    def samples_per_epoch(self):
        """This rank's samples per epoch (padded like DistributedSampler)."""
        return int(_lib.stoker_samples_per_epoch(self._handle()))

    @property
    def num_classes(self):
        return int(_lib.stoker_num_classes(self._handle()))

    @property
    def task(self):
        """"classify" or "detect"."""
        return "detect" if _lib.stoker_task(self._handle()) == 1 else "classify"

    @property
    def label_errors(self):
        """Detection: objects dropped from the data set's label files
        (malformed lines, values out of range; the daemon logged each)."""
        return int(_lib.stoker_label_errors(self._handle()))

    @property
    def decode_error_files(self):
        """Files of the data set found unreadable so far, each counted once
        (their samples were replaced; the daemon logged each), as of the
        latest batch announced."""
        return int(_lib.stoker_decode_error_files(self._handle()))

    @property
    def class_names(self):
        """Detection: the class names of the data.yaml ([] without one)."""
        h = self._handle()
        out = []
        while True:
            name = _lib.stoker_class_name(h, len(out))
            if name is None:
                return out
            out.append(name.decode())

    def sample_path(self, index):
        """The path of data-set sample `index` (as batch.indices names them):
        Ultralytics' im_file. Fetched from the daemon in chunks, cached."""
        h = self._handle()
        buf = ctypes.create_string_buffer(8192)
        rc = _lib.stoker_sample_path(h, int(index), buf, len(buf))
        if rc < 0:
            raise _error(rc, h, f"sample_path({index})")
        return os.fsdecode(buf.value)

    def sample_paths(self, indices):
        """[sample_path(i) for i in indices], e.g. a batch's .indices."""
        return [self.sample_path(i) for i in indices]

    @property
    def epoch(self):
        """The epoch being produced."""
        return int(_lib.stoker_epoch(self._handle()))

    def __len__(self):
        return int(_lib.stoker_batches_per_epoch(self._handle()))

    @property
    def device(self):
        """"cuda:N" when batches are delivered into GPU memory, else "cpu"."""
        n = int(_lib.stoker_device(self._handle()))
        return f"cuda:{n}" if n >= 0 else "cpu"

    @property
    def pinned(self):
        """True when the host ring is page-locked (pin_memory)."""
        return bool(_lib.stoker_pinned(self._handle()))

    def _pin_context(self):
        """pin_memory: make the framework's CUDA context current first (the
        library pins in the current context and never creates one); a
        framework layer knows which. The core binding has none to make."""

    def _wait_stream(self):
        """The CUstream (int) a device batch is ordered on before it is
        handed out; a framework layer picks its current stream."""
        return self._stream

    # -- iteration
    def set_epoch(self, epoch):
        """Restart production at the beginning of `epoch`."""
        self._release()
        h = self._handle()
        rc = _lib.stoker_set_epoch(h, int(epoch))
        if rc < 0:
            raise _error(rc, h, f"set_epoch({epoch})")
        self._fresh = True
        self._done = False

    # -- exact resume, as torchdata's StatefulDataLoader
    def state_dict(self):
        """Where this loader stands: the epoch and the batches taken in it,
        with what the order depends on. Save it with the model checkpoint."""
        h = self._handle()
        buf = ctypes.create_string_buffer(256)
        rc = _lib.stoker_checkpoint(h, buf, len(buf))
        if rc < 0:
            raise _error(rc, h, "checkpoint")
        token = buf.value.decode()
        fields = dict(kv.split("=", 1) for kv in token.split()[1:])
        return {"token": token, "epoch": int(fields["epoch"]), "batches_taken": int(fields["batch"])}

    def load_state_dict(self, state):
        """Continue from `state` (from state_dict(), possibly of another
        process or before a daemon restart): the next pass yields exactly the
        batches of that epoch not yet taken."""
        self._release()
        h = self._handle()
        rc = _lib.stoker_restore(h, state["token"].encode())
        if rc < 0:
            raise _error(rc, h, "load_state_dict")
        self._fresh = True
        self._done = False

    def __iter__(self):
        """One pass over the current epoch (restarted unless nothing was taken yet)."""
        if not self._fresh:
            self.set_epoch(self.epoch)
        self._pass += 1
        return _Pass(self, self._pass)

    def _next(self):
        h = self._handle()
        self._release()
        if self._done:
            return None
        self._fresh = False
        out = ctypes.c_void_p()
        if self.timeout is None:
            while True:
                rc = _lib.stoker_next(h, self._SLICE_MS, ctypes.byref(out))
                if rc != -_errno.ETIMEDOUT:
                    break
        else:
            rc = _lib.stoker_next(h, max(0, int(self.timeout * 1000)), ctypes.byref(out))
        if rc == -_errno.ENODATA:
            self._done = True
            return None
        if rc < 0:
            raise _error(rc, h, "next batch")
        self._batch = b = out.value
        dev = int(_lib.stoker_device(self._h))
        if dev < 0:
            return self._make_batch(_BatchMemory(b))
        stream = self._wait_stream()
        rc = _lib.stoker_batch_wait(b, stream or None)
        if rc < 0:
            raise _error(rc, self._h, "ordering the batch on the stream")
        return self._make_batch(_BatchMemory(b, dev, stream))

    def _make_batch(self, mem):
        """The Batch the iteration yields, from the batch's memory (numpy
        views here; stoker.torch makes tensors)."""
        return Batch(
            boxes=None if mem.boxes is None else _view(mem.boxes, (mem.box_rows, 6), np.float32),
            shapes=None if mem.shapes is None else _view(mem.shapes, (mem.count, 4), np.int32),
            ratio_pad=None if mem.ratio_pad is None else _view(mem.ratio_pad, (mem.count, 4), np.float64),
            soft_labels=None if mem.soft is None else _view(mem.soft, (mem.count, mem.soft_classes), np.float32),
            mix=None if mem.mix is None else _mix_view(mem.mix, mem.count),
            masks=_masks_view(mem), keypoints=_keypoints_view(mem),
            obb=None if mem.obb is None else _view(mem.obb, mem.obb_shape, np.float32),
            images=(DeviceArray(mem.images, mem.image_shape, mem.image_dtype, mem.device, mem.stream)
                    if mem.device >= 0 else _view(mem.images, mem.image_shape, mem.image_dtype)),
            labels=_view(mem.labels, (mem.count,), mem.label_dtype),
            indices=_view(mem.indices, (mem.count,), np.int64),
            epoch=mem.epoch, index=mem.index, replaced=mem.replaced,
        )

    def _release(self):
        b, self._batch = self._batch, None
        if b:
            _lib.stoker_release(b)

    # -- lifetime
    def close(self):
        """Release the current batch and disconnect. Idempotent."""
        lib = _lib
        if lib is None:
            return
        b, self._batch = getattr(self, "_batch", None), None
        h, self._h = getattr(self, "_h", None), None
        if b:
            lib.stoker_release(b)
        if h:
            lib.stoker_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __reduce__(self):
        raise TypeError("stoker.Loader cannot be pickled; create one in each process")

    def __repr__(self):
        state = "closed" if not self._h else f"epoch={self.epoch} batches={len(self)}"
        return f"<stoker.Loader {self.dataset!r} {state}>"


class _Pass:
    """Iterator for one pass of a Loader; stops if a newer pass begins."""

    __slots__ = ("_loader", "_pass")

    def __init__(self, loader, n):
        self._loader = loader
        self._pass = n

    def __iter__(self):
        return self

    def __next__(self):
        ld = self._loader
        if ld is None or ld._pass != self._pass:
            raise StopIteration
        b = ld._next()
        if b is None:
            self._loader = None
            raise StopIteration
        return b


def _fetch_text(fn, socket, what):
    """Connect, call a libstoker function that returns malloc'd text."""
    lib = load_library()
    h = _connect(socket)
    try:
        p = ctypes.c_void_p()
        rc = getattr(lib, fn)(h, ctypes.byref(p))
        if rc < 0:
            raise _error(rc, h, what)
        try:
            return ctypes.string_at(p.value).decode()
        finally:
            _libc.free(p.value)
    finally:
        lib.stoker_close(h)


def _s3_credentials(dataset):
    """This process's own AWS keys for an s3:// data set, as the AWS CLI takes
    static keys: the environment's, else its profile's (AWS_PROFILE, else
    "default") in the shared credentials file (AWS_SHARED_CREDENTIALS_FILE,
    else ~/.aws/credentials). stokerd reads the data set with them, for this
    session only (docs/deploy.md "Multi-user nodes"). {} when there are none."""
    if not dataset.startswith("s3://"):
        return {}
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        found = {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
                 "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
                 "aws_session_token": env.get("AWS_SESSION_TOKEN", "")}
    else:
        import configparser
        ini = configparser.ConfigParser(interpolation=None)
        try:
            ini.read(env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials"))
        except (OSError, configparser.Error):
            return {}
        profile = env.get("AWS_PROFILE") or "default"
        if not ini.has_section(profile):
            return {}
        found = {k: ini.get(profile, k, fallback="")
                 for k in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")}
    if not (found["aws_access_key_id"] and found["aws_secret_access_key"]):
        return {}
    return {k: v for k, v in found.items() if v}


def stats(socket=None):
    """The daemon's statistics as a dict (no attach needed)."""
    return json.loads(_fetch_text("stoker_stats_json", socket, "stats"))


def metrics(socket=None):
    """The daemon's metrics, Prometheus text exposition format."""
    return _fetch_text("stoker_metrics", socket, "metrics")


def config(socket=None):
    """The daemon's configuration: {"files": [...], "settings": {key: {"value",
    "origin", "live", "effective", "pending"}}}."""
    return json.loads(_fetch_text("stoker_config_json", socket, "config"))


def reload(socket=None):
    """Re-read the configuration files (as SIGHUP); returns the report text.
    Needs root, the daemon's user or its admin_group."""
    return _fetch_text("stoker_reload", socket, "reload")


def set_config(key, value, socket=None):
    """Change a setting now, until the daemon restarts (as `stokerctl set`).
    Needs root, the daemon's user or its admin_group; EOPNOTSUPP for a key
    that needs a restart."""
    lib = load_library()
    h = _connect(socket)
    try:
        rc = lib.stoker_config_set(h, str(key).encode(), _opt_text(value).encode())
        if rc < 0:
            raise _error(rc, h, f"set {key}={value}")
    finally:
        lib.stoker_close(h)


def drain(timeout=0, socket=None):
    """Take no new clients; the daemon exits once the attached ones have left
    (or after `timeout` seconds, 0: no limit). Returns the clients it waits for."""
    lib = load_library()
    h = _connect(socket)
    try:
        n = ctypes.c_uint32()
        rc = lib.stoker_drain(h, int(timeout), ctypes.byref(n))
        if rc < 0:
            raise _error(rc, h, "drain")
        return n.value
    finally:
        lib.stoker_close(h)
