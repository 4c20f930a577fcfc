"""daemon/pixels/instmask.c against Ultralytics' and cv2's own functions
(make check-ultralytics), through build/tests/instmask: cv2.fillPoly of
integer polygons (inside, across and outside the image, self-crossing),
resample_segments to Ultralytics' point counts, and polygons2masks_overlap
with mask_ratio 1, 2, 4 and 8: every pixel and the area order equal.
Polygons whose areas tie are left out of the order check: numpy's argsort
there is its SIMD sort, which is not stable and differs by CPU (stoker
breaks ties by index; docs/ultralytics.md)."""

import os
import pathlib
import subprocess

import cv2
import numpy as np
import pytest
from ultralytics.data.utils import polygon2mask, polygons2masks_overlap
from ultralytics.utils.ops import resample_segments

TOOL = pathlib.Path(os.environ.get("STOKER_BUILD", "build")) / "tests" / "instmask"


def _run(args, data):
    return subprocess.run([str(TOOL)] + [str(a) for a in args], input=data, capture_output=True,
                          check=True).stdout


def _check_overlaps(out, wants):
    """The tool's overlap outputs, one (mask, order) after another, equal
    to the wanted ones; the number of wanted masks with any object."""
    at, nonzero = 0, 0
    for sw, sh, want, order in wants:
        got = np.frombuffer(out[at:at + sw * sh * 2], np.uint16).reshape(sh, sw)
        at += sw * sh * 2
        assert np.array_equal(np.frombuffer(out[at:at + 4 * len(order)], np.uint32), order)
        at += 4 * len(order)
        assert np.array_equal(got, want)
        nonzero += int(want.any())
    assert at == len(out)
    return nonzero


@pytest.mark.parametrize("seed", range(3))
def test_fill_is_cv2_fillpoly(seed):
    rng = np.random.default_rng(seed)
    for t in range(150):
        w, h = int(rng.integers(4, 160)), int(rng.integers(4, 160))
        n = int(rng.integers(1, 14))
        lo = 0 if t % 3 == 0 else -30
        pts = np.stack([rng.integers(lo, w - lo, n), rng.integers(lo, h - lo, n)], 1).astype(np.int32)
        want = np.zeros((h, w), np.uint8)
        cv2.fillPoly(want, [pts], color=1)
        got = np.frombuffer(_run(["fill", w, h], np.uint32(n).tobytes() + pts.tobytes()), np.uint8)
        assert np.array_equal(got.reshape(h, w), want), (w, h, pts.tolist())


