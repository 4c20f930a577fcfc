"""stoker for PyTorch: batches as torch tensors, zero-copy, and the
launcher's rank and world size by default.

    import stoker.torch
    loader = stoker.torch.Loader("/data/imagenet/train", batch_size=256)
    for epoch in range(start_epoch, epochs):
        loader.set_epoch(epoch)                # as DistributedSampler.set_epoch
        for images, labels in loader:         # uint8 [B,3,H,W] channels_last, int64 [B]
            ...

Under torchrun (or any launcher), rank and world_size come from
torch.distributed when it is initialised, else from RANK/WORLD_SIZE or
SLURM_PROCID/SLURM_NTASKS; explicit arguments win. The socket is
$STOKER_SOCKET unless given.

Tensors are views of the daemon's ring, not copies:

- uint8 images are NCHW in torch.channels_last memory format: the permuted
  view of the ring's NHWC slot, which is exactly that layout.
  `images.is_contiguous(memory_format=torch.channels_last)` is true, and a
  channels_last model reads them without a copy.
- float32/float16 images (dtype="float32", normalised by the daemon) are
  contiguous NCHW.
- labels are int64 [B]; the ring stores int64, so they are views too (a
  ring with narrower labels would cost one B-element copy per batch).
- detection boxes are float32 [N, 6] (image in batch, class, cx, cy, w, h).

With device="cuda:N" (docs/gpu.md) images are CUDA tensors on that GPU,
zero-copy views of the device ring's slot, in the same layouts; each batch
is complete on the GPU when it is handed out, and its release is ordered
on torch's current stream of that device at the time it is taken (or the
stream given), so the daemon refills the slot only after the work queued
there has run. Labels, indices and boxes stay on the host.
pin_memory=True page-locks the host ring in torch's context of the current
device (made current first; no context on another GPU):
`.cuda(non_blocking=True)` is then an asynchronous DMA, which must finish
before the next batch is taken (copy on a side stream and synchronise it),
as the slot goes back to the daemon then.

What the caller may not do: write into them (the ring is mapped read-only:
an in-place op such as `images.sub_(...)` or `labels[0] = 1` faults
the process with SIGSEGV), or use them after the next batch is taken (the
daemon refills the slot; after close() the memory is unmapped). To keep
one, copy it: `images.clone()`, or move it (`images.to("cuda")`,
`images.float()`), which makes a new tensor anyway.
"""

import numpy as np
import torch

import stoker as _core
from stoker import StokerError, launcher_rank  # noqa: F401  (re-exported)

__all__ = ["Loader", "Batch", "StokerError", "distributed_rank", "launcher_rank"]


