"""scripts/mkyolo.py: layout, labels against the manifest, faults, determinism (no daemon needed)."""

import json
import re
import subprocess
import sys

from PIL import Image

from stoker_testutil import REPO, assert_none_decode

MK = [sys.executable, str(REPO / "scripts" / "mkyolo.py")]


def tree(root):
    """Every file's bytes, except those that name the output directory itself."""
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("data.yaml", "manifest.json")}


def parse_box_line(line):
    f = line.split()
    return int(f[0]), [float(x) for x in f[1:]]


def test_deterministic_and_layout(tmp_path):
    args = ["--images", "6", "--min-side", "96", "--max-side", "160", "--bad-labels", "1", "--polygons", "1",
            "--no-labels-for", "1", "--corrupt", "1"]
    for name, jobs, seed in [("a", 1, 3), ("b", 2, 3), ("c", 1, 4)]:
        subprocess.run(MK + [str(tmp_path / name), "--jobs", str(jobs), "--seed", str(seed)] + args,
                       check=True, capture_output=True)
    a, b, c = (tree(tmp_path / x) for x in "abc")
    assert a == b, "output depends on --jobs"
    images = {k for k in a if k.parts[0] == "images"}
    assert images == {k for k in c if k.parts[0] == "images"} and a != c, "seed has no effect"
    root = tmp_path / "a"
    yaml = (root / "data.yaml").read_text()
    assert f"path: {root}\n" in yaml and "train: images/train\n" in yaml and "val: images/train\n" in yaml
    assert "names:\n  0: class_00\n" in yaml and "  79: class_79\n" in yaml
    m = json.loads((root / "manifest.json").read_text())
    assert [e["image"] for e in m["images"]] == sorted(e["image"] for e in m["images"])
    assert len(m["images"]) == 7
    assert sorted(e["role"] for e in m["images"]) == ["bad", "boxes", "boxes", "boxes", "boxes", "missing",
                                                      "polygons"]
    for e in m["images"]:
        label = root / "labels" / "train" / (e["image"].split("/")[-1][:-4] + ".txt")
        assert label.exists() == (e["role"] != "missing")
        if e["corrupt"]:
            continue
        im = Image.open(root / e["image"])
        assert im.format == "JPEG" and im.size == (e["width"], e["height"])
        assert 96 <= max(im.size) <= 160
        assert 3 / 4 - 0.02 <= im.size[0] / im.size[1] <= 4 / 3 + 0.02
        assert 1 <= len(e["boxes"]) <= 8


def test_labels_match_manifest(tmp_path):
    out = tmp_path / "s"
    r = subprocess.run(MK + [str(out), "--kind", "scenes", "--images", "12", "--classes", "5", "--bad-labels", "4",
                             "--polygons", "3", "--min-side", "200", "--max-side", "400"],
                       check=True, capture_output=True, text=True)
    printed = r.stdout.splitlines()
    m = json.loads((out / "manifest.json").read_text())
    assert m["names"] == ["red", "green", "blue", "yellow", "magenta"]
    want_bad = [f"{out / e['label']}:{n}" for e in m["images"] for n, _ in e["bad_lines"]]
    assert printed == want_bad and len(printed) >= 4
    kinds = {k for e in m["images"] for _, k in e["bad_lines"]}
    assert len(kinds) >= 4, kinds
    for e in m["images"]:
        W, H = e["width"], e["height"]
        lines = (out / e["label"]).read_text().splitlines()
        bad = {n for n, _ in e["bad_lines"]}
        good = [ln for n, ln in enumerate(lines, 1) if n not in bad]
        assert len(good) == len(e["boxes"])
        for ln in lines:  # six decimals everywhere a number is well formed
            for x in ln.split()[1:]:
                if re.fullmatch(r"-?\d+\.\d+", x):
                    assert len(x.split(".")[1]) == 6
        for ln, (c, x0, y0, x1, y1) in zip(good, e["boxes"]):
            assert 0 <= c < 5
            assert 16 <= x0 < x1 <= W - 16 and 16 <= y0 < y1 <= H - 16
            assert x1 - x0 >= 24 and y1 - y0 >= 24
            cls, v = parse_box_line(ln)
            assert cls == c
            if e["role"] == "polygons":
                assert len(v) >= 6 and len(v) % 2 == 0
                xs, ys = v[0::2], v[1::2]
                got = [min(xs) * W, min(ys) * H, max(xs) * W, max(ys) * H]
            else:
                assert len(v) == 4
                cx, cy, w, h = v
                got = [(cx - w / 2) * W, (cy - h / 2) * H, (cx + w / 2) * W, (cy + h / 2) * H]
            for g, t in zip(got, (x0, y0, x1, y1)):
                assert abs(g - t) < 0.01, (e["image"], ln)
        # Rectangles neither overlap nor touch.
        bs = e["boxes"]
        for i in range(len(bs)):
            for j in range(i):
                a, b = bs[i], bs[j]
                assert a[1] >= b[3] or b[1] >= a[3] or a[2] >= b[4] or b[2] >= a[4]
        im = Image.open(out / e["image"])
        assert im.mode == "RGB" and 200 <= min(im.size) and max(im.size) <= 400
        # The rectangle's colour, in its middle, survives the encoding.
        px = im.load()
        for c, x0, y0, x1, y1 in bs:
            got = px[(x0 + x1) // 2, (y0 + y1) // 2]
            assert max(abs(g - t) for g, t in zip(got, m["palette"][c])) <= 6


def test_corrupt_files_unreadable(tmp_path):
    out = tmp_path / "c"
    r = subprocess.run(MK + [str(out), "--images", "3", "--corrupt", "3", "--min-side", "96", "--max-side", "128"],
                       check=True, capture_output=True, text=True)
    bad = r.stdout.split()
    assert len(bad) == 3 and all(p.endswith(".jpg") for p in bad)
    assert_none_decode(bad)


def test_bad_arguments(tmp_path):
    for args in (["--kind", "scenes", "--classes", "9"], ["--images", "2", "--bad-labels", "2", "--polygons", "1"],
                 ["--min-side", "32"]):
        r = subprocess.run(MK + [str(tmp_path / "x")] + args, capture_output=True, text=True)
        assert r.returncode == 2, args
