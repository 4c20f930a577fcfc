"""A training sample's segments, keypoints and oriented boxes (DETECT_TRAIN
with instances: daemon/pixels/detect.c through build/tests/detectinst)
against Ultralytics' own transforms replayed with the same draws: the
samples' labels as YOLODataset.update_labels_info leaves them (segments
resampled to 1000 points or one more than the longest, OBB corners to 100),
Mosaic.apply_instances with the drawn centre and partners, RandomPerspective
with _compute_affine_matrix fed the drawn values (random.uniform replaced),
MixUp's Instances.concatenate, CutMix (its Beta, randint and area choice
given the drawn values), RandomFlip vertical then horizontal with the
data.yaml's flip_idx, and Format's boxes, keypoints and xywhr. Equality is
bit for bit (float32). make check-ultralytics."""

import random
import subprocess
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import ultralytics.data.augment as augment
from ultralytics.data.augment import BaseMixTransform, CutMix, Format, Mosaic, RandomFlip, RandomPerspective
from ultralytics.data.dataset import YOLODataset
from ultralytics.utils.instance import Instances
from ultralytics.utils.ops import segments2boxes

from stoker_testutil import BUILD, OneSampleDataset

TOOL = BUILD / "tests" / "detectinst"
NKPT = 4
FLIP_IDX = [1, 0, 3, 2]


