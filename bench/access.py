#!/usr/bin/env python3
"""The cost of the per-client access check (issue 18, docs/deploy.md
"Multi-user nodes"), measured in one run on this machine.

One stokerd, one data set of real photos, two clients that differ only in
who they are: root (no check: the daemon's own view) and an ordinary user
made for the run (the check: every file opened once at attach with its
identity, then one bit test per sample). Each client is its own process
(the system Python, which every user may run) and reports its attach time
and one epoch's images/s:

- cold: a fresh daemon (empty node cache; the files in the page cache),
  one epoch, alternating root and the user, each on its own daemon;
- warm: one daemon, the node cache holding the whole data set, clients
  alternating root and user.

With --before PATH (another stokerd, e.g. main's before the check) the
same rows run on it too. Needs root (it makes a user). Prints a table and
writes bench/out/access.json. Not a test: nothing here asserts.
"""

import argparse
import json
import os
import pwd
import shutil
import socket as pysocket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BUILD = Path(os.environ.get("STOKER_BUILD") or REPO / "build").resolve()
sys.path.insert(0, str(REPO / "tests" / "support"))
from stoker_testutil import client_for_users  # noqa: E402

USER = "stkbench"
CLIENT_ENV = {}  # the binding's copy every user can load (client_for_users)
PYTHON = "/usr/bin/python3"

CLIENT = r"""
import json, sys, time
import stoker
a = json.loads(sys.argv[1])
t0 = time.perf_counter()
ld = stoker.Loader(a["dataset"], socket=a["socket"], batch_size=a["batch"], image_size=a["size"], timeout=120)
t1 = time.perf_counter()
n = sum(len(b) for b in ld)
t2 = time.perf_counter()
print(json.dumps({"attach_s": t1 - t0, "epoch_s": t2 - t1, "images": n}))
"""


def cpu_seconds(pid):
    """user + system CPU time of a process so far (its threads included)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(user, sock, dataset, batch, size, daemon_pid=None):
    env = dict(CLIENT_ENV)
    cmd = [PYTHON, "-c", CLIENT, json.dumps({"socket": sock, "dataset": dataset, "batch": batch, "size": size})]
    if user != "root":
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"] + cmd
    cpu0 = cpu_seconds(daemon_pid)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["daemon_cpu_s"] = cpu_seconds(daemon_pid) - cpu0
    return out


class Daemon:
    def __init__(self, binary, base, workers):
        self.sock = os.path.join(base, "s.sock")
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.proc = subprocess.Popen([binary, "--socket", self.sock, "--workers", str(workers), "--set",
                                      "socket_mode=0666", "--set", "cache_bytes=2G"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=dict(os.environ, STOKER_CONFIG_ROOT="/nonexistent"))
        for _ in range(400):
            try:
                s = pysocket.socket(pysocket.AF_UNIX)
                s.connect(self.sock)
                s.close()
                return
            except OSError:
                time.sleep(0.025)
        raise RuntimeError("stokerd did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def measure(binary, base, dataset, a):
    rows = {"cold": {"root": [], USER: []}, "warm": {"root": [], USER: []}}
    for _ in range(a.repeat):
        for who in ("root", USER):
            d = Daemon(binary, base, a.workers)
            try:
                rows["cold"][who].append(client(who, d.sock, dataset, a.batch, a.size, d.proc.pid))
            finally:
                d.stop()
    d = Daemon(binary, base, a.workers)
    try:
        client("root", d.sock, dataset, a.batch, a.size, d.proc.pid)  # fills the node cache
        for _ in range(a.repeat):
            for who in ("root", USER):
                rows["warm"][who].append(client(who, d.sock, dataset, a.batch, a.size, d.proc.pid))
    finally:
        d.stop()
    out = {}
    for kind, by in rows.items():
        for who, runs in by.items():
            out[f"{kind}/{who}"] = {
                "attach_ms": statistics.median(r["attach_s"] for r in runs) * 1e3,
                "images_per_s": statistics.median(r["images"] / r["epoch_s"] for r in runs),
                # CPU the daemon spent per image, attach included: a figure a busy machine does not distort
                "daemon_cpu_us_per_image": statistics.median(r["daemon_cpu_s"] / r["images"] for r in runs) * 1e6,
            }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--size", type=int, default=64, help="image_size")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--before", help="another stokerd to measure the same way (before the check)")
    p.add_argument("--after", default=str(BUILD / "stokerd"), help="the stokerd with the check (default: the build's)")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/access.py makes a user: run it as root")
    base = tempfile.mkdtemp(prefix="stoker-bench-access-", dir="/tmp")
    os.chmod(base, 0o755)
    subprocess.run(["userdel", USER], capture_output=True)
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", USER],
                   check=True)
    try:
        CLIENT_ENV.update(client_for_users(os.path.join(base, "client")))
        dataset = os.path.join(base, "ds")
        subprocess.run([sys.executable, str(REPO / "scripts" / "mkdataset.py"), dataset, "--classes", "8",
                        "--per-class", str(a.images // 8), "--min-side", "200", "--max-side", "400"],
                       check=True, capture_output=True)
        subprocess.run(["chmod", "-R", "a+rX", dataset], check=True)
        results = {"after": measure(a.after, base, dataset, a)}
        if a.before:
            results["before"] = measure(a.before, base, dataset, a)
    finally:
        subprocess.run(["userdel", USER], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    print(f"{a.images} images, image_size {a.size}, batch {a.batch}, {a.workers} workers, median of {a.repeat}")
    print(f"{'stokerd':8} {'epoch':6} {'client':9} {'attach ms':>10} {'images/s':>10} {'vs root':>8} "
          f"{'daemon CPU us/image':>20} {'vs root':>8}")
    for which, res in results.items():
        for kind in ("cold", "warm"):
            base_ips = res[f"{kind}/root"]["images_per_s"]
            base_cpu = res[f"{kind}/root"]["daemon_cpu_us_per_image"]
            for who in ("root", USER):
                r = res[f"{kind}/{who}"]
                print(f"{which:8} {kind:6} {who:9} {r['attach_ms']:10.1f} {r['images_per_s']:10.0f} "
                      f"{r['images_per_s'] / base_ips:8.3f} {r['daemon_cpu_us_per_image']:20.1f} "
                      f"{r['daemon_cpu_us_per_image'] / base_cpu:8.3f}")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "access.json").write_text(json.dumps({"args": vars(a), "results": results}, indent=1))


if __name__ == "__main__":
    main()
