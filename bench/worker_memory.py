#!/usr/bin/env python3
"""Memory per stokerd worker running a user's per-sample pipeline: the
daemon's peak RSS (VmHWM) after one epoch of each pipeline with 1, 2 and 4
workers (no node cache, one client, the same ring), and the increment per
worker (the least-squares slope over the worker counts). The pipelines are
bench/transforms.py's: RandomResizedCrop 176 + flip, and torchvision's
ResNet-50 v2 per-sample recipe (TrivialAugmentWide bilinear, as its
reference passes it, RandomErasing 0.1), float32 output.

    python3 bench/worker_memory.py DATASET [--workers 1 2 4] [--batch-size 128]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_per_image import scratch_daemon  # noqa: E402
from transforms import pipelines  # noqa: E402


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--batch-size", type=int, default=128)
    a = ap.parse_args()
    import stoker.torch

    pipes = pipelines()
    rows = {}
    for name, compose in pipes.items():
        for workers in a.workers:
            with scratch_daemon(workers) as (sock, pid):
                base = status_kib(pid, "VmRSS")
                with stoker.torch.Loader(a.dataset, socket=sock, batch_size=a.batch_size, transform=compose,
                                         dct_scaling=False) as ld:
                    n = sum(len(labels) for _, labels in ld)
                    hwm = status_kib(pid, "VmHWM")
                rows[(name, workers)] = (base, hwm, n)
                print(f"{name}: {workers} workers: idle RSS {base / 1024:.1f} MiB, peak {hwm / 1024:.1f} MiB "
                      f"after {n} images", flush=True)
        xs = a.workers
        ys = [rows[(name, w)][1] / 1024 for w in xs]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / max(sum((x - mx) ** 2 for x in xs), 1e-9)
        print(f"{name}: {slope:.2f} MiB per worker (peak RSS slope over {xs} workers)")


if __name__ == "__main__":
    main()