def test_resample_is_ultralytics():
    rng = np.random.default_rng(7)
    for _ in range(120):
        n = int(rng.integers(1, 60))
        m = max(n, int(rng.choice([n, n + 1, 50, 100, 1000, 1001])))
        s = rng.random((n, 2)).astype(np.float32)
        if rng.random() < 0.5:  # pixels, partly outside
            s = (s * rng.choice([10, 640, 5000]) - rng.choice([0, 30, 700])).astype(np.float32)
        want = resample_segments([s.copy()], m)[0]
        got = np.frombuffer(_run(["resample", m], np.uint32(n).tobytes() + s.tobytes()), np.float32)
        assert np.array_equal(got.reshape(m, 2), want), (n, m)


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
def test_overlap_masks_are_ultralytics(ratio):
    rng = np.random.default_rng(ratio)
    checked = 0
    for _ in range(60):
        w, h = ratio * int(rng.integers(2, 40)), ratio * int(rng.integers(2, 40))
        count = int(rng.integers(1, 6))
        segs = np.stack([np.stack([rng.random(40) * w * 1.1 - w * 0.05, rng.random(40) * h * 1.1 - h * 0.05], 1)
                         for _ in range(count)]).astype(np.float32)
        areas = [polygon2mask((h, w), [s.reshape(-1)], downsample_ratio=ratio).sum() for s in segs]
        if len(set(areas)) < len(areas):
            continue
        want, order = polygons2masks_overlap((h, w), segs, downsample_ratio=ratio)
        data = np.uint32(count).tobytes() + b"".join(np.uint32(len(s)).tobytes() + s.tobytes() for s in segs)
        out = _run(["overlap", w, h, ratio], data)
        cells = (h // ratio) * (w // ratio)
        got = np.frombuffer(out[:cells * 2], np.uint16).reshape(h // ratio, w // ratio)
        assert np.array_equal(np.frombuffer(out[cells * 2:], np.uint32), order)
        assert np.array_equal(got, want)
        checked += 1
    assert checked > 30


def test_overlap_masks_of_small_polygons_in_turn():
    """Polygons that cover a few rows anywhere (the raster makes only their rows), images of
    growing and shrinking sizes one after another through one struct instmask, as a worker's."""
    rng = np.random.default_rng(7)
    args, data, wants = [], b"", []
    while len(wants) < 40:
        ratio = int(rng.choice([1, 2, 4, 8]))
        w, h = ratio * int(rng.integers(2, 60)), ratio * int(rng.integers(2, 60))
        count = int(rng.integers(1, 8))
        segs = []
        for _ in range(count):
            cx, cy = rng.random() * w * 1.2 - w * 0.1, rng.random() * h * 1.2 - h * 0.1
            r = 0.5 + rng.random() * min(w, h) / 4
            ang = np.sort(rng.random(12) * 2 * np.pi)
            segs.append(np.stack([cx + r * np.cos(ang), cy + r * np.sin(ang)], 1))
        segs = np.stack(segs).astype(np.float32)
        areas = [polygon2mask((h, w), [s.reshape(-1)], downsample_ratio=ratio).sum() for s in segs]
        if len(set(areas)) < len(areas):
            continue
        want, order = polygons2masks_overlap((h, w), segs, downsample_ratio=ratio)
        wants.append((w // ratio, h // ratio, want, order))
        args += [w, h, ratio]
        data += np.uint32(count).tobytes() + b"".join(np.uint32(len(s)).tobytes() + s.tobytes() for s in segs)
    assert _check_overlaps(_run(["overlap", *args], data), wants) > 30


def _zigzag(rng, w, h, n):
    """n points swinging between two rows a few pixels apart: many edges start on one row (the edge
    sort's long-row path); or, every third polygon, one vertex far above or below (its wide-span path)."""
    y = rng.integers(-5, h + 5)
    xs = rng.random(n) * w * 1.2 - w * 0.1
    if rng.random() < 0.5:
        xs = np.sort(xs)
    ys = np.where(np.arange(n) % 2 == 0, y, y + rng.integers(1, 4)).astype(np.float64)
    if rng.random() < 1 / 3:
        ys[n // 2] = rng.choice([-1, 1]) * rng.integers(10_000, 1_000_000)
    return np.stack([xs, ys], 1)


def test_fill_of_many_edges_on_a_row_and_far_vertices():
    rng = np.random.default_rng(11)
    for _ in range(60):
        w, h = int(rng.integers(4, 200)), int(rng.integers(4, 200))
        pts = _zigzag(rng, w, h, int(rng.integers(3, 400))).astype(np.int32)
        want = np.zeros((h, w), np.uint8)
        cv2.fillPoly(want, [pts], color=1)
        got = np.frombuffer(_run(["fill", w, h], np.uint32(len(pts)).tobytes() + pts.tobytes()), np.uint8)
        assert np.array_equal(got.reshape(h, w), want), (w, h, pts.tolist())


@pytest.mark.parametrize("ratio", [4, 8])
def test_overlap_masks_of_zigzags(ratio):
    """Outlines and spans on rows the downsample does not read are not drawn (ratio 4 and 8 read two
    rows in each `ratio`): thin polygons whose rows are mostly unread ones."""
    rng = np.random.default_rng(20 + ratio)
    args, data, wants = [], b"", []
    while len(wants) < 30:
        w, h = ratio * int(rng.integers(2, 30)), ratio * int(rng.integers(2, 30))
        count = int(rng.integers(1, 5))
        segs = [_zigzag(rng, w, h, int(rng.integers(3, 120))).astype(np.float32) for _ in range(count)]
        areas = [polygon2mask((h, w), [s.reshape(-1)], downsample_ratio=ratio).sum() for s in segs]
        if len(set(areas)) < len(areas):
            continue
        want, order = polygons2masks_overlap((h, w), np.array(segs, dtype=object) if len(
            {len(s) for s in segs}) > 1 else np.stack(segs), downsample_ratio=ratio)
        wants.append((w // ratio, h // ratio, want, order))
        args += [w, h, ratio]
        data += np.uint32(count).tobytes() + b"".join(np.uint32(len(s)).tobytes() + s.tobytes() for s in segs)
    _check_overlaps(_run(["overlap", *args], data), wants)


@pytest.mark.parametrize("w,h,ratio", [(2048, 1536, 1), (2048, 2048, 2)])
def test_overlap_masks_past_the_kept_rows(w, h, ratio):
    """instmask_overlap keeps each polygon's mask cells (its bounding box) between its passes up to
    4 MiB in all and rasters the rest again: polygons over the whole image (3 MiB and 1 MiB of mask
    cells each) past that bound, small ones kept after them, all in one area order."""
    rng = np.random.default_rng(w + ratio)
    segs = []
    for k in range(9):
        tall = k % 3 != 2
        cx, cy = (w / 2, h / 2) if tall else (rng.random() * w, rng.random() * h)
        rx = w * (0.5 + 0.1 * rng.random()) if tall else 5 + 40 * rng.random()
        ry = h * (0.5 + 0.1 * rng.random()) if tall else 5 + 40 * rng.random()
        ang = np.sort(rng.random(50) * 2 * np.pi)
        segs.append(np.stack([cx + rx * np.cos(ang), cy + ry * np.sin(ang)], 1))
    segs = np.stack(segs).astype(np.float32)
    areas = [polygon2mask((h, w), [s.reshape(-1)], downsample_ratio=ratio).sum() for s in segs]
    assert len(set(areas)) == len(areas)
    want, order = polygons2masks_overlap((h, w), segs, downsample_ratio=ratio)
    data = np.uint32(len(segs)).tobytes() + b"".join(np.uint32(len(s)).tobytes() + s.tobytes() for s in segs)
    out = _run(["overlap", w, h, ratio], data)
    cells = (h // ratio) * (w // ratio)
    assert np.array_equal(np.frombuffer(out[cells * 2:], np.uint32), order)
    assert np.array_equal(np.frombuffer(out[:cells * 2], np.uint16).reshape(h // ratio, w // ratio), want)
    assert len(np.unique(want)) > 5
