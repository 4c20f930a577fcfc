#!/usr/bin/env python3
"""CPU time per image: stoker against PyTorch's DataLoader on one data set.

    STOKER_BUILD=build PYTHONPATH=client/python python3 bench/cpu_per_image.py DATASET [--workers 2]

Throughput on a shared machine depends on the share of the CPUs each side
gets; the CPU each spends per image does not (much). stoker: the daemon's
and the client's CPU; PyTorch: the main and worker processes' (torchvision
ImageFolder, RandomResizedCrop(224) + flip, uint8, batch 256). Each side
runs one warm-up epoch, then --epochs timed ones; prints one line each and
the ratio. docs/performance.md quotes it for PNG data.
"""

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("STOKER_BUILD") or os.path.join(HERE, "..", "build"))


def cpu_seconds(pids):
    """user + system seconds of the live processes among `pids`."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def scratch_daemon(workers):
    """A stokerd of this build with no cache on a socket in a scratch
    directory, for one bench: yields (socket path, its pid); stopped after."""
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "s.sock")
        d = subprocess.Popen([os.path.join(BUILD, "stokerd"), "--socket", sock, "--workers", str(workers),
                              "--set", "cache_bytes=0"], stderr=subprocess.DEVNULL)
        try:
            for _ in range(400):
                if os.path.exists(sock):
                    break
                time.sleep(0.025)
            yield sock, d.pid
        finally:
            d.terminate()
            d.wait()


def timed(name, epochs, run_epoch, pids):
    """Per timed epoch: images, CPU ms per image, images/s."""
    run_epoch(0)
    out = []
    for e in range(1, epochs + 1):
        p = pids()
        c0, t0 = cpu_seconds(p), time.monotonic()
        n = run_epoch(e)
        dt, cpu = time.monotonic() - t0, cpu_seconds(p) - c0
        out.append(1000 * cpu / n)
        print(f"{name}: epoch {e}: {n} images, {1000 * cpu / n:.1f} CPU ms/image, {n / dt:.1f} images/s")
    return min(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    import stoker

    with scratch_daemon(a.workers) as (sock, daemon_pid):
        with stoker.Loader(a.dataset, socket=sock, batch_size=256, image_size=224,
                           transform="random_resized_crop") as ld:
            def epoch(e):
                ld.set_epoch(e)
                return sum(len(labels) for _, labels in ld)

            s = timed("stoker", a.epochs, epoch, lambda: [daemon_pid, os.getpid()])

    import torch
    from torchvision import datasets, transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    loader = torch.utils.data.DataLoader(datasets.ImageFolder(a.dataset, transform=tf), batch_size=256,
                                         shuffle=True, num_workers=a.workers, persistent_workers=True)
    t = timed("torch", a.epochs, lambda e: sum(len(labels) for _, labels in loader),
              lambda: [os.getpid()] + children(os.getpid()))
    print(f"CPU per image, DataLoader / stoker: {t / s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
