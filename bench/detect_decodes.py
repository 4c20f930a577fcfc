#!/usr/bin/env python3
"""Image decodes per mosaic sample: stoker against Ultralytics' train loader
(issue 22). A count, not a speed: the same on a busy machine as on a quiet one.

Ultralytics: the train-mode YOLODataset that build_yolo_dataset makes
(imgsz 640, mosaic 1.0, cache=False, every other key at its default), read
sample by sample in a shuffled order in this process, as one DataLoader
worker reads its share; `imread` (what load_image decodes with) is counted.
Its Mosaic draws the three partners from `dataset.buffer`, the images that
worker loaded last and still holds, so a partner costs no decode.

stoker: build/stokerd with --workers 1, 2 and 8 (on any number of cores:
the count is about who makes a batch's images, not about speed),
transform="mosaic", image_size 640, batch 16, one epoch; a mosaic's
partners are other images of its batch, made once each in the batch's fit
table. The file reads are the encoded cache's lookups (hits + misses),
counted once the daemon is idle (every job it made is whole), against the
samples it made (samples_decoded).

    python3 bench/detect_decodes.py DATA_YAML [--samples 512] [--workers 1 2 8]
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("STOKER_BUILD", os.path.join(REPO, "build"))


def ultralytics_count(yaml, samples):
    from ultralytics.cfg import get_cfg
    from ultralytics.data import base, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    cfg = get_cfg(overrides={"imgsz": 640, "mosaic": 1.0, "batch": 16, "workers": 0, "cache": False,
                             "rect": False, "seed": 0})
    data = check_det_dataset(yaml)
    ds = build_yolo_dataset(cfg, data["train"], 16, data, mode="train", rect=False, stride=32)
    calls = [0]
    imread = base.imread

    def counted(*a, **kw):
        calls[0] += 1
        return imread(*a, **kw)

    base.imread = counted
    rng = random.Random(0)
    order = []
    while len(order) < samples:
        order += rng.sample(range(len(ds)), len(ds))
    for i in order[:samples]:
        ds[i]
    base.imread = imread
    return {"samples": samples, "decodes": calls[0], "decodes_per_sample": calls[0] / samples,
            "buffer_images": ds.max_buffer_length, "images": len(ds)}


def stoker_count(yaml, workers, tmp):
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    import stoker

    sock = os.path.join(tmp, f"w{workers}.sock")
    d = subprocess.Popen([os.path.join(BUILD, "stokerd"), "--socket", sock, "--workers", str(workers),
                          "--prefetch", "4", "--log-level", "warning"], stderr=subprocess.DEVNULL)

    def stats():
        out = subprocess.run([os.path.join(BUILD, "stokerctl"), "--socket", sock, "stats", "--json"],
                             capture_output=True, text=True, timeout=30).stdout
        st = json.loads(out)
        enc = st["cache"]["encoded"]
        return st["samples_decoded"], enc["hits"] + enc["misses"]

    try:
        for _ in range(400):
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(sock)
                break
            except OSError:
                time.sleep(0.025)
        served = 0
        with stoker.Loader(yaml, socket=sock, batch_size=16, task="detect", transform="mosaic", image_size=640,
                           seed=0, close_mosaic=0) as ld:
            # one epoch: a set_epoch() would cancel jobs already started, whose reads outlive their samples
            served += sum(b.images.shape[0] for b in ld)
            last, still = None, 0
            for _ in range(1200):
                now = stats()
                still = still + 1 if now == last and now[0] % 16 == 0 else 0
                if still >= 10:
                    break
                last = now
                time.sleep(0.05)
        made, reads = last
        with open(f"/proc/{d.pid}/stat") as f:
            ticks = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        cpu_ms = ticks * 1000 / os.sysconf("SC_CLK_TCK") / made
    finally:
        d.terminate()
        d.wait()
    return {"workers": workers, "served": served, "samples": made, "reads": reads, "reads_per_sample": reads / made,
            "daemon_cpu_ms_per_sample": cpu_ms}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("yaml")
    p.add_argument("--samples", type=int, default=512, help="Ultralytics samples to read (default 512)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 8])
    p.add_argument("--stoker-only", action="store_true", help="stoker's rows only (no Ultralytics)")
    a = p.parse_args()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for w in a.workers:
            r = stoker_count(a.yaml, w, tmp)
            out[f"stoker_workers_{w}"] = r
            print(f"stoker --workers {w}: {r['reads']} image reads for {r['samples']} mosaic samples made "
                  f"({r['served']} served): {r['reads_per_sample']:.3f} a sample; stokerd CPU "
                  f"{r['daemon_cpu_ms_per_sample']:.2f} ms a sample", flush=True)
    try:
        r = None if a.stoker_only else ultralytics_count(a.yaml, a.samples)
        out["ultralytics"] = r
        if r:
            print(f"Ultralytics train dataset (one worker's view, buffer of {r['buffer_images']} images): "
                  f"{r['decodes']} imread for {r['samples']} mosaic samples: {r['decodes_per_sample']:.3f} a sample")
    except ImportError as e:
        print(f"Ultralytics: not installed ({e})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
