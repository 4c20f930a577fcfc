"""User mode as a user meets it (make check-usermode): the wheel `make wheel`
built, installed into a fresh venv (Debian's python3, no system site
packages, no PYTHONPATH), run by unprivileged users this suite creates with
useradd and removes again; commands run as them with runuser and an empty
environment. Runs as root. The build and the shared fixtures come from
tests/conftest.py; what is here is user mode's own."""

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from stoker_testutil import BUILD, REPO  # noqa: F401 (tests/conftest.py puts tests/support on the path)

WHEEL_DIR = Path(os.environ.get("STOKER_WHEEL_DIR") or BUILD / "wheel")
USERS = ("stoker-ut1", "stoker-ut2")
SAMPLES = 64  # the data set: 4 classes x 16 real photos

# What each user's process runs: one pass over the data set with the
# environment's RANK/WORLD_SIZE, after START_AT appears (so that several
# start at the same moment); one JSON line on stdout.
CLIENT = r"""
import json, os, sys, time
import stoker
start = os.environ.get("START_AT")
while start and not os.path.exists(start):
    time.sleep(0.001)
t0 = time.monotonic()
try:
    ld = stoker.Loader(sys.argv[1], batch_size=4, image_size=32)
except stoker.StokerError as e:
    print(json.dumps({"error": str(e), "errno": e.errno}))
    sys.exit(3)
seen, first = [], None
for b in ld:
    if first is None:
        first = time.monotonic() - t0
    seen += [int(i) for i in b.indices]
stats = stoker.stats()
ld.close()
print(json.dumps({"indices": seen, "first_batch_s": first, "stoker": stoker.__file__,
                  "workers": stats["workers"], "memory_budget": stats["memory_budget_bytes"],
                  "images_served": stats["images_served"]}))
"""


def fail_unless_root():
    if os.geteuid() != 0:
        pytest.fail("tests/usermode creates users and runs commands as them: run it as root")


class User:
    def __init__(self, name):
        pw = pwd.getpwnam(name)
        self.name, self.uid, self.home = name, pw.pw_uid, Path(pw.pw_dir)

    @property
    def tmp_dir(self):
        """Where user mode puts the daemon when XDG_RUNTIME_DIR is unset."""
        return Path(f"/tmp/stoker-{self.uid}")

    def env(self, **extra):
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def argv(self, args, **extra):
        return ["runuser", "-u", self.name, "--", "env", "-i"] + \
               [f"{k}={v}" for k, v in self.env(**extra).items()] + [str(a) for a in args]

    def run(self, args, timeout=300, **extra):
        return subprocess.run(self.argv(args, **extra), capture_output=True, text=True, timeout=timeout)

    def popen(self, args, **extra):
        return subprocess.Popen(self.argv(args, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def set_config(self, text):
        """The user's own stoker.conf, which a daemon it starts reads."""
        conf = self.home / ".config" / "stoker" / "stoker.conf"
        if text is None:
            conf.unlink(missing_ok=True)
            return
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("[stokerd]\n" + text)
        for p in (conf.parent.parent, conf.parent, conf):
            os.chown(p, self.uid, self.uid)

    def daemons(self):
        """This user's running stokerd processes (zombies are not running)."""
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{pid}")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0")[0].decode(errors="replace")
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if st.st_uid == self.uid and argv0.endswith("/stoker/bin/stokerd") and state != "Z":
                found.append(int(pid))
        return sorted(found)

    def stop_daemons(self):
        """SIGKILL this user's daemons (by pid) and forget their directories."""
        for pid in self.daemons():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not self.daemons(), 60, "the user's daemons to die")
        shutil.rmtree(self.tmp_dir, ignore_errors=True)


def wait_for(cond, bound_s, what):
    """Poll cond until true; the bound is generous (never a speed check)."""
    deadline = time.monotonic() + bound_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {bound_s} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def users():
    fail_unless_root()
    made = []
    for name in USERS:
        subprocess.run(["userdel", "-r", name], capture_output=True)
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--user-group", name], check=True)
        made.append(User(name))
    yield made
    for u in made:
        u.stop_daemons()
        subprocess.run(["userdel", "-r", u.name], capture_output=True)


@pytest.fixture(scope="session")
def shared():
    """A directory every user may read: the venv, the data set, the script."""
    fail_unless_root()
    d = Path(tempfile.mkdtemp(prefix="stoker-usermode-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def venv(shared):
    """A fresh venv of Debian's python3 with only the wheel (and numpy) in it."""
    wheels = sorted(WHEEL_DIR.glob("stoker-*-manylinux_*.whl"))
    if len(wheels) != 1:
        pytest.fail(f"want one manylinux wheel in {WHEEL_DIR}, found {[w.name for w in wheels]}: run make wheel")
    v = shared / "venv"
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "STOKER_BUILD", "STOKER_LIB", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONHOME")}
    subprocess.run(["/usr/bin/python3", "-m", "venv", v], check=True, env=clean)
    r = subprocess.run([v / "bin/pip", "install", "-q", wheels[0]], capture_output=True, text=True, env=clean)
    assert r.returncode == 0, r.stderr
    subprocess.run(["chmod", "-R", "a+rX", shared], check=True)
    return v


@pytest.fixture(scope="session")
def dataset(shared):
    """The shared fixture's data set, but where the test users may read it
    (pytest's own temporary directories are root's, 0700)."""
    out = shared / "ds"
    r = subprocess.run(["/usr/bin/python3", REPO / "scripts/mkdataset.py", out, "--classes", "4", "--per-class", "16"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    subprocess.run(["chmod", "-R", "a+rX", out], check=True)
    return out


@pytest.fixture(scope="session")
def client(shared, venv, dataset):
    script = shared / "client.py"
    script.write_text(CLIENT)
    script.chmod(0o644)

    def argv():
        return [venv / "bin/python", script, dataset]
    return argv


@pytest.fixture
def alice(users):
    """The first test user, with no daemon and no settings of its own."""
    u = users[0]
    u.stop_daemons()
    u.set_config(None)
    yield u
    u.stop_daemons()
    u.set_config(None)


@pytest.fixture
def bob(users):
    u = users[1]
    u.stop_daemons()
    yield u
    u.stop_daemons()


def result(proc_or_run):
    """The client's JSON line (and a readable failure when there is none)."""
    if isinstance(proc_or_run, subprocess.Popen):
        out, err = proc_or_run.communicate(timeout=300)
        rc = proc_or_run.returncode
    else:
        out, err, rc = proc_or_run.stdout, proc_or_run.stderr, proc_or_run.returncode
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert lines, f"client exited {rc} without a result:\n{out}\n{err}"
    return json.loads(lines[-1])
