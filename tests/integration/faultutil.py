"""Helpers of the fault and hostile-input tests: the C fault client, the
failure-injection shim, a daemon's descriptors and memory, raw frames.

Waits here are bounded (a number of steps), never assertions about speed.
"""

import json
import os
import select
import subprocess
import time

from stoker_testutil import BUILD

FAULT_CLIENT = BUILD / "tests" / "fault_client"
INJECT = BUILD / "tests" / "libinject.so"
# Figures of the fault tests, for docs/reliability.md (one JSON object per test).
REPORT = BUILD / "reports" / "reliability.jsonl"


def report(test, **figures):
    """Record a test's figures (iterations, fds, RSS, samples lost...)."""
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    with open(REPORT, "a") as f:
        f.write(json.dumps(dict(test=test, time=int(time.time()), **figures)) + "\n")
    print(f"\n{test}: {json.dumps(figures)}")


def wait_until(pred, attempts=400, step=0.025, what="condition"):
    """Poll pred() a bounded number of times; return its last truthy value."""
    for _ in range(attempts):
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"{what} never became true")


def proc_status(pid, key):
    """A field of /proc/PID/status in bytes (VmRSS, VmHWM...)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} for {pid}")


def rss(pid):
    return proc_status(pid, "VmRSS")


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def preload_env(**inject):
    """An environment preloading the shim (after any sanitizer runtimes
    already preloaded) with STOKER_INJECT_* settings."""
    env = dict(os.environ)
    pre = [p for p in env.get("LD_PRELOAD", "").split() if p]
    env["LD_PRELOAD"] = " ".join(pre + [str(INJECT)])
    for k, v in inject.items():
        env[f"STOKER_INJECT_{k.upper()}"] = str(v)
    return env


def under_asan():
    return "asan" in os.environ.get("LD_PRELOAD", "")


def native_memory():
    """Is the daemon's RSS its own? Not under AddressSanitizer (its
    quarantine holds freed memory), a wrapper such as valgrind, or another
    daemon binary ($STOKER_STOKERD: ThreadSanitizer's shadow memory)."""
    return not (under_asan() or os.environ.get("STOKER_DAEMON_WRAPPER") or os.environ.get("STOKER_STOKERD"))


class FaultClient:
    """tests/fault/client.c in its own process; lines read with bounded waits."""

    def __init__(self, socket, dataset, env=None, **opts):
        args = [str(FAULT_CLIENT), str(socket), str(dataset)] + [f"{k}={v}" for k, v in opts.items()]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.pid = self.proc.pid
        self._buf = b""
        self.lines = []    # not yet consumed by until()/try_line()
        self.history = []  # every line so far

    def _fill(self, timeout):
        fd = self.proc.stdout.fileno()
        if select.select([fd], [], [], timeout)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return False
            self._buf += chunk
            *done, self._buf = self._buf.split(b"\n")
            self.lines += [x.decode() for x in done]
            self.history += [x.decode() for x in done]
        return True

    def until(self, prefix, attempts=1200, step=0.05):
        """Wait for a line starting with prefix; return it. Fails on an X
        line or the client's exit."""
        seen = 0
        for _ in range(attempts):
            while seen < len(self.lines):
                line = self.lines[seen]
                seen += 1
                if line.startswith(prefix):
                    del self.lines[:seen]
                    return line
                if line.startswith("X "):
                    raise AssertionError(f"fault client failed: {line}")
            if not self._fill(step) and not self._buf:
                break
        raise AssertionError(f"fault client printed no {prefix!r} line (rc={self.proc.poll()}): "
                             f"{self.lines[-5:]} {self.stderr()}")

    def try_line(self, prefix, step=0.0):
        """A line starting with prefix if one has arrived, else None (no wait)."""
        self._fill(step)
        for i, line in enumerate(self.lines):
            if line.startswith(prefix):
                del self.lines[:i + 1]
                return line
        return None

    def cmd(self, text):
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()
        return self.until("R ")

    def finish(self, attempts=1200):
        """Close stdin and collect every remaining line; requires exit 0."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        for _ in range(attempts):
            if not self._fill(0.05) and self.proc.poll() is not None:
                break
        self.proc.wait(timeout=60)
        out = self.lines + ([self._buf.decode()] if self._buf else [])
        self.lines, self._buf = [], b""
        assert self.proc.returncode == 0, f"fault client exited {self.proc.returncode}: {out[-5:]} {self.stderr()}"
        return out

    def kill(self, sig=9):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def reap(self):
        self.proc.wait(timeout=60)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    def stderr(self):
        if self.proc.poll() is None:
            return ""
        try:
            return self.proc.stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""


def epoch_lines(lines):
    """{epoch: (batches, samples, lost, repeated, digest)} from E lines."""
    out = {}
    for line in lines:
        if line.startswith("E "):
            _, e, b, n, lost, rep, digest = line.split()
            out[int(e)] = (int(b), int(n), int(lost), int(rep), digest)
    return out


# ---- raw protocol frames (hand-encoded protobuf) ----

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, value):
    """A protobuf field: int -> varint, bytes/str -> length-delimited."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def frame(body):
    return len(body).to_bytes(4, "little") + body


def message(kind, *fields):
    """Message{kind: {fields}} framed; kind is the oneof field number."""
    return frame(field(kind, b"".join(fields)))


HELLO, ATTACH, START_EPOCH, RELEASE, STATS_REQUEST, ERROR = 1, 3, 5, 8, 9, 11


def hello(version=1):
    return message(HELLO, field(1, version))


def attach(dataset, batch_size=4, image_size=32, seed=0, rank=0, world_size=1, prefetch=0):
    return message(ATTACH, field(1, str(dataset)), field(3, batch_size), field(4, image_size), field(5, seed),
                   field(6, rank), field(7, world_size), field(11, prefetch))


def release(slot):
    return message(RELEASE, field(1, slot))


def parse_frames(data):
    """[(kind, body)] of the complete frames in data (top-level oneof field)."""
    out = []
    while len(data) >= 4:
        n = int.from_bytes(data[:4], "little")
        if len(data) < 4 + n:
            break
        body = data[4:4 + n]
        data = data[4 + n:]
        key, i = 0, 0
        shift = 0
        while i < len(body):
            b = body[i]
            key |= (b & 0x7F) << shift
            i += 1
            shift += 7
            if not b & 0x80:
                break
        out.append((key >> 3, body))
    return out


def error_code(body):
    """The code of an Error message body (Message{error{code, message}})."""
    # body: tag(11,LEN) len  [tag(1,VARINT) code ...]
    i = 1
    while body[i] & 0x80:
        i += 1
    i += 1
    assert body[i] == 0x08, body
    return body[i + 1]
