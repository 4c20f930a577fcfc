#!/usr/bin/env python3
"""NVIDIA DALI peer, CPU only (device_id=None): readers.file with shuffling,
decoders.image on the CPU to RGB, random_resized_crop(224), random
horizontal flip; batch 256, num_threads = cores.

    peer_dali.py --dataset DIR --cores N [--variant spec|fused] ...

--variant fused replaces decode + random_resized_crop with DALI's fused
decoders.image_random_crop (decodes only the crop window) + resize, the
fairest DALI counterpart of stoker's crop-aware decode. Not in the issue's
list; reported as an extra row.
"""

import math
import sys

from _common import log_to_stderr, measure, peer_arguments, result, unavailable


def main():
    p = peer_arguments()
    p.add_argument("--cores", type=int, required=True)
    p.add_argument("--variant", default="spec", choices=["spec", "fused"])
    a = p.parse_args()
    log = log_to_stderr(f"dali {a.variant}")

    try:
        import nvidia.dali as dali
        from nvidia.dali import fn, pipeline_def, types
        import numpy as np
    except ImportError as e:
        unavailable("not installed", f"{e} (bench/install-peers.sh)")

    @pipeline_def(batch_size=a.batch_size, num_threads=a.cores, device_id=None, seed=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.dataset, random_shuffle=True, name="Reader")
        if a.variant == "spec":
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.random_resized_crop(images, size=a.image_size)
        else:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=a.image_size, resize_y=a.image_size)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        return images, labels

    try:
        pp = pipe()
        pp.build()
        samples = pp.epoch_size("Reader")
    except Exception as e:  # noqa: BLE001 - e.g. a build that insists on a GPU
        unavailable("not available", f"DALI CPU pipeline: {type(e).__name__}: {e}")

    # The reader runs on across epochs (no padding): an "epoch" is
    # ceil(samples / batch) full batches.
    batches = math.ceil(samples / a.batch_size)
    seen = {}

    def run_epoch(epoch):
        n, check = 0, 0
        for _ in range(batches):
            images, labels = pp.run()
            last = images[len(images) - 1]
            if not seen:
                seen["shape"] = list(last.shape())
            n += len(images)
            check += int(np.asarray(last).reshape(-1)[:64].sum()) + len(labels)  # a view, no copy
        return n

    r = measure(run_epoch, a.epochs, a.min_seconds, log)
    r.update(batch_size=a.batch_size, num_threads=a.cores, output=seen, variant=a.variant,
             versions={"nvidia-dali": dali.__version__})
    result(**r)


if __name__ == "__main__":
    sys.exit(main())
