"""CUDA delivery without a GPU (make check runs where there is none): every
device option is validated, a device attach is refused with the reason and
the daemon goes on serving others, the wire protocol carries the device
fields, pin_memory degrades as documented, gpu_memory_budget is a live key.
The CUDA path itself is tested on a GPU by tests/gpu/run.sh."""

import errno
import json
import os
import shutil
import socket as pysocket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import stoker
from faultutil import ATTACH, ERROR, error_code, field, hello, message, parse_frames
from stoker_testutil import REPO, STOKERD, cuda_driver_present



no_cuda = pytest.mark.skipif(cuda_driver_present(), reason="a CUDA driver is here: tests/gpu/run.sh covers it")

INVALID_ARGUMENT, DEVICE_UNAVAILABLE = 1, 40
# Why CUDA is not usable here: no driver, or a build without the toolkit.
NO_CUDA = ("no CUDA driver on this node", "stoker was built without CUDA")


def raw_attach(path, dataset, *extra):
    """Hello + Attach with extra fields; the frames the daemon answers with
    (up to Attached or Error)."""
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(30)
    try:
        s.sendall(hello() + message(ATTACH, field(1, str(dataset)), field(3, 2), field(4, 32), *extra))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            frames = parse_frames(data)
            if any(k in (4, ERROR) for k, _ in frames):
                return frames
        return parse_frames(data)
    finally:
        s.close()


def error_of(frames):
    errs = [(error_code(b), b) for k, b in frames if k == ERROR]
    assert errs, f"no Error in {[k for k, _ in frames]}"
    return errs[0]


@pytest.mark.parametrize("bad", ["gpu:0", "cuda:", "cuda:-1", "cuda:01", "cuda:1024", "cuda:0x", "cuda:0 ", "CUDA:0"])
def test_device_option_validated_by_the_library(daemon, dataset, bad):
    d = daemon()
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(dataset, socket=d.socket, batch_size=2, image_size=32, device=bad)
    assert e.value.errno == errno.EINVAL and "device" in str(e.value)


@pytest.mark.parametrize("bad", ["cuda:x", "cuda:", "cuda:99999", "gpu0", "cuda:007"])
def test_device_field_validated_by_the_daemon(daemon, dataset, bad):
    d = daemon()
    code, body = error_of(raw_attach(d.socket, dataset, field(40, bad)))
    assert code == INVALID_ARGUMENT and b"is not cpu or cuda:N" in body
    # A UUID of the wrong size, and one for the host.
    code, body = error_of(raw_attach(d.socket, dataset, field(40, "cuda:0"), field(41, b"\x01" * 15)))
    assert code == INVALID_ARGUMENT and b"device_uuid has 15 bytes" in body
    code, body = error_of(raw_attach(d.socket, dataset, field(41, b"\x01" * 16)))
    assert code == INVALID_ARGUMENT and b"device_uuid given for device cpu" in body
    assert d.proc.poll() is None


@no_cuda
def test_cuda_attach_refused_and_daemon_keeps_serving(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32, seed=3) as host:
        it = iter(host)
        first = next(it)
        assert first.images.shape == (4, 32, 32, 3)
        for dev, dtype in (("cuda:0", "uint8"), ("cuda:3", "float16")):
            with pytest.raises(stoker.StokerError) as e:
                stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32, device=dev, dtype=dtype)
            # The daemon's reason, and this process's.
            assert e.value.errno == errno.ENODEV, e.value
            assert any(f"stokerd: {w}" in str(e.value) for w in NO_CUDA), e.value
            assert any(f"in this process: {w}" in str(e.value) for w in NO_CUDA), e.value
        # The raw protocol: the daemon says why, with DEVICE_UNAVAILABLE.
        code, body = error_of(raw_attach(d.socket, dataset, field(40, "cuda:0"), field(41, bytes(16))))
        assert code == DEVICE_UNAVAILABLE and b"CUDA" in body
        # The first client goes on, and a new one attaches.
        rest = sum(1 for _ in it)
        assert rest == len(host) - 1
        with stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32) as again:
            assert sum(len(b) for b in again) == again.samples_per_epoch
        st = d.stats()
        assert st["device_bytes"] == 0 and any(w in st["cuda"] for w in NO_CUDA), st["cuda"]
        assert [c["device"] for c in st["clients"]] == ["cpu"]
        assert st["clients"][0]["device_bytes"] == 0
    assert d.proc.poll() is None


