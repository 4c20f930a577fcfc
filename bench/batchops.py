#!/usr/bin/env python3
"""torchvision's full ResNet-50 v2 training recipe's data side on stokerd
against torchvision's DataLoader, one run, one data set: the per-sample
pipeline (RandomResizedCrop 176, flip, TrivialAugmentWide, ToDtype float32,
Normalize, RandomErasing 0.1), RandomChoice([MixUp(0.2), CutMix(1.0)]) per
batch and repeated augmentation (4 repeats), and the batch ops' cost as a
share of stoker's pipeline.

    STOKER_BUILD=build PYTHONPATH=client/python python3 bench/batchops.py DATASET [--workers N]

stoker: stoker.torch.Loader(transform=compose, batch_transform=RandomChoice,
aug_repeats=4, aug_selected_round=0), dct_scaling off; the same without
batch_transform (the batch ops' share: the CPU per image they add, over the
CPU per image with them). The DataLoader: ImageFolder (PIL) with the same
Compose, torchvision's references' RASampler (world size 1), the batch op
in its collate_fn as references/classification/train.py does, num_workers
= --workers, persistent workers, batch 128. Printed: images/s and CPU ms per
image (stokerd's and the client's CPU; the DataLoader's processes'), best
timed epoch after a warm-up, and the ratios.

The batch ops' share is measured three ways: the workers' CPU time in the
batch op as the daemon counts it (stats' worker_batch_op_seconds, thread CPU
time around the mixing and the soft targets) per image, over stoker's CPU
per image with it (the figure the goal is held to); the difference of stoker's CPU
per image with and without the batch op (--rounds alternating pairs, the
best of each: two runs' noise is as large as the difference on a loaded
machine), and the batch op alone (build/tests/batchmix -T: draw and mix of
batches of the same size, dtype and image size in memory, ns per image)
over stoker's CPU per image with it.
"""

import argparse
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cpu_per_image import children, cpu_seconds, scratch_daemon  # noqa: E402
from transforms import MEAN, STD, timed  # noqa: E402

REPEATS = 4
SIZE = 176
MIX_TEXT = "RandomChoice(MixUp(alpha=0.2), CutMix(alpha=1.0))"


def batchmix_alone(batch_size, batches=40):
    """ns per image of the batch op alone (draw + mix, float32 SIZE x SIZE)."""
    build = os.environ.get("STOKER_BUILD") or os.path.join(HERE, "..", "build")
    out = subprocess.run([os.path.join(build, "tests", "batchmix"), "-T", "float32", "-c", str(batch_size), "-g",
                          f"{SIZE}x{SIZE}", "-n", str(batches), MIX_TEXT], check=True, capture_output=True, text=True)
    return float(out.stdout.split()[0])


class RASampler:
    """torchvision references/classification/sampler.py's RASampler, world size 1."""

    def __init__(self, n, repetitions):
        self.n, self.repetitions, self.epoch = n, repetitions, 0
        # every sample selected (as stoker's aug_selected_round=0 on one rank)
        self.num_selected_samples = n

    def set_epoch(self, e):
        self.epoch = e

    def __iter__(self):
        import torch
        g = torch.Generator()
        g.manual_seed(self.epoch)
        indices = torch.randperm(self.n, generator=g).tolist()
        indices = [i for i in indices for _ in range(self.repetitions)]
        return iter(indices[: self.num_selected_samples])

    def __len__(self):
        return self.num_selected_samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="alternating pairs of stoker runs with and without")
    ap.add_argument("--no-dataloader", action="store_true", help="stoker only (the batch ops' share)")
    a = ap.parse_args()
    import torch
    import stoker.torch
    from torchvision import datasets
    from torchvision.transforms import v2

    compose = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip(),
                          v2.TrivialAugmentWide(), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                          v2.Normalize(MEAN, STD), v2.RandomErasing(0.1)])
    nc = len([e for e in os.scandir(a.dataset) if e.is_dir()])
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=nc), v2.CutMix(alpha=1.0, num_classes=nc)])
    rows = {}
    in_daemon = math.inf
    with scratch_daemon(a.workers) as (sock, daemon_pid):
        for _ in range(a.rounds):
            for name, bt in (("stoker", mix), ("stoker, no batch op", None)):
                with stoker.torch.Loader(a.dataset, socket=sock, batch_size=a.batch_size, transform=compose,
                                         batch_transform=bt, aug_repeats=REPEATS, aug_selected_round=0,
                                         dct_scaling=False, drop_last=True) as ld:
                    def epoch(e, ld=ld):
                        ld.set_epoch(e)
                        return sum(len(t) for _, t in ld)

                    s0 = stoker.stats(sock)
                    rate, cpu = timed(epoch, lambda: [daemon_pid, os.getpid()], a.epochs)
                    s1 = stoker.stats(sock)
                    old = rows.get(name, (0, math.inf))
                    rows[name] = (max(rate, old[0]), min(cpu, old[1]))
                    if bt is not None:  # the workers' CPU in the batch op, ms per image
                        images = s1["samples_decoded"] - s0["samples_decoded"]
                        spent = s1["worker_batch_op_seconds"] - s0["worker_batch_op_seconds"]
                        in_daemon = min(in_daemon, 1000 * spent / images)
    alone = batchmix_alone(a.batch_size) / 1e6

    def collate(batch):
        return mix(*torch.utils.data.default_collate(batch))

    if not a.no_dataloader:
        ds = datasets.ImageFolder(a.dataset, transform=compose)
        sampler = RASampler(len(ds), REPEATS)
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                                             persistent_workers=True, collate_fn=collate, drop_last=True)

        def tepoch(e):
            sampler.set_epoch(e)
            return sum(len(t) for _, t in loader)

        rows["DataLoader"] = timed(tepoch, lambda: [os.getpid()] + children(os.getpid()), a.epochs)

    print(f"{'loader':22} {'images/s':>10} {'CPU ms/image':>13}")
    for name, (rate, cpu) in rows.items():
        print(f"{name:22} {rate:10.1f} {cpu:13.2f}")
    sr, sc = rows["stoker"]
    if "DataLoader" in rows:
        tr, tc = rows["DataLoader"]
        print(f"stoker / DataLoader images/s {sr / tr:.2f}x, DataLoader / stoker CPU per image {tc / sc:.2f}x")
    base = rows["stoker, no batch op"][1]
    print(f"stoker: the batch op's share of the pipeline's CPU per image, measured in the daemon (the workers' "
          f"CPU time in it, stats' worker_batch_op_seconds, best round): {in_daemon:.3f} ms per image, "
          f"{100 * in_daemon / sc:.1f}% (goal <= 3%)")
    print(f"stoker: the batch ops' share of the pipeline's CPU per image, with - without: "
          f"{100 * (sc - base) / sc:+.1f}% ({sc - base:.3f} ms per image); the batch op alone "
          f"({MIX_TEXT}, batch {a.batch_size}, float32 {SIZE}x{SIZE}): {alone:.3f} ms per image, "
          f"{100 * alone / sc:.1f}% (goal <= 3%)")


if __name__ == "__main__":
    main()
