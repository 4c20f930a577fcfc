"""CopyPaste's pixels (daemon/pixels/copypaste.c, through
build/tests/copypaste) against Ultralytics' own CopyPaste (get_params, then
apply_image) and cv2, with the same choice of instances injected into both
(make check-ultralytics):

- cv2.drawContours(im_new, [polygon], -1, 1, cv2.FILLED), what CopyPaste
  draws with, sets the same pixels as cv2.fillPoly for one int32 contour
  (the fill stoker ports: instmask_fill), and several drawn into one mask
  are their union: random polygons inside, across and outside the image,
  self-crossing, degenerate, up to a thousand points;
- mode "flip" on the real photos (data/photos) with their hand-written
  polygons (tests/ultralytics/instances/segment, resampled to 1000 points
  as YOLODataset does) and on random polygons over a mosaic-sized canvas:
  every byte of the image equal;
- mode "mixup": the other photo's instances pasted from the other image,
  every byte equal, also on images made flipped;
- in the daemon (yolo_task segment training, mode flip): the images are
  the copy_paste=0 images with mirrored objects pasted, rows appended.

Ultralytics' own choice (params["selected"]) is what both are given: its
order among equal overlaps is numpy's argsort, which differs by CPU
(test_instgeom.py compares the choice itself)."""

import pathlib
import subprocess

import cv2
import numpy as np
import pytest
from ultralytics.data.augment import CopyPaste
from ultralytics.utils.instance import Instances
from ultralytics.utils.ops import resample_segments, segments2boxes, xywh2xyxy

import stoker
from stoker_testutil import BUILD, OneSampleDataset

TOOL = BUILD / "tests" / "copypaste"
HERE = pathlib.Path(__file__).resolve().parent
PHOTOS = HERE.parent.parent / "data" / "photos"
SEGMENTS = HERE / "instances" / "segment"
LABELLED = ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "rocket.jpg"]


def paste(mode, img, other, segs, chosen):
    """The tool's image (or mask) for polygons `segs` [n][npts][2] and the choice."""
    segs = np.ascontiguousarray(segs, dtype=np.float32)
    h, w = img.shape[:2] if img is not None else other
    n, npts = segs.shape[:2]
    chosen = np.asarray(chosen, dtype=np.uint32)
    data = b""
    if mode != "mask":
        data += np.ascontiguousarray(img).tobytes()
    if mode.startswith("mixup"):
        data += np.ascontiguousarray(other).tobytes()
    data += segs.tobytes() + chosen.tobytes()
    args = [str(TOOL)] + [str(v) for v in (w, h, npts, n, len(chosen), mode)]
    out = subprocess.run(args, input=data, capture_output=True,
                         check=True).stdout
    if mode == "mask":
        return np.frombuffer(out, np.uint8).reshape(h, w)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


def random_polygon(rng, n, w, h, spill):
    kind = rng.integers(0, 3)
    if kind == 0:  # scattered: self-crossing
        p = rng.uniform(-spill, 1 + spill, (n, 2)) * [w, h]
    elif kind == 1:  # star-shaped around a centre
        c = rng.uniform(-spill, 1 + spill, 2) * [w, h]
        r = rng.uniform(0.05, 1.0, n) * min(w, h) / 2
        t = np.sort(rng.uniform(0, 2 * np.pi, n))
        p = c + np.stack([r * np.cos(t), r * np.sin(t)], 1)
    else:  # a few corners resampled to n points, as the data set does
        k = int(rng.integers(3, 9))
        p = resample_segments([(rng.uniform(-spill, 1 + spill, (k, 2)) * [w, h]).astype(np.float32)], n)[0]
    return p.astype(np.float32)


