"""Instance geometry (daemon/pixels/instgeom.c, through build/tests/instgeom)
against Ultralytics' own functions with the same drawn parameters injected:
_compute_affine_matrix (Python's random replayed), segment2box (and
cv2.pointPolygonTest in it), RandomPerspective.apply_instances for boxes,
segments, keypoints and OBB (perspective on and off, preserve_obb),
box_candidates, Instances.clip / remove_zero_area_boxes and
clip(preserve_obb=True) with cv2.intersectConvexConvex, Mosaic's
apply_instances with a drawn layout, Instances.concatenate (MixUp),
CopyPaste's flip mode, CutMix's instances, RandomFlip with flip_idx,
Format's boxes and keypoints, xyxyxyxy2xywhr (cv2.minAreaRect and the
angle regularisation) and xywhr2xyxyxyxy; on random inputs and edge cases
(points outside the image, on its border, degenerate polygons,
all-invisible keypoints, points at infinity).

Equality is exact (the same float32 values bit for bit) everywhere but
where a test states otherwise: xywhr2xyxyxyxy (numpy's float64 sin/cos
against libm's, 1 ulp), minAreaRect's angle for polygons of zero area
(OpenCV 5 leaves some outside its [-90, 0) range; after Ultralytics'
regularisation the box is the same), CopyPaste's order among equal
overlaps (numpy's argsort is not stable on AVX-512 CPUs) and a matmul of a
single row (numpy's gemv; within one ulp). make check-ultralytics."""

import math
import random
import subprocess

import cv2
import numpy as np
import pytest
from ultralytics.data.augment import Mosaic, RandomFlip, RandomPerspective
from ultralytics.utils.instance import Instances
from ultralytics.utils.ops import (
    resample_segments,
    segment2box,
    xywhr2xyxyxyxy,
    xyxy2xywh,
    xyxyxyxy2xywhr,
)

from stoker_testutil import BUILD, OneSampleDataset

INSTGEOM = BUILD / "tests" / "instgeom"