@no_cuda
def test_pin_memory_degrades_without_cuda(daemon, dataset):
    d = daemon()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32, pin_memory=True) as loader:
            assert not loader.pinned
            assert sum(len(b) for b in loader) == loader.samples_per_epoch
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert any("pin_memory" in m and "not pinned" in m for m in msgs), msgs
    # "required": refused before attaching, with the reason.
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32, pin_memory="required")
    assert e.value.errno in (errno.ENOENT, errno.ENOSYS, errno.ENODEV)
    assert "pin_memory" in str(e.value) and any(w in str(e.value) for w in NO_CUDA), e.value
    assert d.stats()["clients"] == []


def test_gpu_memory_budget_is_a_live_key(daemon, dataset):
    d = daemon(extra=["--set", "gpu_memory_budget=3G"])
    st = d.stats()
    assert st["gpu_memory_budget_bytes"] == 3 << 30 and st["device_bytes"] == 0
    assert st["cuda"] == "unused"
    cfg = stoker.config(socket=d.socket)
    assert cfg["settings"]["gpu_memory_budget"]["value"] == "3G"
    stoker.set_config("gpu_memory_budget", "512M", socket=d.socket)
    assert d.stats()["gpu_memory_budget_bytes"] == 512 << 20
    with pytest.raises(stoker.StokerError):
        stoker.set_config("gpu_memory_budget", "lots", socket=d.socket)
    with stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32):
        text = stoker.metrics(socket=d.socket)
        top = d.ctl("top", "-n", "1").stdout
        stats_text = d.ctl("stats").stdout
    # stokerctl: the GPU line, and each client's device and device bytes.
    assert "gpu       device rings 0 B   budget 512.0 MiB per GPU" in top, top
    header = next(line for line in top.splitlines() if "CLIENT" in line)
    row = top.splitlines()[top.splitlines().index(header) + 1]
    assert header.split()[-3:] == ["GPU", "MEM", "DATASET"] and " cpu " in row, top
    assert "gpu             0.0 MiB in device rings" in stats_text, stats_text
    assert "stoker_gpu_memory_budget_bytes 536870912" in text
    assert "stoker_device_bytes 0" in text
    assert "stoker_client_device_bytes{" in text


def test_gpu_run_script_exit_status_follows_its_summary(tmp_path):
    """tests/gpu/run.sh ends non-zero when a test section fails: here the
    GPU sections cannot run (no data set), so its summary says FAIL."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    env = dict(os.environ, OUT=str(tmp_path), SKIP="env build dataset")
    r = subprocess.run([os.path.join(root, "tests", "gpu", "run.sh")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert "GPU TESTS: FAIL" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 1, r.stdout + r.stderr
    with open(tmp_path / "summary.json") as f:
        rows = json.load(f)
    assert [(x["section"], x["result"]) for x in rows if x["kind"] == "test"] == [
        ("build", "SKIP (asked)"), ("gpu-sections", "FAIL (not built)")]


def dropin_properties():
    """deploy/stoker-gpu.conf's [Service] assignments: {key: [values]}."""
    props = {}
    for line in (REPO / "deploy" / "stoker-gpu.conf").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            props.setdefault(key, []).append(value)
    return props