@pytest.mark.parametrize("seed", range(3))
def test_draw_contours_filled_is_fill_poly(seed):
    """One int32 contour: drawContours FILLED == fillPoly == stoker's fill;
    several drawn into one mask: the union, as stoker's mask."""
    rng = np.random.default_rng(seed)
    for t in range(60):
        w, h = int(rng.integers(4, 300)), int(rng.integers(4, 300))
        count = int(rng.integers(1, 5))
        npts = int(rng.choice([1, 2, 3, 7, 40, 1000]))
        segs = np.stack([random_polygon(rng, npts, w, h, 0.0 if t % 3 == 0 else 0.3) for _ in range(count)])
        want = np.zeros((h, w), np.uint8)
        for s in segs:
            one = np.zeros((h, w), np.uint8)
            cv2.drawContours(one, s[None].astype(np.int32), -1, 1, cv2.FILLED)
            poly = np.zeros((h, w), np.uint8)
            cv2.fillPoly(poly, [s.astype(np.int32)], color=1)
            assert np.array_equal(one, poly), (w, h, t)
            cv2.drawContours(want, s[None].astype(np.int32), -1, 1, cv2.FILLED)
        chosen = rng.permutation(count)[: int(rng.integers(0, count + 1))]
        if len(chosen) < count:
            want = np.zeros((h, w), np.uint8)
            for j in chosen:
                cv2.drawContours(want, segs[[j]].astype(np.int32), -1, 1, cv2.FILLED)
        got = paste("mask", None, (h, w), segs, chosen)
        assert np.array_equal(got, want), (w, h, t, chosen)


def photo_labels(name, size=None):
    """A photo (BGR, as Ultralytics reads it) and its instances in pixels:
    polygons resampled to 1000 points, boxes from them; `size` (w, h) crops
    the photo's top-left corner to that size first (the instances stay)."""
    img = cv2.imread(str(PHOTOS / name), cv2.IMREAD_COLOR)
    h, w = img.shape[:2]
    rows = [r.split() for r in (SEGMENTS / (pathlib.Path(name).stem + ".txt")).read_text().splitlines() if r.strip()]
    cls = np.array([[float(r[0])] for r in rows], np.float32)
    segs = [np.array(r[1:], np.float32).reshape(-1, 2) for r in rows]
    segs = np.stack(resample_segments(segs, 1000)) * np.array([w, h], np.float32)
    boxes = xywh2xyxy(segments2boxes(segs)).astype(np.float32)
    if size is not None:
        img = np.ascontiguousarray(img[: size[1], : size[0]])
    return img, cls, boxes, segs.astype(np.float32)


def labels_of(img, cls, boxes, segs):
    inst = Instances(boxes.copy(), segs.copy(), None, bbox_format="xyxy", normalized=False)
    return {"img": img.copy(), "cls": cls.copy(), "instances": inst}


@pytest.mark.parametrize("photo", LABELLED)
@pytest.mark.parametrize("p", [0.5, 1.0])
def test_flip_on_photos(photo, p):
    img, cls, boxes, segs = photo_labels(photo)
    cp = CopyPaste(p=p, mode="flip")
    lab = labels_of(img, cls, boxes, segs)
    params = cp.get_params(lab)
    want = cp.apply_image(lab, params)["img"]
    got = paste("flip", img, None, params["instances2"].segments, params["selected"])
    assert np.array_equal(got, want)
    if len(params["selected"]):
        assert not np.array_equal(got, img)  # something was pasted


