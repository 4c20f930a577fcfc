"""Shared by the bench peers: the epoch-timing loop and the result line.

Each peer runs in its own interpreter (bench/run.py starts it) and ends by
printing one line `RESULT {json}` on stdout; anything else it prints is
commentary.
"""

import json
import sys
import time


def peer_arguments():
    """The arguments every peer takes (data set, batch, image size, how long);
    the caller adds its own and parses."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--dataset", required=True)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--min-seconds", type=float, default=10.0)
    return p


def result(**fields):
    """Print the peer's result line and exit 0."""
    print("RESULT " + json.dumps(fields), flush=True)
    sys.exit(0)


def unavailable(status, reason):
    """The peer cannot run here (`status`: "not installed" / "not available")."""
    result(status=status, reason=reason)


def measure(run_epoch, min_epochs, min_seconds, log=None):
    """Run one warm-up epoch (not timed), then whole epochs until at least
    `min_epochs` epochs and `min_seconds` seconds have passed.

    run_epoch(epoch) -> images delivered in that epoch.
    Returns a dict with images/s over the timed epochs and per-epoch rates.
    """
    t = time.perf_counter()
    warm = run_epoch(0)
    warm_s = time.perf_counter() - t
    if log:
        log(f"warm-up epoch: {warm} images in {warm_s:.2f}s")
    images, per_epoch, epoch = 0, [], 1
    t0 = time.perf_counter()
    while True:
        e0 = time.perf_counter()
        n = run_epoch(epoch)
        dt = time.perf_counter() - e0
        images += n
        per_epoch.append(round(n / dt, 2))
        if log:
            log(f"epoch {epoch}: {n} images in {dt:.2f}s = {n / dt:.1f} images/s")
        epoch += 1
        elapsed = time.perf_counter() - t0
        if epoch - 1 >= min_epochs and elapsed >= min_seconds:
            break
    return {
        "status": "ok",
        "images_per_second": images / elapsed,
        "images": images,
        "epochs": epoch - 1,
        "seconds": round(elapsed, 3),
        "per_epoch": per_epoch,
        "warmup_seconds": round(warm_s, 3),
    }


def epoch_reader(loader, expected, seen):
    """run_epoch for measure() over a loader of (images, labels) batches:
    every batch taken and touched (the last image's first 64 elements and a
    label), the first batch's dtype and shape noted in `seen`, and the count
    checked against `expected`."""
    def run_epoch(epoch):
        n, check = 0, 0.0
        for images, labels in loader:
            if not seen:
                seen["dtype"], seen["shape"] = str(images.dtype), list(images.shape[1:])
            n += len(labels)
            check += float(images[-1].reshape(-1)[:64].sum()) + int(labels[-1])
        if n != expected:
            raise RuntimeError(f"epoch {epoch}: {n} samples, expected {expected}")
        return n
    return run_epoch


def log_to_stderr(prefix):
    def log(msg):
        print(f"{prefix}: {msg}", file=sys.stderr, flush=True)
    return log
