#!/usr/bin/env python3
"""One node, many trainers (issue 4), measured in one run on this machine:

1. k = 1, 2, 4 concurrent independent jobs (different seeds) on one data
   set, the cache warm: aggregate images/s of k stoker clients against k
   concurrent PyTorch DataLoaders (num_workers = cores // k each), on the
   same cores and files.
2. The cache policy on a data set twice the cache: MinIO against LRU, hit
   rate and images/s over the epochs after the first.

Each job is its own process; jobs warm up, wait at a shared start line, run
whole epochs, and report their images and wall-clock span. Prints a table
and writes bench/out/sharing.json. Not a test: nothing here asserts.
"""

import argparse
import json
import os
import signal
import socket as pysocket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BUILD = Path(os.environ.get("STOKER_BUILD") or REPO / "build")
sys.path.insert(0, str(REPO / "client" / "python"))


# ---- one job, run in a child process -------------------------------------

def job_stoker(a):
    import stoker
    loader = stoker.Loader(a["dataset"], socket=a["socket"], batch_size=a["batch"], image_size=224, seed=a["seed"])
    run = lambda e: (loader.set_epoch(e), sum(len(b) for b in loader))[1]
    return run


def job_torch(a):
    import torch
    from torchvision import datasets, transforms
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = datasets.ImageFolder(a["dataset"], transform=tf)
    g = torch.Generator().manual_seed(a["seed"])
    dl = torch.utils.data.DataLoader(ds, batch_size=a["batch"], shuffle=True, generator=g,
                                     num_workers=a["workers"], persistent_workers=True)
    return lambda e: sum(len(y) for _, y in dl)


def child(a):
    run = (job_stoker if a["kind"] == "stoker" else job_torch)(a)
    run(0)  # warm-up: workers started, cache filled
    Path(a["ready"]).touch()
    while not Path(a["go"]).exists():
        time.sleep(0.01)
    t0 = time.time()
    images = sum(run(e) for e in range(1, a["epochs"] + 1))
    print("RESULT " + json.dumps({"images": images, "start": t0, "end": time.time()}), flush=True)


# ---- orchestration ---------------------------------------------------------

def start_daemon(sock, workers, *settings):
    args = [str(BUILD / "stokerd"), "--socket", sock, "--workers", str(workers)]
    for s in settings:
        args += ["--set", s]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        try:
            s = pysocket.socket(pysocket.AF_UNIX)
            s.connect(sock)
            s.close()
            return p
        except OSError:
            time.sleep(0.025)
    p.kill()
    raise SystemExit("stokerd did not start")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)


def concurrent(kind, k, args, tmp, sock=None):
    """Aggregate images/s of k concurrent jobs of `kind`."""
    go = Path(tmp) / f"go-{kind}-{k}"
    procs, readies = [], []
    for i in range(k):
        ready = Path(tmp) / f"ready-{kind}-{k}-{i}"
        readies.append(ready)
        spec = {"kind": kind, "dataset": args.dataset, "socket": sock, "seed": 1000 + i, "batch": args.batch,
                "epochs": args.epochs, "workers": max(1, args.cores // k), "ready": str(ready), "go": str(go)}
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", json.dumps(spec)],
                                      stdout=subprocess.PIPE, text=True))
    while not all(r.exists() for r in readies):
        if any(p.poll() not in (None, 0) for p in procs):
            raise SystemExit(f"a {kind} job failed")
        time.sleep(0.05)
    go.touch()
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        results += [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return sum(r["images"] for r in results) / span


def cache_policy_run(policy, args, tmp, budget):
    import stoker
    sock = str(Path(tmp) / f"policy-{policy}.sock")
    d = start_daemon(sock, args.cores, f"cache_bytes={budget}", f"cache_policy={policy}")
    try:
        loader = stoker.Loader(args.dataset, socket=sock, batch_size=args.batch, image_size=224, seed=7)
        before = None
        images, t0 = 0, None
        for e in range(args.epochs + 1):
            if e == 1:  # the first epoch fills the cache; measure the rest
                before = stoker.stats(socket=sock)["cache"]["encoded"]
                t0 = time.perf_counter()
            loader.set_epoch(e)
            n = sum(len(b) for b in loader)
            images += n if e else 0
        dt = time.perf_counter() - t0
        after = stoker.stats(socket=sock)["cache"]["encoded"]
        loader.close()
    finally:
        stop(d)
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    return {"policy": policy, "hit_rate": hits / max(1, hits + misses), "images_per_second": images / dt,
            "evictions": after["evictions"], "entries": after["entries"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child")
    p.add_argument("--dataset", default=str(HERE / "out" / "data"))
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--ks", default="1,2,4")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--out", default=str(HERE / "out" / "sharing.json"))
    args = p.parse_args()
    if args.child:
        return child(json.loads(args.child))
    if not Path(args.dataset).is_dir():
        subprocess.run([sys.executable, str(REPO / "scripts" / "mkdataset.py"), args.dataset, "--classes", "8",
                        "--per-class", "128", "--min-side", "300", "--max-side", "800"], check=True)
    files = [f for f in Path(args.dataset).rglob("*.jpg")]
    data_bytes = sum(f.stat().st_size for f in files)
    try:
        import torch  # noqa: F401
        have_torch = not args.no_torch
    except ImportError:
        have_torch = False
    out = {"cores": args.cores, "images": len(files), "data_bytes": data_bytes, "batch": args.batch,
           "epochs": args.epochs, "concurrent": [], "cache_policy": []}
    with tempfile.TemporaryDirectory() as tmp:
        sock = str(Path(tmp) / "jobs.sock")
        d = start_daemon(sock, args.cores)  # cache: default budget, holds the whole set
        try:
            for k in [int(x) for x in args.ks.split(",")]:
                row = {"k": k, "stoker": concurrent("stoker", k, args, tmp, sock)}
                row["torch"] = concurrent("torch", k, args, tmp) if have_torch else None
                out["concurrent"].append(row)
                print(f"k={k}: stoker {row['stoker']:.0f} images/s, torch "
                      f"{row['torch'] or float('nan'):.0f} images/s", flush=True)
        finally:
            stop(d)
        for policy in ("minio", "lru"):
            r = cache_policy_run(policy, args, tmp, data_bytes // 2)
            out["cache_policy"].append(r)
            print(f"cache {policy}: {100 * r['hit_rate']:.1f}% hits, {r['images_per_second']:.0f} images/s", flush=True)

    single = out["concurrent"][0]["stoker"]
    print(f"\n{'k':>3} {'stoker img/s':>13} {'x single':>9} {'torch img/s':>12} {'stoker/torch':>13}")
    for row in out["concurrent"]:
        t = row["torch"]
        print(f"{row['k']:>3} {row['stoker']:>13.0f} {row['stoker'] / single:>9.2f} "
              f"{(t or float('nan')):>12.0f} {(row['stoker'] / t if t else float('nan')):>13.2f}")
    print(f"\ncache at half the data set ({data_bytes / 2**20:.0f} MiB of files):")
    for r in out["cache_policy"]:
        print(f"  {r['policy']:>5}: {100 * r['hit_rate']:5.1f}% hits, {r['images_per_second']:.0f} images/s, "
              f"{r['evictions']} evictions")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