def make_samples(rng, task, size, count):
    """`count` samples at long side `size`: (w, h, objects), each object
    (cls, xywh normalised, polygon normalised or None, keypoints or None),
    boxes as Ultralytics' label check derives them (segments2boxes)."""
    out = []
    for _ in range(count):
        short = int(rng.integers(size // 3, size + 1))
        w, h = (size, short) if rng.random() < 0.5 else (short, size)
        objs = []
        for _ in range(int(rng.integers(0, 6))):
            cls = float(rng.integers(0, 4))
            poly = kpt = None
            if task == "segment":
                npts = 1003 if rng.random() < 0.1 else int(rng.integers(3, 12))
                c = rng.uniform(0.2, 0.8, 2)
                poly = np.clip(c + rng.uniform(-0.3, 0.3, (npts, 2)), 0, 1).astype(np.float32)
            elif task == "obb":
                c = rng.uniform(0.15, 0.85, 2)
                wh = rng.uniform(0.02, 0.3, 2)
                p = cv2.boxPoints(((float(c[0]), float(c[1])), (float(wh[0]), float(wh[1])),
                                   float(rng.uniform(-90, 90))))
                poly = np.clip(p, 0, 1).astype(np.float32)
            if poly is not None:
                xywh = segments2boxes([poly])[0].astype(np.float32)
            else:
                xywh = np.concatenate([rng.uniform(0.1, 0.9, 2), rng.uniform(0.03, 0.2, 2)]).astype(np.float32)
            if task == "pose":
                kpt = np.concatenate([rng.uniform(0, 1, (NKPT, 2)), rng.choice([0.0, 1.0, 2.0], (NKPT, 1))],
                                     1).astype(np.float32)
            objs.append((cls, xywh, poly, kpt))
        out.append((w, h, objs))
    return out


def tool_input(task, size, seed, index, samples, hyp, max_boxes, out=None):
    segp = {"segment": 1000, "obb": 100}.get(task, 0)
    nkpt = NKPT if task == "pose" else 0
    ow, oh = out or (size, size)
    lines = [f"{size} {ow} {oh} {seed} {index} {len(samples)} {segp} {nkpt} {int(task == 'obb')} {max_boxes}",
             " ".join(repr(float(hyp[k])) for k in ("hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale",
                                                    "shear", "perspective", "flipud", "fliplr", "mosaic", "mixup"))
             + f" {float(hyp.get('copy_paste', 0.0))!r} {int(hyp.get('copy_paste_mode', 'flip') == 'mixup')}"
             + f" {float(hyp.get('cutmix', 0.0))!r}",
             " ".join(map(str, [len(FLIP_IDX), *FLIP_IDX])) if task == "pose" else "0"]
    for w, h, objs in samples:
        lines.append(f"{w} {h} {len(objs)}")
        for cls, xywh, poly, kpt in objs:
            words = [repr(cls), *(repr(float(v)) for v in xywh)]
            words.append(str(0 if poly is None else len(poly)))
            if poly is not None:
                words += [repr(float(v)) for v in poly.reshape(-1)]
            if kpt is not None:
                words += [repr(float(v)) for v in kpt.reshape(-1)]
            lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def ultralytics_labels(task, sample):
    """The sample's labels as YOLODataset.update_labels_info makes them."""
    w, h, objs = sample
    n = len(objs)
    label = {"cls": np.array([[o[0]] for o in objs], np.float32).reshape(n, 1),
             "bboxes": np.array([o[1] for o in objs], np.float32).reshape(n, 4),
             "segments": [o[2] for o in objs] if task in ("segment", "obb") else [],
             "keypoints": (np.array([o[3] for o in objs], np.float32).reshape(n, NKPT, 3) if task == "pose"
                           else None),
             "bbox_format": "xywh", "normalized": True}
    fake = SimpleNamespace(use_obb=task == "obb", use_segments=task == "segment", format_class=Format)
    return YOLODataset.update_labels_info(fake, label)


class _Dataset:
    cache = None

    def __init__(self, obb):
        self.use_obb = obb


def copy_paste_flip(labels, shape, p, monkeypatch, stats):
    """CopyPaste(mode="flip") where v8_transforms puts it (after Mosaic,
    before RandomPerspective), with numpy's argsort made stable: its order
    among equal overlaps differs by CPU (x86-simd-sort), instgeom keeps
    index order (test_instgeom.py compares the choice itself)."""
    from ultralytics.data.augment import CopyPaste

    argsort = np.argsort
    with monkeypatch.context() as m:
        m.setattr(augment.np, "argsort", lambda a, *args, **kw: argsort(a, kind="stable"))
        out = CopyPaste(p=p, mode="flip")({**labels, "img": np.zeros((*shape, 3), np.uint8)})
    stats["pasted"] = stats.get("pasted", 0) + len(out["cls"]) - len(labels["cls"])
    return {"cls": out["cls"], "instances": out["instances"]}


def copy_paste_mixup(labels, partner, shape, p, monkeypatch, stats):
    """CopyPaste(mode="mixup") where v8_transforms puts it (after
    RandomPerspective) with the daemon's partner (made as the image is) and
    its draw injected (get_params and apply_instances: BaseMixTransform's
    u is the daemon's), numpy's argsort made stable as above."""
    from ultralytics.data.augment import CopyPaste

    argsort = np.argsort
    cp = CopyPaste(OneSampleDataset({**partner, "img": np.zeros((*shape, 3), np.uint8)}), p=p, mode="mixup")
    lab = {**labels, "img": np.zeros((*shape, 3), np.uint8)}
    with monkeypatch.context() as m:
        m.setattr(augment.np, "argsort", lambda a, *args, **kw: argsort(a, kind="stable"))
        out = cp.apply_instances(lab, cp.get_params(lab))
    stats["pasted"] = stats.get("pasted", 0) + len(out["cls"]) - len(labels["cls"])
    return {"cls": out["cls"], "instances": out["instances"]}


def cutmix(task, size, labels, labels2, draws, monkeypatch):
    """Ultralytics' CutMix.get_params and apply_instances with the second
    image given and its draws (Beta, randint, the area's choice) replaced
    by ours."""
    cm = CutMix(_Dataset(task == "obb"), p=1.0)
    lam, cxy = iter(draws[48:51]), iter(v for k in range(3) for v in (draws[51 + k], draws[54 + k]))
    labels = dict(labels, img=np.zeros((size, size, 3), np.uint8), mix_labels=[labels2])
    with monkeypatch.context() as m:
        m.setattr(BaseMixTransform, "get_params", lambda self, lb: {"mix_labels": [labels2]})
        m.setattr(augment.np.random, "beta", lambda a, b: next(lam))
        m.setattr(augment.np.random, "randint", lambda n: int(next(cxy)))
        m.setattr(augment.np.random, "choice", lambda idx: idx[int(draws[57] * len(idx))])
        params = cm.get_params(labels)
    if params.get("skip"):
        return labels
    out = cm.apply_instances(labels, params)
    return {"cls": out["cls"], "instances": out["instances"]}


def replay(task, size, index, samples, hyp, draws, monkeypatch, out=None, stats=None):
    """Ultralytics' v8_transforms' instance path on the same draws (`out`:
    a rect batch's (w, h), RandomPerspective's rect_shape)."""
    ow, oh = out or (size, size)
    stats = {} if stats is None else stats
    mosaic = Mosaic(_Dataset(task == "obb"), imgsz=size, p=1.0, n=4)
    rp = RandomPerspective(degrees=hyp["degrees"], translate=hyp["translate"], scale=hyp["scale"],
                           shear=hyp["shear"], perspective=hyp["perspective"], size=(ow, oh),
                           preserve_obb=task == "obb")

    def image(k, primary, d=None):
        """Image k's instances (k 2: a CopyPaste partner, its draws `d`)."""
        d = draws[14 * k: 14 * k + 14] if d is None else d
        if d[0]:
            yc, xc = int(d[4]), int(d[5])
            layout = []
            for i, idx in enumerate([primary, *(int(x) for x in d[1:4])]):
                lab = ultralytics_labels(task, samples[idx])
                w, h = samples[idx][0], samples[idx][1]
                padw, padh = [(xc - w, yc - h), (xc, yc - h), (xc - w, yc), (xc, yc)][i]
                layout.append({"labels_patch": {"im_file": "x", "ori_shape": (h, w), "cls": lab["cls"],
                                                "instances": lab["instances"]},
                               "padw": padw, "padh": padh, "img_shape": (h, w)})
            out = mosaic.apply_instances({}, {"layout": layout})
            labels = {"cls": out["cls"], "instances": out["instances"]}
            shape = (2 * size, 2 * size)
        else:
            lab = ultralytics_labels(task, samples[primary])
            labels = {"cls": lab["cls"], "instances": lab["instances"]}
            shape = (samples[primary][1], samples[primary][0])
        mixup_mode = hyp.get("copy_paste_mode", "flip") == "mixup"
        if hyp.get("copy_paste", 0.0) and not mixup_mode:
            labels = copy_paste_flip(labels, shape, hyp["copy_paste"], monkeypatch, stats)
        values = iter(d[6:14])
        with monkeypatch.context() as m:
            m.setattr(augment.random, "uniform", lambda a, b: next(values))
            M, s = rp._compute_affine_matrix(np.zeros((*shape, 3), np.uint8), (ow, oh))
        assert s == d[9]
        labels = rp.apply_instances(labels, {"M": M, "scale": s, "orig_shape": shape, "size": (ow, oh)})
        cp = draws[58 + 16 * k: 74 + 16 * k] if k < 2 else None
        if mixup_mode and hyp.get("copy_paste", 0.0) and cp and cp[0] and len(labels["instances"].segments):
            partner = image(2, int(cp[1]), cp[2:16])
            labels = copy_paste_mixup(labels, partner, (oh, ow), hyp["copy_paste"], monkeypatch, stats)
        return labels

    labels = image(0, index)
    if draws[28]:
        other = image(1, int(draws[29]))
        labels = {"cls": np.concatenate([labels["cls"], other["cls"]], 0),
                  "instances": Instances.concatenate([labels["instances"], other["instances"]], axis=0)}
    if draws[32]:
        before = len(labels["cls"])
        labels = cutmix(task, size, labels, image(2, int(draws[33]), draws[34:48]), draws, monkeypatch)
        stats["cutmix"] = stats.get("cutmix", 0) + int(len(labels["cls"]) > before)
    flip_idx = FLIP_IDX if task == "pose" else []
    for direction, flag in (("vertical", draws[30]), ("horizontal", draws[31])):
        rf = RandomFlip(p=1.0, direction=direction, flip_idx=flip_idx)
        labels = rf.apply_instances(labels, {"flip": bool(flag), "h": oh, "w": ow, "direction": direction,
                                             "flip_idx": flip_idx})
    inst = labels["instances"]
    final = (labels["cls"].copy(), inst.bboxes.copy(), inst.segments.copy(),
             None if inst.keypoints is None else inst.keypoints.copy())
    fmt = Format(bbox_format="xywh", normalize=True, return_mask=False, return_keypoint=task == "pose",
                 return_obb=task == "obb", batch_idx=True)
    labels["img"] = np.zeros((oh, ow, 3), np.uint8)
    return final, fmt.apply_instances(labels, fmt.get_params(labels))


def same(a, b, what):
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    bad = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    assert not bad.any(), (what, np.argwhere(bad)[:5], a[bad][:5], b[bad][:5])


def run_tool(text):
    p = subprocess.run([str(TOOL)], input=text, capture_output=True, text=True, check=True)
    return p.stdout.splitlines()


@pytest.mark.parametrize("copy_paste", [0.0, 0.6, "mixup"])
@pytest.mark.parametrize("rect", [False, True])
@pytest.mark.parametrize("task", ["segment", "pose", "obb"])
def test_training_instances_equal_ultralytics(task, rect, copy_paste, monkeypatch):
    """rect: rect=True training's samples (mosaic and mixup 0, as
    YOLODataset sets them), warped into a batch shape other than square.
    cutmix: CutMix after MixUp, its partner made as image 1 is (CopyPaste
    included). copy_paste: CopyPaste(mode="flip") on the mosaic (or the plain image)
    before the affine (rect keeps it, as YOLODataset does); pose samples
    carry no segments, so nothing is pasted there, as in Ultralytics."""
    if copy_paste == "mixup" and rect:
        pytest.skip("copy_paste_mode mixup is refused with rect (its partner in another batch's shape)")
    cp_mode = "mixup" if copy_paste == "mixup" else "flip"
    copy_paste = 0.7 if copy_paste == "mixup" else copy_paste
    rng = np.random.default_rng({"segment": 51, "pose": 52, "obb": 53}[task] + 10 * rect + int(100 * copy_paste))
    seen = {"mosaic": 0, "plain": 0, "mixup": 0, "cutmix": 0, "flipud": 0, "fliplr": 0, "kept": 0, "hidden": 0,
            "pasted": 0}
    for trial in range(36):
        size = int(rng.choice([64, 96, 128, 160]))
        count = 6
        hyp = dict(hsv_h=0.015, hsv_s=0.7, hsv_v=0.4, degrees=float(rng.choice([0.0, 10.0])), translate=0.1,
                   scale=0.5, shear=float(rng.choice([0.0, 2.0])), perspective=float(rng.choice([0.0, 0.0005])),
                   flipud=0.3, fliplr=0.5, mosaic=0.0 if rect else 0.7, mixup=0.0 if rect else 0.3,
                   copy_paste=copy_paste, copy_paste_mode=cp_mode,
                   cutmix=0.0 if rect or cp_mode == "mixup" else 0.5)
        out = (size, int(rng.choice([size // 2, 3 * size // 4]))) if rect else None
        if rect and rng.random() < 0.5:
            out = out[::-1]
        samples = make_samples(rng, task, size, count)
        index = int(rng.integers(0, count))
        lines = run_tool(tool_input(task, size, trial, index, samples, hyp, 400, out))
        draws = [float(x) for x in lines[0].split()]
        assert not lines[1].startswith("error"), lines[1]
        head = lines[1].split()
        n, npts, nkpt = int(head[0]), int(head[1]), int(head[2])
        v = np.asarray([float(x) for x in head[3:]], np.float32)
        cls, v = v[:n], v[n:]
        boxes, v = v[: n * 4].reshape(n, 4), v[n * 4:]
        segs = kpts = None
        if npts:
            segs, v = v[: n * npts * 2].reshape(n, npts, 2), v[n * npts * 2:]
        if nkpt:
            kpts, v = v[: n * nkpt * 3].reshape(n, nkpt, 3), v[n * nkpt * 3:]
        (wcls, wboxes, wsegs, wkpts), fmt = replay(task, size, index, samples, hyp, draws, monkeypatch, out, seen)
        what = f"{task} trial {trial} draws {draws}"
        same(cls, wcls.reshape(-1), what + " cls")
        same(boxes, wboxes, what + " boxes")
        if task in ("segment", "obb") and n:
            same(segs, wsegs, what + " segments")
        if task == "pose":
            same(kpts, wkpts, what + " keypoints")
            seen["hidden"] += int((kpts[..., 2] == 0).sum())
        rows = lines[2].split()
        k = int(rows[0])
        r = np.asarray([float(x) for x in rows[1:]], np.float32)
        assert k == n
        rr, r = r[: k * 6].reshape(k, 6), r[k * 6:]
        same(rr[:, 1], fmt["cls"].numpy().reshape(-1), what + " row classes")
        if task == "obb":
            same(r[k * nkpt * 3:].reshape(k, 5), fmt["bboxes"].numpy(), what + " xywhr")
            ow, oh = out or (size, size)
            same(rr[:, 2:], boxes / np.float32([ow, oh, ow, oh]), what + " row boxes")
        else:
            same(rr[:, 2:], fmt["bboxes"].numpy(), what + " row boxes")
        if task == "pose":
            same(r[: k * nkpt * 3].reshape(k, nkpt, 3), fmt["keypoints"].numpy(), what + " row keypoints")
        seen["mosaic" if draws[0] else "plain"] += 1
        seen["mixup"] += int(draws[28])
        seen["flipud"] += int(draws[30])
        seen["fliplr"] += int(draws[31])
        seen["kept"] += n
    # every path of the chain was taken, with instances left to compare
    paths = ("plain", "flipud", "fliplr") if rect else ("mosaic", "plain", "mixup", "flipud", "fliplr") + (
        ("cutmix",) if cp_mode == "flip" else ())
    assert all(seen[k] > 0 for k in paths), seen
    assert seen["kept"] > 40, seen
    assert task != "pose" or seen["hidden"] > 0, seen
    assert seen["pasted"] > 5 if copy_paste and task != "pose" else seen["pasted"] == 0, seen


def test_max_boxes_drops_the_rest():
    """More instances than max_boxes: the first max_boxes rows are written,
    the instances kept whole (the rest counted as dropped by the daemon)."""
    rng = np.random.default_rng(7)
    samples = make_samples(rng, "segment", 96, 6)
    hyp = dict(hsv_h=0, hsv_s=0, hsv_v=0, degrees=0.0, translate=0.0, scale=0.0, shear=0.0, perspective=0.0,
               flipud=0.0, fliplr=0.0, mosaic=1.0, mixup=0.0, cutmix=0.0)
    lines = run_tool(tool_input("segment", 96, 1, 0, samples, hyp, 1))
    n = int(lines[1].split()[0])
    assert n > 1
    assert int(lines[2].split()[0]) == 1