def test_flip_on_random_polygons():
    """Many instances on a mosaic-sized canvas (grey 114 around four tiles
    of photos), polygons across its border, p from 0.1 to 1."""
    rng = np.random.default_rng(21)
    tiles = [cv2.imread(str(PHOTOS / n), cv2.IMREAD_COLOR) for n in LABELLED[:4]]
    pasted = 0
    for trial in range(12):
        s = int(rng.choice([64, 160, 320]))
        W = H = 2 * s
        canvas = np.full((H, W, 3), 114, np.uint8)
        xc, yc = int(rng.integers(s // 2, 3 * s // 2)), int(rng.integers(s // 2, 3 * s // 2))
        for k, t in enumerate(tiles):
            part = cv2.resize(t, (s, s))
            x0, y0 = (xc - s, yc - s) if k == 0 else (xc, yc - s) if k == 1 else (xc - s, yc) if k == 2 else (xc, yc)
            canvas[max(y0, 0) : y0 + s, max(x0, 0) : x0 + s] = part[max(-y0, 0) : H - y0, max(-x0, 0) : W - x0]
        n = int(rng.integers(1, 25))
        segs = np.stack([random_polygon(rng, 1000, W, H, 0.05) * rng.uniform(0.1, 0.5) for _ in range(n)])
        segs = np.clip(segs, 0, [W, H]).astype(np.float32)  # Mosaic's _cat_labels clips to the canvas
        boxes = xywh2xyxy(segments2boxes(segs)).astype(np.float32)
        cls = np.arange(n, dtype=np.float32).reshape(-1, 1)
        p = float(rng.choice([0.1, 0.5, 1.0]))
        cp = CopyPaste(p=p, mode="flip")
        lab = labels_of(canvas, cls, boxes, segs)
        params = cp.get_params(lab)
        want = cp.apply_image(lab, params)["img"]
        got = paste("flip", canvas, None, params["instances2"].segments, params["selected"])
        assert np.array_equal(got, want), trial
        pasted += len(params["selected"])
    assert pasted > 10


@pytest.mark.parametrize("pair", [("astronaut.png", "chelsea.png"), ("coffee.png", "rocket.jpg"),
                                  ("chelsea.png", "hubble_deep_field.jpg")])
@pytest.mark.parametrize("p", [0.5, 1.0])
def test_mixup_on_photos(pair, p):
    """The other photo's chosen instances pasted from it (both cropped to a
    common size, as both images are imgsz x imgsz after RandomPerspective)."""
    a = cv2.imread(str(PHOTOS / pair[0]), cv2.IMREAD_COLOR)
    b = cv2.imread(str(PHOTOS / pair[1]), cv2.IMREAD_COLOR)
    size = (min(a.shape[1], b.shape[1]), min(a.shape[0], b.shape[0]))
    img, cls, boxes, segs = photo_labels(pair[0], size)
    img2, cls2, boxes2, segs2 = photo_labels(pair[1], size)
    cp = CopyPaste(OneSampleDataset(labels_of(img2, cls2 + 5, boxes2, segs2)), p=p, mode="mixup")
    lab = labels_of(img, cls, boxes, segs)
    params = cp.get_params(lab)
    want = cp.apply_image(lab, params)["img"]
    got = paste("mixup", img, img2, params["instances2"].segments, params["selected"])
    assert np.array_equal(got, want)
    if p == 1.0:
        assert len(params["selected"]) > 0


@pytest.mark.parametrize("flips", ["ud", "lr", "udlr"])
def test_mixup_on_flipped_images(flips):
    """detect.c makes its images flipped (RandomFlip folded into the warp):
    the paste on the flipped images, the mask read through the same flips,
    is Ultralytics' paste, flipped."""
    rng = np.random.default_rng(len(flips))
    a = cv2.imread(str(PHOTOS / "chelsea.png"), cv2.IMREAD_COLOR)
    b = cv2.imread(str(PHOTOS / "astronaut.png"), cv2.IMREAD_COLOR)
    size = (min(a.shape[1], b.shape[1]) - 7, min(a.shape[0], b.shape[0]) - 3)
    img, cls, boxes, segs = photo_labels("chelsea.png", size)
    img2, cls2, boxes2, segs2 = photo_labels("astronaut.png", size)
    extra = np.stack([random_polygon(rng, 1000, 60, 60, 0.0) + rng.uniform(0, 1, 2) * size for _ in range(8)])
    segs2 = np.concatenate([segs2, np.clip(extra, 0, size).astype(np.float32)])
    boxes2 = xywh2xyxy(segments2boxes(segs2)).astype(np.float32)
    cls2 = np.arange(len(segs2), dtype=np.float32).reshape(-1, 1)
    cp = CopyPaste(OneSampleDataset(labels_of(img2, cls2, boxes2, segs2)), p=1.0, mode="mixup")
    lab = labels_of(img, cls, boxes, segs)
    params = cp.get_params(lab)
    want = cp.apply_image(lab, params)["img"]
    assert len(params["selected"]) > 2

    def flip(x):
        return x[::-1 if "ud" in flips else 1, ::-1 if "lr" in flips else 1]

    got = paste("mixup-" + flips, flip(img), flip(img2), params["instances2"].segments, params["selected"])
    assert np.array_equal(got, flip(want))


def test_mixup_on_random_polygons():
    rng = np.random.default_rng(5)
    photos = [cv2.imread(str(PHOTOS / n), cv2.IMREAD_COLOR) for n in LABELLED]
    pasted = 0
    for trial in range(12):
        S = int(rng.choice([96, 320, 640]))
        i, j = rng.choice(len(photos), 2, replace=False)
        img, img2 = (cv2.resize(photos[k], (S, S)) for k in (i, j))
        sets = []
        for _ in range(2):
            n = int(rng.integers(0, 12)) if sets else int(rng.integers(1, 12))
            segs = np.stack([random_polygon(rng, 1000, S // 5, S // 5, 0.0) + rng.uniform(-0.1, 0.9, 2) * S
                             for _ in range(n)]) if n else np.zeros((0, 1000, 2), np.float32)
            segs = np.clip(segs, 0, S).astype(np.float32)
            boxes = xywh2xyxy(segments2boxes(segs)).astype(np.float32) if n else np.zeros((0, 4), np.float32)
            sets.append((np.arange(n, dtype=np.float32).reshape(-1, 1), boxes, segs))
        p = float(rng.choice([0.25, 0.5, 1.0]))
        cp = CopyPaste(OneSampleDataset(labels_of(img2, *sets[1])), p=p, mode="mixup")
        lab = labels_of(img, *sets[0])
        params = cp.get_params(lab)
        want = cp.apply_image(lab, params)["img"]
        got = paste("mixup", img, img2, params["instances2"].segments, params["selected"])
        assert np.array_equal(got, want), trial
        pasted += len(params["selected"])
    assert pasted > 10


# ---- in the daemon (detect.c's training path, yolo_task segment) ----


def _train_images(d, yaml, **kw):
    """Each training image of two epochs and its rows, by (epoch, sample);
    affine and colour off (the image is the mosaic canvas' centre, moved by
    whole pixels), flips on."""
    ld = stoker.Loader(str(yaml), socket=d.socket, task="detect", transform="mosaic", yolo_task="segment",
                       image_size=160, batch_size=2, seed=3, epochs=2, close_mosaic=0, shuffle=False, mosaic=1.0,
                       degrees=0.0,
                       translate=0.0, scale=0.0, shear=0.0, perspective=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0,
                       mixup=0.0, fliplr=0.5, flipud=0.5, **kw)
    out = {}
    try:
        for ep in range(2):
            ld.set_epoch(ep)
            for b in ld:
                for i, idx in enumerate(b.indices.tolist()):
                    rows = b.boxes[b.boxes[:, 0] == i][:, 1:]
                    out[(ep, idx)] = (np.array(b.images[i], copy=True), np.array(rows, copy=True))
    finally:
        ld.close()
    return out


def _rows_added(ra, rb, key):
    """The rows of rb that are not ra's, after asserting every row of ra is among rb's."""
    rest = [tuple(r) for r in rb.tolist()]
    for r in ra.tolist():
        assert tuple(r) in rest, (key, r, rb.tolist())
        rest.remove(tuple(r))
    return rest


def test_daemon_pastes_mirrored_objects(daemon, tmp_path):
    """copy_paste=1 (mode flip) in the daemon, against the same samples with
    copy_paste=0 (flip mode draws nothing: the same mosaics): every pixel is
    the plain image's own or its mirror's (the canvas' centre is symmetric
    about its middle column), some are pasted, the image's own rows come
    among the rows unchanged, and each added row is the mirror of one of
    them."""
    from test_instances import make_instances_set

    yaml = make_instances_set(tmp_path, "segment")
    d = daemon(workers=2)
    plain = _train_images(d, yaml)
    pasted = _train_images(d, yaml, copy_paste=1.0, copy_paste_mode="flip")
    assert plain.keys() == pasted.keys()
    changed = added = 0
    for key, (a, ra) in plain.items():
        b, rb = pasted[key]
        # the rows come in the overlap mask's area order (Format sorts them): a mirror beside its original
        rest = _rows_added(ra, rb, key)
        mirrored = a[:, ::-1]
        assert ((b == a) | (b == mirrored)).all(), key
        changed += int((b != a).any(-1).sum())
        for cls, cx, cy, w, h in rest:
            near = np.abs(ra - [cls, 1 - cx, cy, w, h]).max(1) if len(ra) else np.array([1.0])
            assert near.min() < 1e-4, (key, (cls, cx, cy, w, h))
            added += 1
    assert changed > 100 and added > 3, (changed, added)


def test_daemon_pastes_another_samples_objects(daemon, tmp_path):
    """copy_paste=1, mode mixup: its draws come from a stream of their own,
    so each image is the copy_paste=0 image (same mosaic, same affine) with
    another sample's objects pasted: its rows are all there, rows and
    pixels are added (their equality with Ultralytics: test_train_instances
    for the instances, the tests above for the pixels)."""
    from test_instances import make_instances_set

    yaml = make_instances_set(tmp_path, "segment")
    d = daemon(workers=2)
    plain = _train_images(d, yaml)
    pasted = _train_images(d, yaml, copy_paste=1.0, copy_paste_mode="mixup")
    assert plain.keys() == pasted.keys()
    changed = added = 0
    for key, (a, ra) in plain.items():
        b, rb = pasted[key]
        rest = _rows_added(ra, rb, key)
        added += len(rest)
        changed += int((b != a).any(-1).sum())
        assert len(rest) or np.array_equal(a, b), key
    assert changed > 100 and added > 3, (changed, added)


def test_trainer_options():
    """Ultralytics' copy_paste and copy_paste_mode reach the daemon for
    segment and OBB training (pose: passed, nothing to paste); mode mixup
    with rect=True and task detect are refused with the reason."""
    from ultralytics.cfg import get_cfg

    from stoker.ultralytics import loader_options

    def args(**kw):
        return get_cfg(overrides=dict(data="x.yaml", imgsz=160, workers=0, **kw))

    for task in ("segment", "obb", "pose"):
        opts = loader_options(args(task=task, copy_paste=0.3), "train")
        assert opts["copy_paste"] == 0.3 and opts["copy_paste_mode"] == "flip", opts
        assert "copy_paste" not in loader_options(args(task=task, copy_paste=0.3), "val")
    assert "copy_paste" not in loader_options(args(task="segment"), "train")
    opts = loader_options(args(task="obb", copy_paste=0.3, copy_paste_mode="mixup"), "train")
    assert opts["copy_paste_mode"] == "mixup", opts
    with pytest.raises(ValueError, match="copy_paste_mode=mixup with rect=True"):
        loader_options(args(task="segment", copy_paste=0.3, copy_paste_mode="mixup", rect=True), "train")
    with pytest.raises(ValueError, match="copy_paste=0.3 with task=detect"):
        loader_options(args(task="detect", copy_paste=0.3), "train")


@pytest.mark.parametrize("w", [1, 2, 3, 4])
def test_flip_on_narrow_images(w):
    """Images 1 to 4 pixels wide (a mirror with a middle column or none), with polygons
    whose masks leave some columns unset: equal to cv2.flip under the mask. A 1-pixel-wide
    row whose only pixel is not masked once ran the mirror loop past the row."""
    rng = np.random.default_rng(w)
    h = 12
    img = rng.integers(0, 256, (h, w, 3), np.uint8)
    segs = np.array([[[0, 1], [0, 4], [w - 1, 4]], [[0, 7], [w - 1, 7], [w - 1, 9]]], np.float32)
    mask = paste("mask", None, (h, w), segs, [0, 1])
    assert 0 < mask.sum() < h * w
    want = img.copy()
    want[mask.astype(bool)] = cv2.flip(img, 1)[mask.astype(bool)]
    assert np.array_equal(paste("flip", img, None, segs, [0, 1]), want)
