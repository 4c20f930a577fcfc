"""Run tests/tools/pixelop (one pixel op of daemon/pixels/pixelops.h) from the tests."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STOKER_BUILD", REPO / "build"))
PIXELOP = BUILD / "tests" / "pixelop"
PHOTOS = REPO / "data" / "photos"
# The RGB photos (the others are grey).
RGB_PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]


def _args(op, params):
    out = [op]
    for k, v in params.items():
        if v is None:
            v = "none"
        elif isinstance(v, (list, tuple)):
            v = ",".join(repr(float(x)) for x in v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            v = repr(float(v))
        out.append(f"{k}={v}")
    return out


def tool():
    if not PIXELOP.exists():
        pytest.fail(f"{PIXELOP} missing: run make")
    return str(PIXELOP)


def apply(op, params, path, seed=0, index=0, forced=None):
    """The op applied once to the image file at path: an HxWx3 uint8 array."""
    cmd = [tool(), "-s", str(seed), "-i", str(index), "-f", str(path)]
    if forced:
        cmd += ["-p", forced]
    res = subprocess.run(cmd + _args(op, params), capture_output=True, check=False)
    if res.returncode:
        raise RuntimeError(res.stderr.decode().strip())
    head, _, data = res.stdout.partition(b"\n")
    w, h = map(int, head.split())
    return np.frombuffer(data, np.uint8).reshape(h, w, 3)


def refused(op, params):
    """The tool's message when op with params is refused at parse, else None."""
    res = subprocess.run([tool(), "-g", "4x4"] + _args(op, params), capture_output=True, check=False)
    if res.returncode == 2:
        return res.stderr.decode().strip()
    assert res.returncode == 0, res.stderr
    return None


def draws(op, params, n, seed=0, size="8x8"):
    """Every draw of n samples: a list (one per sample) of lists of (name, value)."""
    res = subprocess.run([tool(), "-n", str(n), "-s", str(seed), "-g", size] + _args(op, params),
                         capture_output=True, check=True)
    out, cur = [], []
    for line in res.stdout.decode().splitlines():
        if line == ".":
            out.append(cur)
            cur = []
        else:
            name, value = line.split()
            cur.append((name, float(value)))
    return out


def as_png(tmp_path, name):
    """The photo as a PNG both sides read alike (no JPEG decoder difference) and its PIL image."""
    from PIL import Image

    im = Image.open(PHOTOS / name).convert("RGB")
    out = tmp_path / (pathlib.Path(name).stem + ".png")
    im.save(out)
    return out, im


def max_diff(a, b):
    a = np.asarray(a, np.int16)
    b = np.asarray(b, np.int16)
    assert a.shape == b.shape, (a.shape, b.shape)
    return int(np.abs(a - b).max()) if a.size else 0
