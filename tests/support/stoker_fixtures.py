"""The fixtures every pytest suite under tests/ shares (tests/conftest.py
puts them there): the build, real-photo and YOLO data sets, real stokerd
processes, and the report hook that attaches a failing test's daemon
stderr. Importing it points the tests at the build (STOKER_BUILD), keeps the
daemons off this machine's /etc and puts client/python on sys.path."""

import json
import os
import signal
import socket as pysocket
import subprocess
import sys
import time

import pytest

from stoker_testutil import BUILD, PYDIR, REPO, STOKERCTL, STOKERD

os.environ["STOKER_BUILD"] = str(BUILD)
# The daemons under test read no configuration of this machine's /etc.
os.environ.setdefault("STOKER_CONFIG_ROOT", "/nonexistent-stoker-test-root")
sys.path.insert(0, str(PYDIR))

MKDATASET = REPO / "scripts" / "mkdataset.py"


@pytest.fixture(scope="session")
def build_dir():
    missing = [p.name for p in (STOKERD, STOKERCTL, BUILD / "libstoker.so.0") if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing in {BUILD}: run make (or set STOKER_BUILD)")
    return BUILD


@pytest.fixture(scope="session")
def make_dataset(tmp_path_factory):
    """make_dataset(**mkdataset options) -> (path, [corrupt paths]); cached per options."""
    cache = {}

    def make(**kw):
        key = tuple(sorted(kw.items()))
        if key not in cache:
            out = tmp_path_factory.mktemp("ds")
            args = [sys.executable, str(MKDATASET), str(out)]
            for k, v in sorted(kw.items()):
                args += [f"--{k.replace('_', '-')}", str(v)]
            r = subprocess.run(args, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"mkdataset failed:\n{r.stderr}"
            cache[key] = (out, r.stdout.split())
        return cache[key]

    return make


@pytest.fixture(scope="session")
def dataset(make_dataset):
    """4 classes x 16 real-photo JPEGs, ImageFolder layout."""
    return make_dataset(classes=4, per_class=16)[0]


def daemon_command(args, env):
    """How a stokerd command runs under the checks that wrap it:
    $STOKER_DAEMON_WRAPPER (e.g. valgrind ...) goes in front, and
    $STOKER_DAEMON_ASAN_OPTIONS replaces ASAN_OPTIONS for the daemon only
    (leak checks for stokerd, not for the Python running the tests)."""
    wrapper = os.environ.get("STOKER_DAEMON_WRAPPER", "").split()
    if wrapper and args and args[0] == str(STOKERD):
        args = wrapper + list(args)
    asan = os.environ.get("STOKER_DAEMON_ASAN_OPTIONS")
    if asan is not None:
        env = dict(os.environ if env is None else env)
        env["ASAN_OPTIONS"] = asan
    return args, env


class Daemon:
    def __init__(self, sock, stderr_path, args, env=None, preexec_fn=None):
        self.socket = str(sock)
        self.stderr_path = stderr_path
        args, env = daemon_command(args, env)
        self.args = args
        self._err = open(stderr_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._err, stderr=self._err,
                                     env=env, preexec_fn=preexec_fn)
        self.returncode = None

    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, attempts=400, step=0.025):
        for _ in range(attempts):
            if self.proc.poll() is not None:
                raise AssertionError(f"stokerd exited {self.proc.returncode} at start:\n{self.stderr()}")
            if os.path.exists(self.socket):
                s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
                try:
                    s.connect(self.socket)
                    return
                except OSError:
                    pass
                finally:
                    s.close()
            time.sleep(step)
        raise AssertionError(f"stokerd never accepted on {self.socket}:\n{self.stderr()}")

    def ctl(self, *args, check=True):
        r = subprocess.run([str(STOKERCTL), "--socket", self.socket, *args], capture_output=True,
                           text=True, timeout=30)
        if check:
            assert r.returncode == 0, f"stokerctl {' '.join(args)} exited {r.returncode}: {r.stderr}"
        return r

    def stats(self):
        return json.loads(self.ctl("stats", "--json").stdout)

    def stop(self):
        """SIGTERM, wait; returns the exit status."""
        if self.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    self.returncode = "hung after SIGTERM (killed)"
            if self.returncode is None:
                self.returncode = self.proc.returncode
            self._err.close()
        return self.returncode


@pytest.fixture
def daemon(build_dir, tmp_path, request):
    """daemon(workers=2, prefetch=None, config=None, extra=(), socket=None, env=None) starts a
    real stokerd (socket: default a path in tmp_path; env: its environment) and waits until
    it accepts; teardown stops it and requires exit status 0."""
    started = []
    request.node._stokerds = started

    def start(workers=2, prefetch=None, config=None, extra=(), socket=None, env=None):
        n = len(started)
        sock = socket or tmp_path / f"s{n}.sock"
        args = [str(STOKERD), "--socket", str(sock)]
        if workers is not None:
            args += ["--workers", str(workers)]
        if prefetch is not None:
            args += ["--prefetch", str(prefetch)]
        if config is not None:
            args += ["--config", str(config)]
        args += list(extra)
        d = Daemon(sock, tmp_path / f"stokerd{n}.err", args, env=env)
        started.append(d)
        d.wait_ready()
        return d

    yield start
    bad = []
    for d in started:
        rc = d.stop()
        if rc != 0:
            bad.append(f"{' '.join(d.args)} exited {rc}; stderr:\n{d.stderr()}")
    assert not bad, "\n".join(bad)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failing test, attach each daemon's stderr to the report."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        for i, d in enumerate(getattr(item, "_stokerds", [])):
            rep.sections.append((f"stokerd #{i} stderr", d.stderr() or "(empty)"))


MKYOLO = REPO / "scripts" / "mkyolo.py"


@pytest.fixture(scope="session")
def make_yolo(tmp_path_factory):
    """make_yolo(**mkyolo options) -> (path, manifest dict, stdout lines): a YOLO data set
    from scripts/mkyolo.py (a tuple value gives several arguments, True a bare flag);
    cached per options, so a test that changes the files uses options of its own."""
    cache = {}

    def make(**kw):
        key = tuple(sorted(kw.items()))
        if key not in cache:
            out = tmp_path_factory.mktemp("yolo")
            args = [sys.executable, str(MKYOLO), str(out)]
            for k, v in sorted(kw.items()):
                flag = f"--{k.replace('_', '-')}"
                if v is True:
                    args.append(flag)
                else:
                    args += [flag] + [str(x) for x in (v if isinstance(v, (tuple, list)) else [v])]
            r = subprocess.run(args, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"mkyolo failed:\n{r.stderr}"
            manifest = json.loads((out / "manifest.json").read_text())
            cache[key] = (out, manifest, r.stdout.splitlines())
        return cache[key]

    return make
