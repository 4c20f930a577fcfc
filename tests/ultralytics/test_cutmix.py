"""CutMix for detection (daemon/pixels/detect.c): its area choice and box
rule against Ultralytics' own CutMix (get_params and apply_instances, with
the same draws injected: np.random.beta, randint and choice), through
build/tests/cutmixgeom, on random boxes and on boxes that touch the areas'
edges; and in the daemon, each cutmix=1 training image is the cutmix=0
image with one rectangle pasted, clear of its boxes, holding the added
boxes (make check-ultralytics)."""

import os
import pathlib
import subprocess

import numpy as np
import pytest
from ultralytics.data.augment import BaseMixTransform, CutMix
from ultralytics.utils.instance import Instances

import stoker

TOOL = pathlib.Path(os.environ.get("STOKER_BUILD", "build")) / "tests" / "cutmixgeom"


def ours(size, choice, lam, cx, cy, boxes, partner):
    lines = [f"{size} {choice!r}", " ".join(repr(float(v)) for v in lam), " ".join(map(str, cx)),
             " ".join(map(str, cy))]
    for rows in (boxes, partner):
        lines.append(str(len(rows)))
        lines += [" ".join(repr(float(v)) for v in r) for r in rows]
    out = subprocess.run([str(TOOL)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout.split("\n")
    if out[0] == "skip":
        return None
    area = [float(v) for v in out[0].split()[1:]]
    kept = np.array([[float(v) for v in line.split()] for line in out[1:] if line], np.float32).reshape(-1, 5)
    return area, kept


def reference(monkeypatch, size, choice, lam, cx, cy, boxes, partner):
    """Ultralytics' CutMix on these labels, its random draws replaced by ours."""
    def labels(rows, fill):
        rows = np.asarray(rows, np.float32).reshape(-1, 5)
        return {"img": np.full((size, size, 3), fill, np.uint8), "cls": rows[:, :1].copy(),
                "instances": Instances(rows[:, 1:].copy(), bbox_format="xyxy", normalized=False)}

    mine, other = labels(boxes, 0), labels(partner, 255)
    lams, ints = iter(lam), iter([v for pair in zip(cx, cy) for v in pair])
    monkeypatch.setattr(np.random, "beta", lambda a, b: next(lams))
    monkeypatch.setattr(np.random, "randint", lambda n: next(ints))
    monkeypatch.setattr(np.random, "choice", lambda idx: idx[int(choice * len(idx))])
    monkeypatch.setattr(BaseMixTransform, "get_params",
                        lambda self, lb: (lb.__setitem__("mix_labels", [other]), {"mix_labels": [other]})[1])
    t = CutMix(dataset=None, p=1.0)
    params = t.get_params(mine)
    if params.get("skip"):
        return None
    out = t.apply_instances(t.apply_image(mine, params), params)
    n = len(boxes)
    kept = np.concatenate([out["cls"][n:], out["instances"].bboxes[n:]], 1).astype(np.float32)
    return [float(v) for v in params["area"]], kept


def random_boxes(rng, size, n, integral):
    x1, y1 = rng.uniform(-5, size, n), rng.uniform(-5, size, n)
    w, h = rng.uniform(2.5, size / 2, n), rng.uniform(2.5, size / 2, n)
    rows = np.stack([rng.integers(0, 5, n), x1, y1, np.minimum(x1 + w, size), np.minimum(y1 + h, size)], 1)
    if integral:
        rows[:, 1:] = np.round(rows[:, 1:])
    rows[:, 1:] = np.clip(rows[:, 1:], 0, size)
    return rows[(rows[:, 3] > rows[:, 1] + 2) & (rows[:, 4] > rows[:, 2] + 2)].astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
def test_cutmix_geometry_is_ultralytics(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    applied = skipped = 0
    for case in range(150):
        size = int(rng.choice([64, 160, 640]))
        lam = rng.uniform(0, 1, 3)
        cx, cy = rng.integers(0, size, 3).tolist(), rng.integers(0, size, 3).tolist()
        integral = case % 2 == 0
        boxes = random_boxes(rng, size, int(rng.integers(0, 6)), integral)
        partner = random_boxes(rng, size, int(rng.integers(0, 14)), integral)
        choice = float(rng.uniform())
        with monkeypatch.context() as m:
            want = reference(m, size, choice, lam, cx, cy, boxes, partner)
        got = ours(size, choice, lam, cx, cy, boxes, partner)
        assert (got is None) == (want is None), (case, got, want)
        if want is None:
            skipped += 1
            continue
        applied += 1
        assert got[0] == want[0], (case, got[0], want[0])
        assert np.array_equal(got[1], want[1]), (case, got[1], want[1])
    assert applied >= 20 and skipped >= 20, (applied, skipped)


# ---- in the daemon ----

S = 320
PLAIN = dict(hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, mixup=0.0, fliplr=0.5, flipud=0.5, mosaic=0.0, degrees=5.0)


def images(d, path, **kw):
    with stoker.Loader(str(path), socket=d.socket, task="detect", transform="mosaic", image_size=S, batch_size=8,
                       shuffle=True, seed=3, epochs=100, **PLAIN, **kw) as ld:
        out = []
        for b in ld:
            boxes = np.array(b.boxes, copy=True)  # rows of (image in batch, cls, cx, cy, w, h)
            for k, (i, im) in enumerate(zip(b.indices, b.images)):
                out.append((int(i), np.array(im, copy=True), boxes[boxes[:, 0] == k][:, 1:]))
        return out


def test_daemon_pastes_an_area_clear_of_the_boxes(daemon, make_yolo):
    """With cutmix=1 each training image is the cutmix=0 one (its other
    draws unchanged), or that image with one rectangle replaced: the added
    boxes lie inside the changed rectangle, none of the image's own boxes
    reaches into it, and the image's own boxes come first, unchanged."""
    # one or two objects a scene and no mosaic: areas clear of boxes are common
    path, _, _ = make_yolo(kind="scenes", images=24, min_side=320, max_side=640, seed=2, max_objects=2)
    d = daemon(workers=2)
    plain = images(d, path / "images" / "train")
    mixed = images(d, path / "images" / "train", cutmix=1.0)
    pasted = 0
    for (i0, a, ra), (i1, b, rb) in zip(plain, mixed):
        assert i0 == i1
        assert np.array_equal(rb[:len(ra)], ra), i0
        diff = np.nonzero((a != b).any(-1))
        if not len(diff[0]):
            assert len(rb) == len(ra), i0
            continue
        pasted += 1
        assert len(rb) > len(ra), i0
        y0, y1, x0, x1 = diff[0].min(), diff[0].max() + 1, diff[1].min(), diff[1].max() + 1
        for _, cx, cy, w, h in rb[len(ra):]:
            bx0, by0, bx1, by1 = (cx - w / 2) * S, (cy - h / 2) * S, (cx + w / 2) * S, (cy + h / 2) * S
            assert x0 - 1 <= bx0 and bx1 <= x1 + 1 and y0 - 1 <= by0 and by1 <= y1 + 1, (i0, (x0, y0, x1, y1))
        for _, cx, cy, w, h in ra:
            bx0, by0, bx1, by1 = (cx - w / 2) * S, (cy - h / 2) * S, (cx + w / 2) * S, (cy + h / 2) * S
            assert bx1 <= x0 + 1e-3 or bx0 >= x1 - 1e-3 or by1 <= y0 + 1e-3 or by0 >= y1 - 1e-3, (i0, (x0, y0, x1, y1))
    assert pasted >= 3, f"CutMix applied to {pasted} of {len(plain)} images"
    # the trainer's cutmix reaches the loader
    from ultralytics.cfg import get_cfg
    from stoker.ultralytics import loader_options

    args = get_cfg(overrides=dict(data=str(path / "data.yaml"), imgsz=S, workers=0, cutmix=0.25))
    assert loader_options(args, "train")["cutmix"] == 0.25
    with pytest.raises(stoker.StokerError, match="cutmix"):
        stoker.Loader(str(path / "images" / "train"), socket=d.socket, task="detect", image_size=S, cutmix=1.5)
