"""Label files read by stoker's instances_parse (daemon/data/instances.c,
through build/tests/labeldump) against Ultralytics' own verify_image_label
on the very same files, for every task: boxes, segment polygons, OBB
corners, pose keypoints (kpt_shape, ndim 2 and 3, trimmed for box tasks),
single_cls; what it drops as corrupt, the duplicates it removes and the
order it leaves, its tolerances; hand-written edge cases and a few hundred
random files from a grammar of good and bad rows. make check-ultralytics."""

import json
import random
import shutil
import subprocess

import numpy as np
import pytest
from ultralytics.data.utils import verify_image_label

from stoker_testutil import BUILD, REPO

LABELDUMP = BUILD / "tests" / "labeldump"
PHOTO = REPO / "data" / "photos" / "brick.png"


def _ours(path, nc, single_cls=False, kpt=None, pose=False):
    args = [str(LABELDUMP), "-c", str(nc)]
    if single_cls:
        args.append("-s")
    if kpt:
        args += ["-k", f"{kpt[0]},{kpt[1]}"]
    if pose:
        args.append("-p")
    r = subprocess.run(args + [str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _theirs(img, path, nc, single_cls=False, kpt=None, pose=False):
    nkpt, ndim = kpt or (0, 0)
    out = verify_image_label((str(img), str(path), "", pose, nc, nkpt, ndim, single_cls))
    return out


def _compare(tmp_path, text, nc=4, single_cls=False, kpt=None, pose=False):
    """Both readers on the same file: corrupt alike, else the same classes,
    boxes, segments and keypoints, bit for bit, in the same order."""
    img = tmp_path / "images" / "a.png"
    lbl = tmp_path / "labels" / "a.txt"
    if not img.exists():
        img.parent.mkdir(parents=True)
        lbl.parent.mkdir(parents=True)
        shutil.copy(PHOTO, img)
    lbl.write_bytes(text if isinstance(text, bytes) else text.encode())
    ours = _ours(lbl, nc, single_cls, kpt, pose)
    theirs = _theirs(img, lbl, nc, single_cls, kpt, pose)
    corrupt = theirs[0] is None
    assert ours["ok"] == (not corrupt), (text, ours, theirs[-1])
    if corrupt:
        return ours
    _, lb, _, segments, keypoints = theirs[:5]
    f32 = lambda x: np.asarray(x, dtype=np.float32).reshape(-1)  # noqa: E731
    assert np.array_equal(f32(ours["cls"]), lb[:, 0].astype(np.float32)), text
    assert np.array_equal(f32(ours["box"]), lb[:, 1:5].astype(np.float32).reshape(-1)), text
    if segments:
        assert ours["seg"] is not None and len(ours["seg"]) == len(segments), text
        for s, t in zip(ours["seg"], segments):
            assert np.array_equal(f32(s), t.astype(np.float32).reshape(-1)), text
    else:
        assert ours["seg"] is None or len(lb) == 0, text
    if pose:
        assert np.array_equal(f32(ours["kpt"]), keypoints.astype(np.float32).reshape(-1)), text
    return ours


EDGE = [
    "",
    "\n\n  \n",
    "0 0.5 0.5 0.2 0.2\n",
    "0 0.5 0.5 0.2 0.2\r\n1 0.25 0.75 0.1 0.3\r\n",
    "\ufeff0 0.5 0.5 0.2 0.2\n",
    "0\t0.5 0.5  0.2 0.2\v1 0.5 0.5 0.2 0.2\f2 0.1 0.1 0.1 0.1\x1c3 0.2 0.2 0.2 0.2\x1f\n",
    "0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n",                    # duplicate: kept once
    "3 0.9 0.9 0.1 0.1\n0 0.5 0.5 0.2 0.2\n3 0.9 0.9 0.1 0.1\n1 0.1 0.1 0.1 0.1\n",  # dups: sorted order
    "0 1.005 0.5 0.2 0.2\n",  # within the 1% tolerance
    "0 1.02 0.5 0.2 0.2\n",   # out of bounds: corrupt
    "0 -0.005 0.5 0.2 0.2\n",  # small negative with positive size: kept
    "0 -0.02 0.5 0.2 0.2\n",
    "0 0.5 0.5 -0.005 0.2\n",
    "0.5 0.5 0.5 0.2 0.2\n",   # non-integer class
    "4 0.5 0.5 0.2 0.2\n",     # class >= nc
    "1e0 0.5 0.5 0.2 0.2\n",
    "0 5e-1 .5 0.2_0 2.E-1\n",
    "0 nan 0.5 0.2 0.2\n",
    "0 inf 0.5 0.2 0.2\n",
    "inf 0.5 0.5 0.2 0.2\n",
    "0 0x1 0.5 0.2 0.2\n",
    "0 0.5 0.5 0.2\n",
    "0 0.5 0.5 0.2 0.2 0.3\n",
    "0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2\n",
    "abc\n",
    b"0 0.5 0.5 0.2 0.2\x00\n",
    b"0 0.5 0.5 0.2 0.2\n\xff\xfe\n",
    # segments (and OBB corners: four points)
    "0 0.1 0.1 0.4 0.1 0.4 0.3 0.1 0.3\n",
    "0 0.1 0.1 0.4 0.1 0.4 0.3\n1 0.5 0.5 0.9 0.5 0.9 0.9 0.5 0.9 0.6 0.95\n",
    "0 0.1 0.1 0.4 0.1 0.4 0.3\n1 0.5 0.5 0.2 0.2\n",   # mixed: corrupt
    "0 0.1 0.1 0.4 0.1 0.4\n",                         # odd
    "0 0.1 0.1 0.4 0.1 0.4 0.3\n1 0.2\n",              # a row of 1 value
    "0 0.1 0.1 0.4 0.1 0.4 0.3\n1 0.2 0.3\n",          # a 1-point segment: zero box, kept
    "0 0.1 0.1 0.4 0.1 0.4 0.3\n0 0.1 0.1 0.4 0.1 0.4 0.3\n",  # duplicate polygons
    "0 0.1 0.1 0.4 0.1 0.4 0.3\n0 0.4 0.3 0.1 0.1 0.4 0.1\n",  # same class and box, other polygon: both kept
    "2 0.1 0.1 0.4 0.1 0.4 0.3\n0 0.4 0.3 0.1 0.1 0.4 0.1\n2 0.1 0.1 0.4 0.1 0.4 0.3\n0 0.1 0.1 0.4 0.1 0.4 0.3\n",
    "0 0.1 0.1 1.2 0.1 0.4 0.3\n",
]


@pytest.mark.parametrize("text", EDGE)
def test_edge_cases_as_ultralytics(tmp_path, text):
    _compare(tmp_path, text)


def test_single_cls(tmp_path):
    _compare(tmp_path, "7 0.5 0.5 0.2 0.2\n", nc=1, single_cls=True)
    _compare(tmp_path, "7 0.5 0.5 0.2 0.2\n", nc=1)


POSE = [
    "0 0.5 0.5 0.2 0.2 0.4 0.4 2 0.6 0.6 1 0 0 0\n",
    "0 0.5 0.5 0.2 0.2 0.4 0.4 2 0.6 0.6 1 0 0 0\n0 0.5 0.5 0.2 0.2 0.4 0.4 2 0.6 0.6 1 0 0 0\n",
    "0 0.5 0.5 0.2 0.2 1.02 0.4 2 0.6 0.6 1 0 0 0\n",   # a keypoint out of bounds: corrupt
    "0 1.2 0.5 0.2 0.2 0.4 0.4 2 0.6 0.6 1 0 0 0\n",    # the box is not bounds-checked for pose
    "0 0.5 0.5 0.2 0.2 0.4 0.4 2 0.6 0.6 1\n",
    "0 0.5 0.5 0.2 0.2\n",
    "0 0.5 0.5 0.2 0.2 0.4 0.4 2 0.6 0.6 1 0 0 0 0.1 0.2\n",
]


@pytest.mark.parametrize("text", POSE)
def test_pose_as_ultralytics(tmp_path, text):
    _compare(tmp_path, text, kpt=(3, 3), pose=True)
    # the same rows for a box task with kpt_shape in the yaml: keypoints trimmed
    _compare(tmp_path, text, kpt=(3, 3), pose=False)


@pytest.mark.parametrize("text", ["0 0.5 0.5 0.2 0.2 0.4 0.4 0.6 0.6\n", "0 0.5 0.5 0.2 0.2 -0.005 0.4 0.6 0.6\n",
                                  "1 0.5 0.5 0.2 0.2 0.4 0.4 0.6 0.6\n0 0.5 0.5 0.2 0.2 0.4 0.4 0.6 0.6\n"])
def test_pose_two_values_as_ultralytics(tmp_path, text):
    ours = _compare(tmp_path, text, kpt=(2, 2), pose=True)
    assert ours["ok"]


def _random_row(rng, kind):
    def v():
        r = rng.random()
        if r < 0.02:
            return rng.choice(["nan", "inf", "-inf", "x", "1_0", "0x1", "1e-2", ".5", "-0", "1.0.0"])
        if r < 0.08:
            return repr(round(rng.uniform(-0.03, 1.03), rng.choice([2, 3, 6])))
        return repr(round(rng.random(), rng.choice([1, 2, 6])))

    cls = rng.choice(["0", "1", "2", "3", "4", "1.5", "-1", "2.0"] + ["0", "1", "2"] * 5)
    if kind == "box":
        n = rng.choice([5] * 20 + [4, 6])
        return " ".join([cls] + [v() for _ in range(n - 1)])
    if kind == "pose":
        n = rng.choice([14] * 20 + [5, 13, 15])
        return " ".join([cls] + [v() for _ in range(n - 1)])
    pts = rng.choice([3, 4, 4, 5, 8, 1]) * 2 + rng.choice([0] * 15 + [1])
    return " ".join([cls] + [v() for _ in range(pts)])


@pytest.mark.parametrize("kind", ["box", "segment", "pose"])
def test_random_files_as_ultralytics(tmp_path, kind):
    rng = random.Random(21)
    corrupt = 0
    for _ in range(120):
        rows = [_random_row(rng, kind) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.3:  # duplicates
            rows += rng.sample(rows, k=min(len(rows), rng.randint(1, 3)))
            rng.shuffle(rows)
        if kind == "segment" and rng.random() < 0.1:
            rows.append(_random_row(rng, "box"))
        ours = _compare(tmp_path, "\n".join(rows) + "\n", kpt=(3, 3), pose=kind == "pose")
        corrupt += not ours["ok"]
    assert 0 < corrupt < 120  # both kinds of file were tried
