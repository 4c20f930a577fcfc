"""scripts/mkdataset.py: layout, determinism, corrupt files (no daemon needed)."""

import subprocess
import sys

from PIL import Image

from stoker_testutil import REPO, assert_none_decode, expected_samples, list_samples

MK = [sys.executable, str(REPO / "scripts" / "mkdataset.py")]


def tree(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_deterministic_and_layout(tmp_path):
    args = ["--classes", "9", "--per-class", "2", "--min-side", "64", "--max-side", "96"]
    for name, jobs, seed in [("a", 1, 3), ("b", 2, 3), ("c", 1, 4)]:
        subprocess.run(MK + [str(tmp_path / name), "--jobs", str(jobs), "--seed", str(seed)] + args,
                       check=True, capture_output=True)
    a, b, c = (tree(tmp_path / x) for x in "abc")
    assert a == b, "output depends on --jobs"
    assert a.keys() == c.keys() and a != c, "seed has no effect"
    samples = expected_samples(tmp_path / "a")
    assert [lab for _, lab in samples] == [k for k in range(9) for _ in range(2)]
    modes = set()
    for path, _ in samples:
        im = Image.open(path)
        assert im.format == "JPEG" and 64 <= min(im.size) <= 96
        modes.add(im.mode)
    assert modes == {"L", "RGB"}, modes


def test_corrupt_and_list_layout(tmp_path):
    out = tmp_path / "l"
    r = subprocess.run(MK + [str(out), "--layout", "list", "--classes", "3", "--per-class", "2",
                             "--corrupt", "3", "--min-side", "64", "--max-side", "80"],
                       check=True, capture_output=True, text=True)
    bad = r.stdout.split()
    assert len(bad) == 3
    samples = list_samples(out / "list.txt")
    assert len(samples) == 9
    assert {p for p, _ in samples} >= set(bad)
    assert_none_decode(bad)
