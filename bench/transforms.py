#!/usr/bin/env python3
"""The user's per-sample transform in stokerd against torchvision's v2
DataLoader, one run, one data set: torchvision's ResNet-50 v2 training
pipeline (RandomResizedCrop 176, flip, TrivialAugmentWide with bilinear
interpolation as torchvision's references/classification/presets.py passes
it, ToDtype float32, Normalize, RandomErasing 0.1), and RandomResizedCrop +
flip alone; NVIDIA
DALI's CPU pipeline for both (fn.decoders.image on the CPU,
fn.random_resized_crop, fn.flip, its auto_aug trivial_augment_wide,
fn.crop_mirror_normalize to float32 CHW; DALI has no op drawing
torchvision's RandomErasing boxes, so its ResNet-50 v2 row has no erasing
(p = 0.1: a small share)); and timm's DeiT training pipeline
(create_transform(224, is_training=True, color_jitter=0.3,
auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic",
re_prob=0.25, re_mode="pixel")) on stokerd against timm's create_loader
(ImageDataset, use_prefetcher=False: the prefetcher normalises and erases on
a GPU).

    STOKER_BUILD=build PYTHONPATH=client/python python3 bench/transforms.py DATASET [--workers N]

stoker gets the very Compose the DataLoader runs (stoker.torch.Loader's
transform=, translated by stoker.transforms), dct_scaling off (PIL's
pixels). The DataLoader: ImageFolder (PIL), num_workers = --workers
(default: the usable CPUs), persistent workers, batch 128. Each side
runs one warm-up epoch then --epochs timed ones; printed: images/s and
CPU ms per image (all of stokerd's and the client's CPU; the DataLoader's
main and worker processes'), the best timed epoch of each, and the ratios.
On a machine shared with other work, CPU per image is the figure to
compare (throughput depends on the share of the CPUs each side gets).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cpu_per_image import children, cpu_seconds, scratch_daemon  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


DEIT = dict(is_training=True, color_jitter=0.3, auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic",
            re_prob=0.25, re_mode="pixel", re_count=1)


def deit_transform():
    from timm.data import create_transform
    return create_transform(224, use_prefetcher=False, **DEIT)


def dali_epoch_fn(dataset, name, workers, batch_size):
    """A DALI CPU pipeline for `name` and a function running one epoch of it; None when DALI is missing."""
    try:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.auto_aug import trivial_augment
    except ImportError:
        return None

    @pipeline_def(batch_size=batch_size, num_threads=workers, device_id=None, seed=0, enable_conditionals=True)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=dataset, random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.random_resized_crop(images, size=176)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        if name == "resnet50-v2":
            images = trivial_augment.trivial_augment_wide(images)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[255 * m for m in MEAN], std=[255 * s for s in STD])
        return images, labels

    p = pipe()
    p.build()
    steps = -(-p.epoch_size("Reader") // batch_size)

    def epoch(_e):
        n = 0
        for _ in range(steps):
            images, _labels = p.run()
            n += len(images)
        return n
    return epoch


def pipelines():
    import torch
    from torchvision.transforms import v2
    rrc = [v2.RandomResizedCrop(176, antialias=True), v2.RandomHorizontalFlip()]
    tail = [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    return {
        "rrc+flip": v2.Compose(rrc + tail),
        # the reference recipe's interpolation (its default, bilinear), not
        # TrivialAugmentWide()'s own default (nearest)
        "resnet50-v2": v2.Compose(rrc + [v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR)] +
                                  tail + [v2.RandomErasing(0.1)]),
    }


def timed(run_epoch, pids, epochs):
    """(best images/s, best CPU ms per image) over the timed epochs, after a warm-up epoch."""
    run_epoch(0)
    rates, cpus = [], []
    for e in range(1, epochs + 1):
        p = pids()
        c0, t0 = cpu_seconds(p), time.monotonic()
        n = run_epoch(e)
        dt, cpu = time.monotonic() - t0, cpu_seconds(p) - c0
        rates.append(n / dt)
        cpus.append(1000 * cpu / n)
    return max(rates), min(cpus)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    a = ap.parse_args()
    import torch
    import stoker.torch
    from torchvision import datasets

    rows = {}
    with scratch_daemon(a.workers) as (sock, daemon_pid):
        for name, compose in list(pipelines().items()) + [("deit", deit_transform())]:
            with stoker.torch.Loader(a.dataset, socket=sock, batch_size=a.batch_size, transform=compose,
                                     dct_scaling=False) as ld:
                def epoch(e, ld=ld):
                    ld.set_epoch(e)
                    return sum(len(labels) for _, labels in ld)

                rows[("stoker", name)] = timed(epoch, lambda: [daemon_pid, os.getpid()], a.epochs)

    for name, compose in pipelines().items():
        torch.manual_seed(0)
        loader = torch.utils.data.DataLoader(datasets.ImageFolder(a.dataset, transform=compose),
                                             batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                                             persistent_workers=True)
        rows[("torch", name)] = timed(lambda e: sum(len(labels) for _, labels in loader),
                                      lambda: [os.getpid()] + children(os.getpid()), a.epochs)
        del loader

    from timm.data import ImageDataset, create_loader
    from timm.data import auto_augment as aa
    from PIL import Image

    def posterize(img, bits_to_keep, **__):
        # Pillow >= 11 refuses bits 0, which PosterizeIncreasing reaches at
        # magnitude 10 (rand-m9 with mstd0.5): older Pillows black the image,
        # as stokerd does; without this timm's own loader raises.
        if bits_to_keep >= 8:
            return img
        return Image.new(img.mode, img.size) if bits_to_keep <= 0 else aa.ImageOps.posterize(img, bits_to_keep)

    for name in ("Posterize", "PosterizeIncreasing", "PosterizeOriginal"):
        aa.NAME_TO_OP[name] = posterize
    loader = create_loader(ImageDataset(a.dataset), input_size=(3, 224, 224), batch_size=a.batch_size,
                           use_prefetcher=False, num_workers=a.workers, persistent_workers=True, **DEIT)
    rows[("timm", "deit")] = timed(lambda e: sum(len(labels) for _, labels in loader),
                                   lambda: [os.getpid()] + children(os.getpid()), a.epochs)
    del loader

    for name in ("rrc+flip", "resnet50-v2"):
        epoch = dali_epoch_fn(a.dataset, name, a.workers, a.batch_size)
        if epoch is None:
            print("DALI not installed (bench/install-peers.sh): no DALI rows")
            break
        rows[("dali", name)] = timed(epoch, lambda: [os.getpid()], a.epochs)

    print(f"{'pipeline':14} {'loader':8} {'images/s':>10} {'CPU ms/image':>13}")
    for (who, name), (rate, cpu) in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{name:14} {who:8} {rate:10.1f} {cpu:13.2f}")
    for name, peer in (("rrc+flip", "torch"), ("resnet50-v2", "torch"), ("rrc+flip", "dali"),
                       ("resnet50-v2", "dali"), ("deit", "timm")):
        if (peer, name) not in rows:
            continue
        (sr, sc), (tr, tc) = rows[("stoker", name)], rows[(peer, name)]
        print(f"{name}: stoker / {peer} images/s {sr / tr:.2f}x, {peer} / stoker CPU per image "
              f"{tc / sc:.2f}x")
    for who in ("stoker", "torch", "dali"):
        if (who, "rrc+flip") not in rows or (who, "resnet50-v2") not in rows:
            continue
        base, full = rows[(who, "rrc+flip")][1], rows[(who, "resnet50-v2")][1]
        print(f"{who}: TrivialAugmentWide + erasing cost {100 * (full / base - 1):+.0f}% CPU per image over "
              f"RRC + flip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
