"""Running the daemon's transform pipeline on files with tests/tools/tpipe
(build/tests/tpipe), and the photos the tests use."""

import os
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("STOKER_BUILD", REPO / "build"))
TPIPE = BUILD / "tests" / "tpipe"
PHOTOS = sorted(p for p in (REPO / "data" / "photos").iterdir() if p.suffix in (".png", ".jpg"))
DTYPES = {"uint8": np.uint8, "float32": np.float32, "float16": np.float16}


def check(text):
    """(ok, out_w, out_h, description) or (False, reason)."""
    r = subprocess.run([str(TPIPE), "check", text], capture_output=True, text=True, timeout=60)
    line = r.stdout.strip()
    if r.returncode == 0:
        _, w, h, desc = line.split(" ", 3)
        return True, int(w), int(h), desc
    assert line.startswith("! "), (r.returncode, r.stdout, r.stderr)
    return False, line[2:]


def run(text, files, seed=0):
    """[(draws, image or error text)] per file: draws are (op, kind, [4 numbers]);
    the image HWC for uint8, CHW for floats."""
    r = subprocess.run([str(TPIPE), "run", text, str(seed)] + [str(f) for f in files], capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[:2000] + r.stderr
    data, pos, results, draws = r.stdout, 0, [], []
    while pos < len(data):
        end = data.index(b"\n", pos)
        line = data[pos:end].decode()
        pos = end + 1
        if line.startswith("draw "):
            _, op, kind, *v = line.split()
            draws.append((int(op), kind, [float(x) for x in v]))
        elif line.startswith("! "):
            results.append((draws, line[2:]))
            draws = []
        else:
            _, dtype, w, h, n = line.split()
            w, h, n = int(w), int(h), int(n)
            a = np.frombuffer(data[pos:pos + n], dtype=DTYPES[dtype])
            pos += n
            a = a.reshape(h, w, 3) if dtype == "uint8" else a.reshape(3, h, w)
            results.append((draws, a))
            draws = []
    return results


def draw(text, op, width, height, n, seed=1):
    """n draws of op `op` alone, as an (n, 4) array."""
    r = subprocess.run([str(TPIPE), "draw", text, str(op), str(width), str(height), str(seed), str(n)],
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return np.frombuffer(r.stdout, dtype=np.float64).reshape(n, 4)
