#!/usr/bin/env python3
"""Time from Loader(...) to the first batch in user mode (README "Without
root"): cold, where the Loader starts the user's stokerd itself, and warm,
where it attaches to the one already running; beside them, PyTorch's
DataLoader from its creation to its first batch (its workers start too),
measured in the same run on the same files, when torch is installed.

    PYTHONPATH=client/python STOKER_BUILD=build python3 bench/usermode_start.py
    /path/to/venv/bin/python bench/usermode_start.py      # the wheel's stokerd

Each cold run gets a fresh runtime directory (XDG_RUNTIME_DIR) and its
daemon is stopped afterwards; each measurement is a fresh process. Needs no
system daemon at /run/stoker/stoker.sock (user mode would not engage).
Prints a table and one RESULT {json} line. Not a test: nothing is asserted.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STOKER_CHILD = r"""
import sys, time
import stoker
t0 = time.monotonic()
ld = stoker.Loader(sys.argv[1], batch_size=int(sys.argv[2]), image_size=int(sys.argv[3]))
next(iter(ld))
print(time.monotonic() - t0)
ld.close()
"""

TORCH_CHILD = r"""
import os, sys, time
import torch, torchvision.transforms as T
from torchvision.datasets import ImageFolder
t0 = time.monotonic()
ds = ImageFolder(sys.argv[1], T.Compose([T.RandomResizedCrop(int(sys.argv[3])), T.RandomHorizontalFlip(),
                                          T.PILToTensor()]))
dl = torch.utils.data.DataLoader(ds, batch_size=int(sys.argv[2]), shuffle=True, num_workers=os.cpu_count())
next(iter(dl))
print(time.monotonic() - t0)
"""


def daemons_in(d):
    """pids of stokerd processes whose command line names directory d."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv[0].endswith("stokerd") and any(a.startswith(d) for a in argv):
            out.append(int(pid))
    return out


def stop_daemons(d):
    for pid in daemons_in(d):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while daemons_in(d) and time.monotonic() < deadline:
        time.sleep(0.05)


def child(code, args, env):
    r = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], capture_output=True, text=True,
                       env=env, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"child failed:\n{r.stdout}\n{r.stderr}")
    return float(r.stdout.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", help="an ImageFolder data set (default: 4 x 16 real photos, made here)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=224)
    a = ap.parse_args()
    if os.path.exists("/run/stoker/stoker.sock"):
        raise SystemExit("a system daemon is at /run/stoker/stoker.sock: user mode would not engage")
    scratch = tempfile.mkdtemp(prefix="stoker-bench-usermode-")
    ds = a.dataset
    if not ds:
        ds = os.path.join(scratch, "ds")
        subprocess.run([sys.executable, os.path.join(REPO, "scripts", "mkdataset.py"), ds, "--classes", "4",
                        "--per-class", "16"], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("STOKER_SOCKET", "STOKER_AUTOSTART")}
    args = [ds, a.batch_size, a.image_size]
    cold, warm = [], []
    for i in range(a.repeat):
        run = tempfile.mkdtemp(prefix=f"run{i}-", dir=scratch)
        e = dict(env, XDG_RUNTIME_DIR=run)
        try:
            cold.append(child(STOKER_CHILD, args, e))
            warm.extend(child(STOKER_CHILD, args, e) for _ in range(2))
        finally:
            stop_daemons(run)
    torch_s = []
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        torch_s = [child(TORCH_CHILD, args, env) for _ in range(a.repeat)]
    except ImportError:
        pass
    subprocess.run(["rm", "-rf", scratch])
    rows = [("stoker, cold (starts the user's stokerd)", cold), ("stoker, warm (attaches to it)", warm)]
    if torch_s:
        rows.append((f"PyTorch DataLoader, {os.cpu_count()} workers", torch_s))
    print(f"Loader(...) to the first batch: batch {a.batch_size}, {a.image_size} px, {ds}")
    print(f"{'':44} {'median s':>9} {'min s':>7} {'max s':>7}  runs")
    for name, v in rows:
        print(f"{name:44} {statistics.median(v):9.3f} {min(v):7.3f} {max(v):7.3f}  {len(v)}")
    res = {"cold_s": cold, "warm_s": warm, "torch_s": torch_s, "batch_size": a.batch_size, "image_size": a.image_size,
           "cold_over_warm": statistics.median(cold) / statistics.median(warm)}
    if torch_s:
        res["cold_over_torch"] = statistics.median(cold) / statistics.median(torch_s)
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