def test_gpu_dropin_properties(tmp_path):
    """The GPU drop-in loads nvidia-uvm and makes the device nodes before the
    start (with full privileges, tolerated where nvidia-modprobe is absent),
    lets the driver map write-execute memory (its PTX JIT) and set NUMA
    policies; systemd accepts the unit with it."""
    props = dropin_properties()
    pre = [v for v in props.get("ExecStartPre", []) if "nvidia-modprobe" in v]
    assert len(pre) == 1, props.get("ExecStartPre")
    prefix, _, command = pre[0].partition("nvidia-modprobe")
    assert set(prefix) == {"-", "+"}, pre  # '+': full privileges; '-': absent or failing is fine
    assert command.split() == ["-u", "-c=0"], pre
    assert props["MemoryDenyWriteExecute"] == ["no"]
    allowed = " ".join(props.get("SystemCallFilter", [])).split()
    assert {"mbind", "set_mempolicy"} <= set(allowed) and not any(a.startswith("~") for a in allowed)
    assert "CUDA_DEVICE_MAX_CONNECTIONS=32" in props["Environment"]
    for dev in ("/dev/nvidiactl rw", "/dev/nvidia-uvm rw", "char-nvidia-uvm rw", "char-nvidia rw"):
        assert dev in props["DeviceAllow"], dev
    # systemd parses it: the unit plus the drop-in as a unit directory.
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze here")
    unit = (REPO / "deploy" / "stoker.service").read_text().replace("/usr/local/sbin/stokerd", str(STOKERD))
    (tmp_path / "stoker.service").write_text(unit)
    (tmp_path / "stoker.socket").write_text((REPO / "deploy" / "stoker.socket").read_text())
    (tmp_path / "stoker.service.d").mkdir()
    (tmp_path / "stoker.service.d" / "gpu.conf").write_text((REPO / "deploy" / "stoker-gpu.conf").read_text())
    env = dict(os.environ, SYSTEMD_UNIT_PATH=f"{tmp_path}:")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "stoker.service")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and not r.stderr.strip(), r.stdout + r.stderr
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(tmp_path / "stoker.service")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    mdwe = next(line for line in r.stdout.splitlines() if "MemoryDenyWriteExecute=" in line)
    assert mdwe.startswith("✗"), mdwe  # the drop-in's "no" took effect over the unit's "yes"


FAKE_CUDA = Path(os.environ.get("STOKER_BUILD") or REPO / "build").resolve() / "tests" / "fake-cuda" / "libcuda.so.1"
fake_cuda = pytest.mark.skipif(not FAKE_CUDA.exists(), reason="built without CUDA: no fake driver (tests/gpu/fake_libcuda.c)")
FAKE_UUID = bytes([0xf0]) * 16  # the fake's cuda:0


def fake_env(**attrs):
    env = dict(os.environ, STOKER_LIBCUDA=str(FAKE_CUDA))
    env.update({f"FAKE_CUDA_{k.upper()}": str(v) for k, v in attrs.items()})
    return env


@fake_cuda
@pytest.mark.parametrize("attrs, says", [
    ({"compute_mode": 3}, b"compute mode is EXCLUSIVE_PROCESS"),
    ({"compute_mode": 2}, b"compute mode is PROHIBITED"),
    ({"vmm": 0}, b"VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"),
    ({"posix_fd": 0}, b"HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"),
    ({"memops": 0}, b"CAN_USE_64_BIT_STREAM_MEM_OPS"),
])
def test_daemon_refuses_a_gpu_that_cannot_serve_a_ring(daemon, dataset, attrs, says):
    """stokerd checks the GPU's compute mode and capabilities (through the
    fake driver's attributes) before it makes anything there, and says why;
    it goes on serving."""
    d = daemon(env=fake_env(**attrs))
    code, body = error_of(raw_attach(d.socket, dataset, field(40, "cuda:0"), field(41, FAKE_UUID)))
    assert code == DEVICE_UNAVAILABLE and says in body, body
    assert b"cuda:0: " in body, body
    with stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32) as host:
        assert sum(len(b) for b in host) == host.samples_per_epoch
    assert d.stats()["device_bytes"] == 0