def distributed_rank():
    """(rank, world_size) of the initialised default process group, or None."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _tensor(addr, shape, dtype):
    # The array only lacks numpy's writeable flag, so torch.from_numpy()
    # shares it without its per-call warning; the pages stay read-only.
    return torch.from_numpy(_core._view(addr, shape, dtype, readonly=False))


def _images(mem):
    """The batch's images: a CPU tensor over the host ring, or a CUDA tensor
    over the device ring (__cuda_array_interface__, no copy)."""
    if mem.device < 0:
        return _tensor(mem.images, mem.image_shape, mem.image_dtype)
    arr = _core.DeviceArray(mem.images, mem.image_shape, mem.image_dtype, mem.device, mem.stream)
    return torch.as_tensor(arr, device=f"cuda:{mem.device}")


class Batch(tuple):
    """One batch as the default collate gives it: `images, labels = batch`,
    batch[0], batch[1], len(batch) == 2 (for detection: images, boxes).
    Also .images, .labels (int64 [B]; detection: each image's box count),
    .boxes (detection: float32 [N, 6], else None), .shapes and .ratio_pad
    (detection: int32 [B, 4] and float64 [B, 4], Ultralytics' per-image
    metadata, see stoker.Batch), .indices (int64 [B], the samples
    delivered), .epoch, .index (batch number in the epoch), .replaced
    (unreadable samples replaced). With a batch op (batch_transform=),
    the second element is .soft_labels (float32 [B, classes], the mixed soft
    targets) and .mix the numpy records of what each sample got. yolo_task
    segment: .masks, numpy uint16 [B, H / mask_ratio, W / mask_ratio] (see
    stoker.Batch); pose: .keypoints, float32 [B, max_boxes, kpt_points, 3];
    obb: .obb, float32 [B, max_boxes, 5] (xywhr).
    Valid until the next batch."""

    def __new__(cls, images, labels, indices, epoch, index, replaced, boxes=None, shapes=None, ratio_pad=None,
                soft_labels=None, mix=None, masks=None, keypoints=None, obb=None):
        second = boxes if boxes is not None else soft_labels if soft_labels is not None else labels
        self = super().__new__(cls, (images, second))
        self.images, self.labels, self.indices, self.boxes = images, labels, indices, boxes
        self.shapes, self.ratio_pad = shapes, ratio_pad
        self.soft_labels, self.mix = soft_labels, mix
        self.masks, self.keypoints, self.obb = masks, keypoints, obb
        self.epoch, self.index, self.replaced = epoch, index, replaced
        return self

    def __repr__(self):
        return (f"<stoker.torch.Batch epoch={self.epoch} index={self.index} "
                f"images={tuple(self.images.shape)} {self.images.dtype} replaced={self.replaced}>")


class Loader(_core.Loader):
    """stoker.Loader yielding torch tensors (see the module's doc for their
    layout and lifetime). Same arguments; rank and world_size default to
    torch.distributed's when it is initialised, then the launcher's
    environment. len(loader) is this rank's batches per epoch;
    set_epoch(), state_dict() and load_state_dict() as in stoker.Loader.
    transform may also be the per-sample transform the training script
    already has: a torchvision.transforms.v2 (or v1) Compose or timm's
    create_transform(...) result, run by stokerd in C (stoker.transforms
    translates it; ValueError names what cannot run exactly)."""

    _launcher_rank = staticmethod(distributed_rank)

    def __init__(self, dataset, *args, transform=None, batch_transform=None, **kwargs):
        """transform: a torchvision (v2 or v1) Compose or timm's
        create_transform result, translated (stoker.transforms).
        batch_transform: torchvision.transforms.v2's MixUp / CutMix /
        RandomChoice of them, timm's Mixup, or stoker's framework-free form
        (stoker.batch_transforms); anything else raises ValueError."""
        if transform is not None and not isinstance(transform, str):
            from stoker.transforms import translate
            if kwargs.get("transforms") is not None:
                raise TypeError("transform and transforms both given")
            kwargs["transforms"], transform = translate(transform), None
        if batch_transform is not None:
            from stoker import batch_transforms
            batch_transform = batch_transforms.from_object(batch_transform)
        super().__init__(dataset, *args, transform=transform, batch_transform=batch_transform, **kwargs)

    def _pin_context(self):
        # pin_memory pins in the current context: torch's, on its current
        # device (cudaDeviceSynchronize makes it and makes it current here).
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def _wait_stream(self):
        # Device batches: released on torch's current stream for the device,
        # unless a stream was given.
        if self._stream:
            return self._stream
        return torch.cuda.current_stream(torch.device(self.device)).cuda_stream

    def _make_batch(self, mem):
        images = _images(mem)
        if mem.image_dtype == np.uint8:
            images = images.permute(0, 3, 1, 2)  # NHWC memory: NCHW, channels_last
        labels = _tensor(mem.labels, (mem.count,), mem.label_dtype)
        if labels.dtype != torch.int64:
            labels = labels.to(torch.int64)
        boxes = None if mem.boxes is None else _tensor(mem.boxes, (mem.box_rows, 6), np.float32)
        shapes = None if mem.shapes is None else _tensor(mem.shapes, (mem.count, 4), np.int32)
        ratio_pad = None if mem.ratio_pad is None else _tensor(mem.ratio_pad, (mem.count, 4), np.float64)
        soft = None if mem.soft is None else _tensor(mem.soft, (mem.count, mem.soft_classes), np.float32)
        mix = None if mem.mix is None else _core._mix_view(mem.mix, mem.count)
        return Batch(images=images, labels=labels, indices=_tensor(mem.indices, (mem.count,), np.int64),
                     epoch=mem.epoch, index=mem.index, replaced=mem.replaced, boxes=boxes, shapes=shapes,
                     ratio_pad=ratio_pad, soft_labels=soft, mix=mix, masks=_core._masks_view(mem),
                     keypoints=None if mem.keypoints is None else _tensor(mem.keypoints, mem.keypoint_shape,
                                                                          np.float32),
                     obb=None if mem.obb is None else _tensor(mem.obb, mem.obb_shape, np.float32))

    def __repr__(self):
        return "<stoker.torch" + super().__repr__()[len("<stoker"):]