class Geom:
    """The driver, one request a line."""

    def __init__(self):
        self.p = subprocess.Popen(
            [str(INSTGEOM)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1 << 20
        )

    def ask(self, *parts):
        self.p.stdin.write(" ".join(str(x) for x in parts) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, f"instgeom died on {parts[0]}"
        return line.split()

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def geom():
    g = Geom()
    yield g
    g.close()


def f32s(a):
    """float32 values as text that reads back to the same float32."""
    return " ".join(repr(float(v)) for v in np.asarray(a, dtype=np.float32).reshape(-1))


def as_f32(words):
    return np.asarray([float(w) for w in words], dtype=np.float32)


def set_text(n, boxes, segs, kpts):
    npts = 0 if segs is None else segs.shape[1]
    nkpt = 0 if kpts is None else kpts.shape[1]
    parts = [n, npts, nkpt, f32s(boxes)]
    if npts:
        parts.append(f32s(segs))
    if nkpt:
        parts.append(f32s(kpts))
    return " ".join(str(p) for p in parts if p != "")


def parse_set(words):
    n, npts, nkpt = (int(w) for w in words[:3])
    v = as_f32(words[3:])
    boxes = v[: n * 4].reshape(n, 4)
    segs = v[n * 4 : n * 4 + n * npts * 2].reshape(n, npts, 2)
    kpts = v[n * 4 + n * npts * 2 :].reshape(n, nkpt, 3)
    assert len(v) == n * 4 + n * npts * 2 + n * nkpt * 3
    return boxes, segs, kpts


def same(a, b, what):
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    ok = (a == b) | (np.isnan(a) & np.isnan(b))
    assert ok.all(), (what, np.argwhere(~ok)[:5], a[~ok][:5], b[~ok][:5])


# ---- polygons ----


def random_polygon(rng, n, lo, hi):
    kind = rng.integers(0, 4)
    if kind == 0:  # scattered
        return rng.uniform(lo, hi, (n, 2)).astype(np.float32)
    if kind == 1:  # a star-shaped polygon around a centre
        c = rng.uniform(lo, hi, 2)
        r = rng.uniform(0.01, 1.0, n) * (hi - lo) / 3
        t = np.sort(rng.uniform(0, 2 * np.pi, n))
        return (c + np.stack([r * np.cos(t), r * np.sin(t)], 1)).astype(np.float32)
    if kind == 2:  # integers, duplicates likely
        return rng.integers(int(lo), int(hi), (n, 2)).astype(np.float32)
    a = rng.uniform(lo, hi, 2)  # collinear
    d = rng.uniform(-20, 20, 2)
    return (a + np.outer(rng.integers(-5, 6, n), d)).astype(np.float32)


def test_segment2box(geom):
    rng = np.random.default_rng(22)
    W, H = 640, 480
    polys = [
        np.float32([[10, 10], [100, 10], [100, 100]]),  # inside
        np.float32([[-10, -10], [-1, -5], [-3, -20]]),  # outside
        np.float32([[0, 0], [W, 0], [W, H], [0, H]]),  # the border exactly
        np.float32([[-100, -100], [W + 100, -100], [W + 100, H + 100], [-100, H + 100]]),  # covers the image
        np.float32([[-50, 240], [320, -50], [W + 50, 240], [320, H + 50]]),  # a diamond through the sides
        np.float32([[320, 240]]),
        np.float32([[-5, 5], [-5, 5]]),
        np.float32([[-10, 100], [700, 100]]),  # a segment across
        np.float32([[0, 0], [0, 0], [0, 0]]),
        np.float32([[W, H], [W + 1, H + 1], [W, H + 2]]),
        np.float32([[-1, 0], [0, -1], [1, 0], [0, 1]]),  # around a corner
    ]
    for _ in range(600):
        polys.append(random_polygon(rng, int(rng.integers(1, 40)), -200, 900))
    for p in polys:
        theirs = segment2box(p.copy(), W, H)
        ours = as_f32(geom.ask("B", W, H, len(p), f32s(p)))
        same(ours, theirs, f"segment2box {p.tolist()[:4]}")


def test_point_in_polygon(geom):
    rng = np.random.default_rng(23)
    for _ in range(300):
        p = random_polygon(rng, int(rng.integers(1, 12)), 0, 20)
        pts = list(rng.integers(-2, 22, (6, 2)).astype(np.float32)) + [p[0], (p[0] + p[-1]) / 2]
        for q in pts:
            theirs = cv2.pointPolygonTest(p, (float(q[0]), float(q[1])), False)
            ours = int(geom.ask("T", f32s(q), len(p), f32s(p))[0])
            assert ours == int(theirs), (p.tolist(), q.tolist())


def test_box_candidates(geom):
    rng = np.random.default_rng(24)
    for _ in range(400):
        b1 = np.sort(rng.uniform(0, 100, (2, 2)), 0).T.reshape(-1)[[0, 2, 1, 3]].astype(np.float32)
        b2 = b1.copy()
        b2[2:] = b2[:2] + (b2[2:] - b2[:2]) * np.float32(rng.choice([0.01, 0.05, 0.3, 1.0, 0.0]))
        if rng.random() < 0.2:
            b2[3] = b2[1] + np.float32(rng.choice([2.0, 2.0001, 0.0]))
        thr = float(rng.choice([0.01, 0.1]))
        theirs = bool(RandomPerspective.box_candidates(b1[:, None], b2[:, None], area_thr=thr)[0])
        ours = geom.ask("Q", f32s(b1), f32s(b2), thr)[0] == "1"
        assert ours == theirs, (b1, b2, thr)


# ---- RandomPerspective with the drawn matrix injected ----


def instances_for(rng, task, n, W, H):
    """Instances in pixels (xyxy) as Mosaic leaves them, with their classes."""
    if task == "segment" or task == "obb":
        npts = 100 if task == "obb" else int(rng.choice([1000, 30]))
        segs = []
        for _ in range(n):
            if task == "obb":
                c = rng.uniform(-0.2 * W, 1.2 * W), rng.uniform(-0.2 * H, 1.2 * H)
                wh = rng.uniform(0, 300, 2)
                p = cv2.boxPoints((c, (float(wh[0]), float(wh[1])), float(rng.uniform(-180, 180))))
            else:
                p = random_polygon(rng, int(rng.integers(3, 40)), -0.2 * W, 1.2 * W)
            segs.append(resample_segments([p.astype(np.float32)], npts)[0])
        segs = np.stack(segs) if n else np.zeros((0, npts, 2), np.float32)
        boxes = np.stack([segment2box(s, W, H) for s in segs]) if n else np.zeros((0, 4), np.float32)
        return boxes.astype(np.float32), segs, None
    x1y1 = rng.uniform(-0.1 * W, W, (n, 2))
    wh = rng.uniform(0, 0.5 * W, (n, 2)) * (rng.random((n, 1)) < 0.9)
    boxes = np.concatenate([x1y1, x1y1 + wh], 1).astype(np.float32)
    if task == "pose":
        nk = 17
        kp = rng.uniform(-0.2 * W, 1.2 * W, (n, nk, 3)).astype(np.float32)
        kp[..., 2] = rng.choice([0.0, 1.0, 2.0], (n, nk))
        if n:
            kp[0, :, 2] = 0  # all invisible
        return boxes, None, kp
    return boxes, None, None


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
@pytest.mark.parametrize("perspective", [0.0, 0.0005])
def test_perspective(geom, task, perspective):
    rng = np.random.default_rng(25 + len(task) + int(perspective * 1e4))
    random.seed(26)
    kept = dropped = hidden = 0
    for trial in range(40):
        W0, H0 = int(rng.integers(200, 1300)), int(rng.integers(200, 1300))  # the canvas (mosaic 2x)
        size = (int(rng.integers(100, 700)), int(rng.integers(100, 700)))
        rp = RandomPerspective(
            degrees=float(rng.choice([0, 10, 180])),
            translate=0.1,
            scale=float(rng.choice([0.5, 0.9])),
            shear=float(rng.choice([0, 5])),
            perspective=perspective,
        )
        M, s = rp._compute_affine_matrix(np.zeros((H0, W0, 3), np.uint8), size)
        n = int(rng.integers(0, 12))
        boxes, segs, kpts = instances_for(rng, task, n, W0, H0)
        cls = np.arange(n, dtype=np.float32).reshape(-1, 1)
        inst = Instances(boxes.copy(), None if segs is None else segs.copy(), None if kpts is None else kpts.copy(),
                         bbox_format="xyxy", normalized=False)
        labels = {"cls": cls, "instances": inst}
        params = {"M": M, "scale": s, "orig_shape": (H0, W0), "size": size}
        out = rp.apply_instances(labels, params)
        words = geom.ask("P", size[0], size[1], int(bool(perspective)), 0, repr(float(np.float32(s))), f32s(M),
                         set_text(n, boxes, segs, kpts))
        semi = words.index(";")
        keep = np.asarray([w == "1" for w in words[:semi]], bool)
        ob, osg, okp = parse_set(words[semi + 1 :])
        what = f"{task} trial {trial}"
        kept += int(keep.sum())
        dropped += int((~keep).sum())
        if kpts is not None and keep.any():
            hidden += int(((kpts[keep][..., 2] > 0) & (okp[..., 2] == 0)).sum())
        same(cls[keep], out["cls"], what + " kept")
        same(ob, out["instances"].bboxes, what + " boxes")
        if segs is not None and n:
            same(osg, out["instances"].segments, what + " segments")
        if kpts is not None:
            same(okp, out["instances"].keypoints, what + " keypoints")
    # the cases cover both outcomes of the candidate rule and the visibility rule
    assert kept > 20 and dropped > 20, (kept, dropped)
    assert task != "pose" or hidden > 0


def test_scale_is_float32(geom):
    """box_candidates compares against the original boxes times the drawn
    scale, a Python float multiplied into the float32 boxes."""
    rp = RandomPerspective()
    M = np.eye(3, dtype=np.float32)
    boxes = np.float32([[0, 0, 10, 10.5], [1, 1, 3.3, 3.3]])
    for s in (0.3, 1 / 3, 0.99999999, 1.7):
        inst = Instances(boxes.copy(), None, None, bbox_format="xyxy", normalized=False)
        out = rp.apply_instances({"cls": np.zeros((2, 1), np.float32), "instances": inst},
                                 {"M": M, "scale": s, "orig_shape": (20, 20), "size": (20, 20)})
        words = geom.ask("P", 20, 20, 0, 0, repr(s), f32s(M), set_text(2, boxes, None, None))
        ob, _, _ = parse_set(words[words.index(";") + 1 :])
        same(ob, out["instances"].bboxes, f"scale {s}")


# ---- mosaic: a tile's placement, the final clip ----


def test_place(geom):
    rng = np.random.default_rng(27)
    for trial in range(200):
        task = ["detect", "segment", "pose"][trial % 3]
        n = int(rng.integers(0, 6))
        w, h = int(rng.integers(1, 800)), int(rng.integers(1, 800))
        padw, padh = int(rng.integers(-800, 1300)), int(rng.integers(-800, 1300))
        xywh = rng.uniform(0, 1, (n, 4)).astype(np.float32)
        segs = rng.uniform(-0.01, 1.01, (n, 1000, 2)).astype(np.float32) if task == "segment" else None
        kpts = None
        if task == "pose":
            kpts = rng.uniform(0, 1, (n, 5, 3)).astype(np.float32)
            kpts[..., 2] = rng.choice([0.0, 1.0], (n, 5))
        inst = Instances(xywh.copy(), None if segs is None else segs.copy(), None if kpts is None else kpts.copy(),
                         bbox_format="xywh", normalized=True)
        out = Mosaic._update_labels({"instances": inst}, padw, padh, (h, w))["instances"]
        ob, osg, okp = parse_set(geom.ask("L", w, h, padw, padh, set_text(n, xywh, segs, kpts)))
        same(ob, out.bboxes, "place boxes")
        if segs is not None and n:
            same(osg, out.segments, "place segments")
        if kpts is not None:
            same(okp, out.keypoints, "place keypoints")


def test_clip_and_zero_area(geom):
    rng = np.random.default_rng(28)
    for trial in range(200):
        task = ["detect", "segment", "pose"][trial % 3]
        n = int(rng.integers(0, 8))
        W, H = int(rng.integers(1, 1300)), int(rng.integers(1, 1300))
        x1y1 = rng.uniform(-0.5 * W, 1.3 * W, (n, 2))
        boxes = np.concatenate([x1y1, x1y1 + rng.uniform(0, 0.5 * W, (n, 2))], 1).astype(np.float32)
        segs = rng.uniform(-0.5 * W, 1.5 * W, (n, 50, 2)).astype(np.float32) if task == "segment" else None
        kpts = None
        if task == "pose":
            kpts = rng.uniform(-0.5 * W, 1.5 * W, (n, 4, 3)).astype(np.float32)
            kpts[..., 2] = rng.choice([0.0, 1.0, 2.0], (n, 4))
        inst = Instances(boxes.copy(), None if segs is None else segs.copy(), None if kpts is None else kpts.copy(),
                         bbox_format="xyxy", normalized=False)
        inst.clip(W, H)
        inst.remove_zero_area_boxes()
        ob, osg, okp = parse_set(geom.ask("K", W, H, set_text(n, boxes, segs, kpts)))
        same(ob, inst.bboxes, "clip boxes")
        if segs is not None and len(ob):
            same(osg, inst.segments, "clip segments")
        if kpts is not None:
            same(okp, inst.keypoints, "clip keypoints")


# ---- flips ----


@pytest.mark.parametrize("direction", ["horizontal", "vertical"])
def test_flip(geom, direction):
    rng = np.random.default_rng(29 if direction == "horizontal" else 30)
    flip_idx = [0, 2, 1, 4, 3, 6, 5]
    for trial in range(120):
        task = ["detect", "segment", "pose", "pose-noidx"][trial % 4]
        n = int(rng.integers(0, 6))
        W, H = int(rng.integers(1, 1300)), int(rng.integers(1, 1300))
        normalized = trial % 5 == 0
        scale = 1.0 if normalized else float(max(W, H))
        x1y1 = rng.uniform(0, 0.7, (n, 2)) * scale
        boxes = np.concatenate([x1y1, x1y1 + rng.uniform(0, 0.3, (n, 2)) * scale], 1).astype(np.float32)
        segs = (rng.uniform(0, 1, (n, 20, 2)) * scale).astype(np.float32) if task == "segment" else None
        kpts = None
        if task.startswith("pose"):
            kpts = (rng.uniform(0, 1, (n, 7, 3)) * scale).astype(np.float32)
            kpts[..., 2] = rng.choice([0.0, 1.0, 2.0], (n, 7))
        idx = flip_idx if task == "pose" else None
        inst = Instances(boxes.copy(), None if segs is None else segs.copy(), None if kpts is None else kpts.copy(),
                         bbox_format="xyxy", normalized=normalized)
        xywh = xyxy2xywh(boxes.copy()) if n else boxes.reshape(0, 4)
        rf = RandomFlip(p=1.0, direction=direction, flip_idx=idx)
        hh, ww = (1, 1) if normalized else (H, W)
        params = {"flip": True, "h": hh, "w": ww, "direction": direction, "flip_idx": idx}
        out = rf.apply_instances({"instances": inst}, params)["instances"]
        extent = ww if direction == "horizontal" else hh
        idx_text = f"{len(idx)} {' '.join(map(str, idx))}" if idx else "0"
        ob, osg, okp = parse_set(geom.ask("F", int(direction == "vertical"), extent, idx_text,
                                          set_text(n, xywh, segs, kpts)))
        same(ob, out.bboxes, "flip boxes (xywh)")
        if segs is not None and n:
            same(osg, out.segments, "flip segments")
        if kpts is not None:
            same(okp, out.keypoints, "flip keypoints")


# ---- oriented boxes ----


def obb_polygons(rng, count):
    polys = [
        np.float32([[0, 0], [10, 0], [10, 5], [0, 5]]),
        np.float32([[0, 0], [10, 2], [9, 7], [-1, 5]]),
        np.float32([[5, 5], [5, 5], [5, 5], [5, 5]]),  # a point
        np.float32([[0, 0], [4, 4], [4, 4], [0, 0]]),  # a segment
        np.float32([[100, 100], [200, 100], [200, 200], [100, 200]]),  # a square: w == h
    ]
    for k in range(count):
        kind = k % 4
        if kind == 0:  # a rotated rectangle's corners, as a label file has them
            c = rng.uniform(0, 1024, 2)
            wh = rng.uniform(1, 300, 2)
            p = cv2.boxPoints(((float(c[0]), float(c[1])), (float(wh[0]), float(wh[1])), float(rng.uniform(-180, 180))))
        elif kind == 1:  # the same resampled to the dataset's 100 points
            c = rng.uniform(0, 1024, 2)
            wh = rng.uniform(1, 300, 2)
            p = cv2.boxPoints(((float(c[0]), float(c[1])), (float(wh[0]), float(wh[1])), float(rng.uniform(-180, 180))))
            p = resample_segments([p.astype(np.float32)], 100)[0]
        elif kind == 2:  # any quadrilateral (a transformed, clipped box)
            p = rng.uniform(-50, 700, (4, 2))
        else:  # integer corners: ties between calipers
            p = rng.integers(0, 12, (int(rng.integers(3, 9)), 2))
        polys.append(np.asarray(p, np.float32))
    return polys


def test_min_area_rect_and_xywhr(geom):
    rng = np.random.default_rng(31)
    for p in obb_polygons(rng, 1200):
        (cx, cy), (w, h), a = cv2.minAreaRect(p)
        ours = as_f32(geom.ask("A", len(p), f32s(p)))
        theirs_x = xyxyxyxy2xywhr(p.reshape(1, -1, 2))[0]
        ours_x = np.asarray([float(v) for v in geom.ask("O", len(p), f32s(p))])
        if w * h > 0:
            same(ours, [cx, cy, w, h, a], f"minAreaRect {p.tolist()}")
            assert np.array_equal(ours_x, theirs_x), (p.tolist(), ours_x, theirs_x)
        else:
            # zero area: OpenCV 5 leaves some angles outside [-90, 0) (a half
            # or quarter turn away); centre and size are the same, and after
            # Ultralytics' regularisation so is the box, up to the rounding
            # of the turn (1e-6 rad)
            same(ours[:2], [cx, cy], f"minAreaRect centre {p.tolist()}")
            assert sorted(ours[2:4].tolist()) == sorted(np.float32([w, h]).tolist()), p.tolist()
            assert np.array_equal(ours_x[:4], theirs_x[:4]), (p.tolist(), ours_x, theirs_x)
            d = (ours_x[4] - theirs_x[4]) % math.pi
            assert min(d, math.pi - d) < 1e-6, (p.tolist(), ours_x, theirs_x)


def test_xywhr_torch_float32(geom):
    """Format hands the segments to xyxyxyxy2xywhr as a float32 tensor: the
    float64 result cast to float32."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(32)
    polys = [p for p in obb_polygons(rng, 40) if len(p) == 4]
    theirs = xyxyxyxy2xywhr(torch.from_numpy(np.stack(polys))).numpy()
    ours = np.stack([np.asarray([float(v) for v in geom.ask("O", 4, f32s(p))]) for p in polys]).astype(np.float32)
    keep = np.asarray([cv2.minAreaRect(p)[1][0] * cv2.minAreaRect(p)[1][1] > 0 for p in polys])
    same(ours[keep], theirs[keep], "xywhr float32")


def test_corners(geom):
    rng = np.random.default_rng(33)
    boxes = np.concatenate([rng.uniform(-100, 1100, (300, 2)), rng.uniform(0, 400, (300, 2)),
                            rng.uniform(-4, 4, (300, 1))], 1)
    boxes[:5, 4] = [0, math.pi / 2, -math.pi / 4, 3 * math.pi / 4, math.pi]
    theirs = xywhr2xyxyxyxy(boxes).reshape(-1, 8)
    for b, t in zip(boxes, theirs):
        ours = np.asarray([float(v) for v in geom.ask("C", " ".join(repr(float(v)) for v in b))])
        # numpy's float64 sin/cos (its own SIMD code) and libm's agree to an
        # ulp: 1e-9 px on coordinates below 2000
        assert np.allclose(ours, t, rtol=0, atol=1e-9), (b, ours, t)


# ---- CopyPaste, flip mode ----


def check_copy_paste_choice(ioa, ours, theirs, trial):
    """CopyPaste's choice: ours (stoker's indices) must be the candidates (ioa below 0.30 with
    every original) in the stable order of their largest overlap, the first len(ours) of them.
    Ultralytics' own (theirs) must be the same set, unless the cut falls between equal
    overlaps (numpy's argsort orders those its own way), then the same overlaps. True when
    the sets are compared (not a tie)."""
    k = len(ours)
    idx = np.nonzero((ioa < 0.30).all(1))[0]
    idx = idx[np.argsort(ioa.max(1)[idx], kind="stable")]
    assert ours == idx[:k].tolist(), (trial, ours, idx[:k])
    worst = ioa.max(1)
    if k < len(idx) and k > 0 and worst[idx[k - 1]] == worst[idx[k]]:
        assert sorted(worst[ours].tolist()) == sorted(worst[theirs].tolist())
        return False
    assert sorted(ours) == sorted(theirs.tolist()), (trial, ours, theirs)
    return True


def test_copy_paste_flip(geom):
    """CopyPaste(mode="flip"): the same eligible mirrors (bbox_ioa below 0.30
    with every original), sorted by their largest overlap; Ultralytics'
    np.argsort orders equal overlaps as numpy's sort does on this CPU
    (x86-simd-sort is not stable), instgeom in index order: so the choice is
    compared with the stable order of Ultralytics' own overlaps, and with
    Ultralytics' choice itself where no tie straddles the cut. The pasted
    instances are compared through Ultralytics' apply_instances given that
    choice."""
    from ultralytics.data.augment import CopyPaste
    from ultralytics.utils.metrics import bbox_ioa

    rng = np.random.default_rng(34)
    pasted = same_choice = 0
    for trial in range(150):
        task = "pose-seg" if trial % 4 == 3 else "segment"
        n = int(rng.integers(1, 30))
        W, H = int(rng.integers(50, 1300)), int(rng.integers(50, 1300))
        p = float(rng.choice([0.1, 0.5, 1.0, 0.25]))
        x1y1 = rng.uniform(-0.1 * W, W, (n, 2)) * [1, H / W]
        wh = rng.uniform(0, 0.4, (n, 2)) * [W, H] * (rng.random((n, 1)) < 0.95)
        boxes = np.concatenate([x1y1, x1y1 + wh], 1).astype(np.float32)
        if trial % 10 == 0:  # a symmetric layout: mirrors land on originals
            boxes[:, [0, 2]] = np.sort(np.stack([boxes[:, 0], W - boxes[:, 0]], 1), 1)
        segs = (rng.uniform(0, 1, (n, 30, 2)) * [W, H]).astype(np.float32)
        kpts = None
        if task == "pose-seg":
            kpts = (rng.uniform(0, 1, (n, 3, 3)) * [W, H, 1]).astype(np.float32)
        cls = np.arange(n, dtype=np.float32).reshape(-1, 1)

        def labels():
            inst = Instances(boxes.copy(), segs.copy(), None if kpts is None else kpts.copy(),
                             bbox_format="xyxy", normalized=False)
            return {"img": np.zeros((H, W, 3), np.uint8), "cls": cls.copy(), "instances": inst}

        cp = CopyPaste(p=p, mode="flip")
        lab = labels()
        params = cp.get_params(lab)
        words = geom.ask("X", W, repr(p), set_text(n, boxes, segs, kpts))
        semi = words.index(";")
        k = int(words[0])
        ours_sel = [int(w) for w in words[1:semi]]
        assert len(ours_sel) == k == len(params["selected"]), (trial, ours_sel, params["selected"])
        # the stable order of Ultralytics' own overlaps
        mirrored = boxes.copy()
        mirrored[:, [0, 2]] = np.float32(W) - boxes[:, [2, 0]]
        same_choice += check_copy_paste_choice(bbox_ioa(mirrored, boxes), ours_sel, params["selected"], trial)
        params["selected"] = np.asarray(ours_sel, dtype=np.int64)
        out = cp.apply_instances(lab, params)
        ob, osg, okp = parse_set(words[semi + 1 :])
        same(ob, out["instances"].bboxes, f"copy_paste boxes {trial}")
        same(osg, out["instances"].segments, f"copy_paste segments {trial}")
        if kpts is not None:
            same(okp, out["instances"].keypoints, f"copy_paste keypoints {trial}")
        pasted += k
    assert pasted > 50 and same_choice > 50, (pasted, same_choice)


def test_copy_paste_mixup(geom):
    """CopyPaste(mode="mixup"): the other image's instances whose bbox_ioa
    with every one of the image's is below 0.30, by their largest overlap,
    the first round(p * eligible) (the order among equal overlaps as in
    test_copy_paste_flip), then apply_instances: Instances.concatenate of
    the image's and the chosen ones (instgeom_cat), segments of different
    point counts included."""
    from ultralytics.data.augment import CopyPaste
    from ultralytics.utils.metrics import bbox_ioa

    rng = np.random.default_rng(35)
    pasted = same_choice = 0
    for trial in range(150):
        S = int(rng.integers(50, 1300))
        p = float(rng.choice([0.1, 0.5, 1.0, 0.25]))
        sets = []
        for which in range(2):
            n = int(rng.integers(1 - which, 25))
            npts = int(rng.choice([30, 30, 41])) if which else 30
            x1y1 = rng.uniform(-0.1 * S, S, (n, 2))
            wh = rng.uniform(0, 0.3, (n, 2)) * S * (rng.random((n, 1)) < 0.95)
            boxes = np.concatenate([x1y1, x1y1 + wh], 1).astype(np.float32)
            segs = (rng.uniform(0, S, (n, npts, 2))).astype(np.float32)
            cls = np.arange(n, dtype=np.float32).reshape(-1, 1) + 100 * which
            sets.append((n, npts, boxes, segs, cls))

        def labels(k):
            n, npts, boxes, segs, cls = sets[k]
            inst = Instances(boxes.copy(), segs.copy(), None, bbox_format="xyxy", normalized=False)
            return {"img": np.zeros((S, S, 3), np.uint8), "cls": cls.copy(), "instances": inst}

        cp = CopyPaste(OneSampleDataset(labels(1)), p=p, mode="mixup")
        lab = labels(0)
        params = cp.get_params(lab)
        (n, npts, boxes, segs, _), (n2, npts2, boxes2, segs2, _) = sets
        text2 = set_text(n2, boxes2, segs2, None) if n2 else f"0 {npts2} 0"
        words = geom.ask("Y", repr(p), set_text(n, boxes, segs, None), text2)
        k = int(words[0])
        ours_sel = [int(w) for w in words[1:]]
        assert len(ours_sel) == k == len(params["selected"]), (trial, ours_sel, params["selected"])
        if n2:
            same_choice += check_copy_paste_choice(bbox_ioa(boxes2, boxes), ours_sel, params["selected"], trial)
        params["selected"] = np.asarray(ours_sel, dtype=np.int64)
        out = cp.apply_instances(lab, params)
        if k:
            chosen = set_text(k, boxes2[ours_sel], segs2[ours_sel], None)
            ob, osg, _ = parse_set(geom.ask("J", 2, set_text(n, boxes, segs, None), chosen))
            same(ob, out["instances"].bboxes, f"copy_paste mixup boxes {trial}")
            same(osg, out["instances"].segments, f"copy_paste mixup segments {trial}")
            want_cls = np.concatenate([sets[0][4], sets[1][4][ours_sel]])
            assert np.array_equal(out["cls"], want_cls)
        pasted += k
    assert pasted > 50 and same_choice > 50, (pasted, same_choice)


# ---- the chain: Mosaic's instances, MixUp's concatenation, Format ----


class _Dataset:
    cache = None
    use_obb = False


def dataset_labels(rng, task, n, w, h, npts):
    """One sample's labels as YOLODataset.update_labels_info leaves them:
    normalised xywh boxes, segments resampled to npts, keypoints."""
    xywh = np.concatenate([rng.uniform(0, 1, (n, 2)), rng.uniform(0, 0.6, (n, 2))], 1).astype(np.float32)
    segs = None
    if task in ("segment", "obb"):
        segs = np.stack([resample_segments([rng.uniform(-0.01, 1.01, (int(rng.integers(3, 12)), 2)).astype(np.float32)],
                                           npts)[0] for _ in range(n)]) if n else np.zeros((0, npts, 2), np.float32)
    kpts = None
    if task == "pose":
        kpts = rng.uniform(0, 1, (n, 5, 3)).astype(np.float32)
        kpts[..., 2] = rng.choice([0.0, 1.0, 2.0], (n, 5))
    return xywh, segs, kpts


@pytest.mark.parametrize("task", ["detect", "segment", "pose"])
def test_mosaic_instances(geom, task):
    """Mosaic.apply_instances with a drawn layout injected equals each tile
    placed (instgeom_place), the four concatenated (instgeom_cat: segments
    of unequal point counts resampled to the longest), clipped to the
    canvas and zero-area boxes removed."""
    rng = np.random.default_rng(35 + len(task))
    imgsz = 320
    mosaic = Mosaic(_Dataset(), imgsz=imgsz, p=1.0, n=4)
    removed = 0
    for trial in range(40):
        s = imgsz
        yc, xc = (int(rng.uniform(s // 2, 3 * s // 2)) for _ in range(2))
        layout, texts = [], []
        for i in range(4):
            w, h = int(rng.integers(40, imgsz + 1)), int(rng.integers(40, imgsz + 1))
            n = int(rng.integers(0, 6))
            # an image without objects has 1000 (update_labels_info), a long polygon makes it longer
            npts = int(rng.choice([1000, 1000, 1013])) if task == "segment" and n else 1000
            xywh, segs, kpts = dataset_labels(rng, task, n, w, h, npts)
            inst = Instances(xywh.copy(), None if segs is None else segs.copy(),
                             None if kpts is None else kpts.copy(), bbox_format="xywh", normalized=True)
            padw, padh = [(xc - w, yc - h), (xc, yc - h), (xc - w, yc), (xc, yc)][i]
            layout.append({"labels_patch": {"im_file": "x", "ori_shape": (h, w), "cls": np.zeros((n, 1), np.float32),
                                            "instances": inst},
                           "padw": padw, "padh": padh, "img_shape": (h, w)})
            texts.append(geom.ask("L", w, h, padw, padh, set_text(n, xywh, segs, kpts)))
        out = mosaic.apply_instances({}, {"layout": layout})["instances"]
        parts = " ".join(" ".join(t) for t in texts)
        cat = geom.ask("J", 4, parts)
        ob, osg, okp = parse_set(geom.ask("K", 2 * imgsz, 2 * imgsz, " ".join(cat)))
        removed += sum(int(t[0]) for t in texts) - len(ob)
        same(ob, out.bboxes, f"mosaic boxes {trial}")
        if task == "segment" and len(ob):
            same(osg, out.segments, f"mosaic segments {trial}")
        if task == "pose":
            same(okp, out.keypoints, f"mosaic keypoints {trial}")
    assert removed > 0


def test_mixup_concatenate(geom):
    """MixUp's Instances.concatenate of two images' instances, segments of
    different point counts among them."""
    rng = np.random.default_rng(36)
    for trial in range(40):
        sets, texts = [], []
        for _ in range(2):
            n = int(rng.integers(0, 5))
            npts = int(rng.choice([1000, 1200, 30]))
            segs = rng.uniform(0, 640, (n, npts, 2)).astype(np.float32)
            boxes = rng.uniform(0, 640, (n, 4)).astype(np.float32)
            sets.append(Instances(boxes.copy(), segs.copy(), None, bbox_format="xyxy", normalized=False))
            texts.append(set_text(n, boxes, segs, None) if n else f"0 {npts} 0")
        out = Instances.concatenate(sets)
        ob, osg, _ = parse_set(geom.ask("J", 2, " ".join(texts)))
        same(ob, out.bboxes, "mixup boxes")
        if len(ob):
            same(osg, out.segments, "mixup segments")


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_format(geom, task):
    """Format's boxes (normalised xywh; OBB: xywhr of the segment from its
    float32 tensor, normalised) and keypoints."""
    from ultralytics.data.augment import Format

    rng = np.random.default_rng(37 + len(task))
    fmt = Format(bbox_format="xywh", normalize=True, return_mask=False, return_keypoint=task == "pose",
                 return_obb=task == "obb", batch_idx=True)
    for trial in range(40):
        W, H = int(rng.integers(32, 1300)), int(rng.integers(32, 1300))
        n = int(rng.integers(0, 8))
        x1y1 = rng.uniform(0, 1, (n, 2)) * [W, H]
        boxes = np.concatenate([x1y1, x1y1 + rng.uniform(0, 0.3, (n, 2)) * [W, H]], 1).astype(np.float32)
        segs = kpts = None
        if task == "obb":
            segs = np.stack([resample_segments([cv2.boxPoints(((float(a), float(b)), (float(c), float(d)), float(e)))
                                                .astype(np.float32)], 100)[0]
                             for a, b, c, d, e in zip(rng.uniform(0, W, n), rng.uniform(0, H, n),
                                                      rng.uniform(1, 200, n), rng.uniform(1, 200, n),
                                                      rng.uniform(-180, 180, n))]) if n else np.zeros((0, 100, 2),
                                                                                                        np.float32)
        if task == "segment":
            segs = (rng.uniform(0, 1, (n, 50, 2)) * [W, H]).astype(np.float32)
        if task == "pose":
            kpts = (rng.uniform(0, 1, (n, 6, 3)) * [W, H, 2]).astype(np.float32)
        inst = Instances(boxes.copy(), None if segs is None else segs.copy(), None if kpts is None else kpts.copy(),
                         bbox_format="xyxy", normalized=False)
        labels = {"img": np.zeros((H, W, 3), np.uint8), "cls": np.zeros((n, 1), np.float32), "instances": inst}
        params = fmt.get_params(labels)
        out = fmt.apply_instances(labels, params)
        words = geom.ask("G", W, H, int(task == "obb"), set_text(n, boxes, segs, kpts))
        v = as_f32(words)
        k = 5 if task == "obb" else 4
        same(v[: n * k].reshape(n, k), out["bboxes"].numpy().reshape(n, k), f"format boxes {task} {trial}")
        if task == "pose":
            same(v[n * k :].reshape(n, 6, 3), out["keypoints"].numpy(), f"format keypoints {trial}")


# ---- OBB data sets: preserve_obb ----


def test_intersect_convex(geom):
    """cv2.intersectConvexConvex of a polygon's convex hull with the image
    rectangle (as Instances.clip(preserve_obb=True) calls it), and of other
    convex pairs: the same points in the same order and the same area."""
    rng = np.random.default_rng(38)
    W, H = 640, 480
    canvas = np.float32([[0, 0], [W, 0], [W, H], [0, H]])
    cases = [(canvas, canvas), (canvas * 0.5 + 10, canvas), (canvas + 1000, canvas)]
    for k in range(600):
        if k % 3 == 2:  # rotated rectangles crossing the border, resampled as OBB segments are
            c = rng.uniform(-100, 740, 2)
            wh = rng.uniform(1, 400, 2)
            p = cv2.boxPoints(((float(c[0]), float(c[1])), (float(wh[0]), float(wh[1])), float(rng.uniform(-180, 180))))
            p = resample_segments([p.astype(np.float32)], 100)[0]
        else:
            p = random_polygon(rng, int(rng.integers(1, 20)), -300, 900)
        hull = cv2.convexHull(p).reshape(-1, 2)
        cases.append((hull, canvas) if k % 2 else (canvas, hull))
    for P, Q in cases:
        area, pts = cv2.intersectConvexConvex(P, Q)
        words = geom.ask("I", len(P), f32s(P), len(Q), f32s(Q))
        r, ours_area = int(words[0]), np.float32(float(words[1]))
        theirs = np.zeros((0, 2), np.float32) if pts is None else pts.reshape(-1, 2)
        assert ours_area == np.float32(area), (P.tolist(), Q.tolist(), ours_area, area)
        if pts is None:
            assert r <= 0 or area <= 0, (P.tolist(), Q.tolist())
        else:
            same(as_f32(words[2:]).reshape(-1, 2), theirs, f"intersection {P.tolist()[:3]}")


def obb_instances(rng, n, W, H):
    segs = []
    for _ in range(n):
        c = rng.uniform(-0.3, 1.3, 2) * [W, H]
        wh = rng.uniform(1, 0.5 * max(W, H), 2)
        p = cv2.boxPoints(((float(c[0]), float(c[1])), (float(wh[0]), float(wh[1])), float(rng.uniform(-180, 180))))
        segs.append(resample_segments([p.astype(np.float32)], 100)[0])
    segs = np.stack(segs) if n else np.zeros((0, 100, 2), np.float32)
    boxes = np.concatenate([segs.min(1), segs.max(1)], 1).astype(np.float32) if n else np.zeros((0, 4), np.float32)
    return boxes, segs


def test_clip_preserve_obb(geom):
    """Instances.clip(w, h, preserve_obb=True): crossing instances become the
    rectangle in their own orientation bounding their visible part, boxes
    the visible part's bounds, invisible ones zero."""
    rng = np.random.default_rng(39)
    changed = zeroed = 0
    for trial in range(150):
        W, H = int(rng.integers(64, 1300)), int(rng.integers(64, 1300))
        n = int(rng.integers(0, 8))
        boxes, segs = obb_instances(rng, n, W, H)
        inst = Instances(boxes.copy(), segs.copy(), None, bbox_format="xyxy", normalized=False)
        inst.clip(W, H, preserve_obb=True)
        ob, osg, _ = parse_set(geom.ask("V", W, H, set_text(n, boxes, segs, None)))
        same(ob, inst.bboxes, f"obb clip boxes {trial}")
        if n:
            same(osg, inst.segments, f"obb clip segments {trial}")
            changed += int((osg != segs).any(axis=(1, 2)).sum())
            zeroed += int((ob == 0).all(1).sum())
    assert changed > 50 and zeroed > 0, (changed, zeroed)


@pytest.mark.parametrize("perspective", [0.0, 0.0005])
def test_perspective_preserve_obb(geom, perspective):
    """RandomPerspective(preserve_obb=True).apply_instances, as an OBB data
    set's training uses it: segments not clipped to their boxes, then the
    preserve_obb clip, then the candidate rule."""
    rng = np.random.default_rng(40 + int(perspective * 1e4))
    random.seed(41)
    kept = 0
    for trial in range(60):
        W0, H0 = int(rng.integers(200, 1300)), int(rng.integers(200, 1300))
        size = (int(rng.integers(100, 700)), int(rng.integers(100, 700)))
        rp = RandomPerspective(degrees=float(rng.choice([0, 30, 180])), translate=0.1, scale=0.5,
                               shear=float(rng.choice([0, 5])), perspective=perspective, preserve_obb=True)
        M, s = rp._compute_affine_matrix(np.zeros((H0, W0, 3), np.uint8), size)
        n = int(rng.integers(0, 10))
        boxes, segs = obb_instances(rng, n, W0, H0)
        cls = np.arange(n, dtype=np.float32).reshape(-1, 1)
        inst = Instances(boxes.copy(), segs.copy(), None, bbox_format="xyxy", normalized=False)
        out = rp.apply_instances({"cls": cls, "instances": inst}, {"M": M, "scale": s, "orig_shape": (H0, W0),
                                                                   "size": size})
        words = geom.ask("P", size[0], size[1], int(bool(perspective)), 1, repr(float(np.float32(s))), f32s(M),
                         set_text(n, boxes, segs, None))
        semi = words.index(";")
        keep = np.asarray([w == "1" for w in words[:semi]], bool)
        ob, osg, _ = parse_set(words[semi + 1 :])
        same(cls[keep], out["cls"], f"obb perspective kept {trial}")
        same(ob, out["instances"].bboxes, f"obb perspective boxes {trial}")
        if len(ob):
            same(osg, out["instances"].segments, f"obb perspective segments {trial}")
        kept += len(ob)
    assert kept > 30


def test_non_finite_points(geom):
    """Points a perspective warp sent to infinity (or NaN) never crash the
    code: minAreaRect and xywhr refuse them (-EINVAL), the preserve_obb clip
    zeroes such an instance, the other functions answer."""
    inf, nan = float("inf"), float("nan")
    bad = [np.float32([[0, 0], [inf, 5], [3, 4], [1, 1]]), np.float32([[nan, 0], [1, 1], [2, 0], [3, 3]]),
           np.float32([[-inf, -inf], [inf, inf], [nan, nan]])]
    for p in bad:
        assert geom.ask("A", len(p), f32s(p))[:2] == ["error", "-22"]
        assert geom.ask("O", len(p), f32s(p))[:2] == ["error", "-22"]
        assert len(geom.ask("B", 640, 480, len(p), f32s(p))) == 4
        assert len(geom.ask("I", len(p), f32s(p), 4, f32s([[0, 0], [640, 0], [640, 480], [0, 480]]))) >= 2
        segs = resample_segments([np.nan_to_num(p, nan=5.0, posinf=1e6, neginf=-1e6)], 100)[0][None]
        segs[0, 3] = p[0 if np.isfinite(p[0]).all() else 0]
        segs[0, 7] = [inf, nan]
        ob, osg, _ = parse_set(geom.ask("V", 640, 480, set_text(1, np.float32([[0, 0, 10, 10]]), segs, None)))
        assert (ob == 0).all() and (osg == 0).all()
    # a warp whose third coordinate crosses zero inside the instances
    M = np.float32([[1, 0, 0], [0, 1, 0], [0.01, 0.0, -1.0]])
    boxes, segs = obb_instances(np.random.default_rng(42), 6, 400, 400)
    for obb in (0, 1):
        words = geom.ask("P", 320, 320, 1, obb, "1.0", f32s(M), set_text(6, boxes, segs, None))
        assert ";" in words


def test_affine_matrix(geom):
    """RandomPerspective._compute_affine_matrix's float32 M from the same
    draws: Python's random seeded, its uniform() calls replayed in its order
    and handed to instgeom_affine_matrix."""
    rng = np.random.default_rng(43)
    for trial in range(300):
        hyp = dict(degrees=float(rng.choice([0.0, 10.0, 180.0])), translate=float(rng.choice([0.0, 0.1, 0.3])),
                   scale=float(rng.choice([0.0, 0.5, 0.9])), shear=float(rng.choice([0.0, 2.0, 10.0])),
                   perspective=float(rng.choice([0.0, 0.0005, 0.001])))
        rp = RandomPerspective(**hyp)
        iw, ih = int(rng.integers(1, 1400)), int(rng.integers(1, 1400))
        size = (int(rng.integers(32, 1300)), int(rng.integers(32, 1300)))
        random.seed(trial)
        M, s = rp._compute_affine_matrix(np.zeros((ih, iw, 3), np.uint8), size)
        random.seed(trial)
        u = random.uniform
        p = hyp["perspective"]
        draws = [u(-p, p), u(-p, p), u(-hyp["degrees"], hyp["degrees"]), u(1 - hyp["scale"], 1 + hyp["scale"]),
                 u(-hyp["shear"], hyp["shear"]), u(-hyp["shear"], hyp["shear"]),
                 u(0.5 - hyp["translate"], 0.5 + hyp["translate"]), u(0.5 - hyp["translate"], 0.5 + hyp["translate"])]
        assert draws[3] == s
        ours = as_f32(geom.ask("Z", iw, ih, size[0], size[1], " ".join(repr(x) for x in draws)))
        same(ours.reshape(3, 3), M, f"affine matrix {trial} {hyp}")


# ---- CutMix ----


class _ObbDataset(_Dataset):
    use_obb = True


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_cutmix(geom, task):
    """CutMix with its drawn cut areas injected: the areas free of the
    first image's boxes and the second image's instances chosen (bbox_ioa as
    get_params computes them), and apply_instances' pasted instances
    (shifted into the area, clipped to it, preserve_obb for OBB, shifted
    back, concatenated)."""
    from ultralytics.data.augment import CutMix
    from ultralytics.utils.metrics import bbox_ioa

    rng = np.random.default_rng(44 + len(task))
    cm = CutMix(_ObbDataset() if task == "obb" else _Dataset(), p=1.0)
    pasted = free_seen = 0
    for trial in range(60):
        W, H = int(rng.integers(64, 900)), int(rng.integers(64, 900))

        def image():
            n = int(rng.integers(0, 8))
            if task == "obb":
                boxes, segs = obb_instances(rng, n, W, H)
                return n, boxes, segs, None
            x1y1 = rng.uniform(0, 1, (n, 2)) * [W, H]
            boxes = np.concatenate([x1y1, np.minimum(x1y1 + rng.uniform(0, 0.4, (n, 2)) * [W, H], [W, H])],
                                   1).astype(np.float32)
            segs = (rng.uniform(0, 1, (n, 40, 2)) * [W, H]).astype(np.float32) if task == "segment" else None
            kpts = None
            if task == "pose":
                kpts = (rng.uniform(0, 1, (n, 4, 3)) * [W, H, 2]).astype(np.float32)
            return n, boxes, segs, kpts

        n1, b1, s1, k1 = image()
        n2, b2, s2, k2 = image()
        areas = []
        for _ in range(3):  # _rand_bbox's arithmetic on drawn values
            ratio = math.sqrt(1.0 - rng.beta(1.0, 1.0))
            cw, ch = int(W * ratio), int(H * ratio)
            cx, cy = int(rng.integers(W)), int(rng.integers(H))
            areas.append((np.clip(cx - cw // 2, 0, W), np.clip(cy - ch // 2, 0, H), np.clip(cx + cw // 2, 0, W),
                          np.clip(cy + ch // 2, 0, H)))
        areas = np.asarray(areas, dtype=np.float32)
        ioa1 = bbox_ioa(areas, b1)
        free = np.nonzero(ioa1.sum(axis=1) <= 0)[0].tolist()
        words = geom.ask("U", 3, f32s(areas), set_text(n1, b1, s1, k1))
        assert [int(w) for w in words[1:]] == free and int(words[0]) == len(free), (trial, words, free)
        if not free:
            continue
        free_seen += 1
        area = areas[free[int(rng.integers(len(free)))]]
        thr = 0.01 if task in ("segment", "obb") and n1 else 0.1
        ioa2 = bbox_ioa(area[None], b2).squeeze(0)
        indexes2 = np.nonzero(ioa2 >= thr)[0]
        words = geom.ask("S", f32s(area), repr(thr), set_text(n2, b2, s2, k2))
        assert [int(w) for w in words[1:]] == indexes2.tolist(), (trial, words, indexes2)
        if not len(indexes2):
            continue

        def inst(b, s, k):
            return Instances(b.copy(), None if s is None else s.copy(), None if k is None else k.copy(),
                             bbox_format="xyxy", normalized=False)

        labels = {"img": np.zeros((H, W, 3), np.uint8), "cls": np.zeros((n1, 1), np.float32),
                  "instances": inst(b1, s1, k1),
                  "mix_labels": [{"cls": np.arange(n2, dtype=np.float32).reshape(-1, 1),
                                  "instances": inst(b2, s2, k2)}]}
        out = cm.apply_instances(labels, {"area": area, "indexes2": indexes2, "w": W, "h": H})
        pb = b2[indexes2]
        ps = None if s2 is None else s2[indexes2]
        pk = None if k2 is None else k2[indexes2]
        piece = geom.ask("W", f32s(area), int(task == "obb"), set_text(len(indexes2), pb, ps, pk))
        first = set_text(n1, b1, s1, k1) if n1 or s1 is None else f"0 {s1.shape[1]} 0"
        ob, osg, okp = parse_set(geom.ask("J", 2, first, " ".join(piece)))
        same(ob, out["instances"].bboxes, f"cutmix boxes {trial}")
        if s1 is not None and len(ob):
            same(osg, out["instances"].segments, f"cutmix segments {trial}")
        if k1 is not None:
            same(okp, out["instances"].keypoints, f"cutmix keypoints {trial}")
        pasted += len(out["instances"]) - n1
    assert free_seen > 10 and pasted > 10, (free_seen, pasted)


def test_single_keypoint(geom):
    """kpt_shape [1, 3] with one instance: numpy's matmul of a single row is
    OpenBLAS's gemv, not its sgemm, and rounds its sums in an order of its
    own; instgeom's plain float sums agree with it in about 97% of the
    coordinates and are within one float32 ulp in the rest (where more
    instances make the matmul an sgemm, the bits are equal: above)."""
    rng = np.random.default_rng(45)
    random.seed(46)
    for trial in range(200):
        rp = RandomPerspective(degrees=30.0, translate=0.1, scale=0.5, shear=5.0,
                               perspective=float(rng.choice([0.0, 0.0005])))
        M, s = rp._compute_affine_matrix(np.zeros((640, 640, 3), np.uint8), (320, 320))
        n = int(rng.integers(1, 3))
        boxes = np.float32([[100, 100, 400, 400]] * n)
        kpts = rng.uniform(-100, 700, (n, 1, 3)).astype(np.float32)
        kpts[..., 2] = 2.0
        inst = Instances(boxes.copy(), None, kpts.copy(), bbox_format="xyxy", normalized=False)
        out = rp.apply_instances({"cls": np.zeros((n, 1), np.float32), "instances": inst},
                                 {"M": M, "scale": s, "orig_shape": (640, 640), "size": (320, 320)})
        words = geom.ask("P", 320, 320, int(rp.perspective > 0), 0, repr(float(np.float32(s))), f32s(M),
                         set_text(n, boxes, None, kpts))
        ob, _, okp = parse_set(words[words.index(";") + 1 :])
        theirs = out["instances"].keypoints
        if n > 1:
            same(okp, theirs, f"keypoints {trial} n={n}")
            continue
        assert okp.shape == theirs.shape
        assert (okp[..., 2] == theirs[..., 2]).all(), (trial, okp, theirs)
        ulp = np.spacing(np.abs(theirs[..., :2]).astype(np.float32))
        assert (np.abs(okp[..., :2] - theirs[..., :2]) <= ulp).all(), (trial, okp, theirs)