@fake_cuda
def test_daemon_float_output_needs_stream_ordered_allocation(daemon, dataset):
    d = daemon(env=fake_env(pools=0))
    code, body = error_of(raw_attach(d.socket, dataset, field(40, "cuda:0"), field(41, FAKE_UUID), field(12, 1)))
    assert code == DEVICE_UNAVAILABLE and b"MEMORY_POOLS_SUPPORTED" in body, body


CLIENT_ATTACH = """
import stoker, sys
try:
    stoker.Loader(sys.argv[1], socket=sys.argv[2], batch_size=4, image_size=32, device="cuda:0")
except stoker.StokerError as e:
    print("ERRNO", e.errno, str(e))
else:
    print("ATTACHED")
"""


@fake_cuda
@pytest.mark.parametrize("mode, says", [(3, "EXCLUSIVE_PROCESS"), (2, "PROHIBITED")])
def test_client_refuses_compute_mode_before_attaching(daemon, dataset, mode, says):
    """The library checks the compute mode itself and refuses before the
    daemon makes anything: the daemon never sees the attach."""
    d = daemon()
    env = fake_env(compute_mode=mode)
    r = subprocess.run([sys.executable, "-c", CLIENT_ATTACH, str(dataset), d.socket], env=env,
                       capture_output=True, text=True, timeout=120)
    assert f"ERRNO {errno.EPERM} " in r.stdout and says in r.stdout, r.stdout + r.stderr
    assert "stokerd:" not in r.stdout, r.stdout  # the library's own reason, not the daemon's
    assert d.stats()["cuda"] == "unused"  # no device attach reached stokerd


@fake_cuda
def test_failed_cuinit_is_retried(daemon, dataset, tmp_path):
    """A failed cuInit (the driver's device nodes not there yet) is not kept
    for ever: once the cause is gone the next attach after the back-off
    gets past cuInit (the fake then refuses at its first context)."""
    flag = tmp_path / "no-device"
    flag.touch()
    d = daemon(env=fake_env(init_fails_while=flag))
    code, body = error_of(raw_attach(d.socket, dataset, field(40, "cuda:0"), field(41, FAKE_UUID)))
    assert code == DEVICE_UNAVAILABLE and b"cuInit" in body, body
    assert "cuInit" in d.stats()["cuda"]
    flag.unlink()
    for _ in range(300):  # the back-off is 1 s (then 2 s): try for up to 30 s
        code, body = error_of(raw_attach(d.socket, dataset, field(40, "cuda:0"), field(41, FAKE_UUID)))
        if b"cuInit" not in body:
            break
        time.sleep(0.1)
    assert b"cuInit" not in body and b"cuDevicePrimaryCtxRetain" in body, body
    assert d.stats()["cuda"].startswith("usable: 1 GPU"), d.stats()["cuda"]


@fake_cuda
def test_pin_memory_never_creates_a_context(daemon, dataset):
    """pin_memory uses the current context, else one the process already
    has; with none (the fake has none) it says so and keeps the batches
    pageable rather than making a context on GPU 0."""
    d = daemon()
    code = """
import stoker, sys, warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with stoker.Loader(sys.argv[1], socket=sys.argv[2], batch_size=4, image_size=32, pin_memory=True) as l:
        print("PINNED", l.pinned, sum(len(b) for b in l) == l.samples_per_epoch)
print("WARN", " | ".join(str(x.message) for x in w))
"""
    r = subprocess.run([sys.executable, "-c", code, str(dataset), d.socket], env=fake_env(),
                       capture_output=True, text=True, timeout=120)
    assert "PINNED False True" in r.stdout, r.stdout + r.stderr
    assert "no CUDA context in this process" in r.stdout, r.stdout
