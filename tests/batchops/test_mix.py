"""Batch ops (MixUp / CutMix) against their references: a mixed batch equals
the unmixed batch (same seed, no batch op) mixed by torchvision's or timm's
own code with the lambda and box stoker drew; the draws' distributions over
100,000 batches against the references' own draws; bad parameters refused at
attach by op and parameter."""

import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2")
timm_mixup = pytest.importorskip("timm.data.mixup")

import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from stoker import batch_transforms  # noqa: E402
from stoker_testutil import BUILD  # noqa: E402

SMALL = dict(image_size=32, batch_size=8, seed=11)
CLASSES = 4  # the `dataset` fixture's
N_DRAWS = 100_000


def pairs(dataset, sock, op, **kw):
    """(unmixed, mixed) batches of the same seed: images, labels, and the
    mixed one's soft labels and records, as copies."""
    opts = dict(SMALL, socket=sock, **kw)
    if "transforms" in kw:
        opts.pop("image_size")  # the pipeline's output size
    out = []
    with stoker.Loader(dataset, **opts) as a, stoker.Loader(dataset, batch_transform=op, **opts) as b:
        for x, y in zip(a, b):
            assert np.array_equal(x.labels, y.labels) and np.array_equal(x.indices, y.indices)
            assert y.soft_labels.dtype == np.float32 and y.soft_labels.shape == (len(y.labels), y.soft_labels.shape[1])
            out.append((x.images.copy(), x.labels.copy(), y.images.copy(), y.soft_labels.copy(), y.mix.copy()))
    assert out
    return out


def as_float_nchw(images):
    t = torch.from_numpy(np.ascontiguousarray(images))
    if t.dtype == torch.uint8:
        return t.permute(0, 3, 1, 2).float()  # HWC -> CHW, as the reference needs floats
    return t


def back(t, like):
    """The reference's float result in the loader's layout and dtype (uint8:
    rounded to nearest even, as stoker and timm's FastCollateMixup do)."""
    if like.dtype == np.uint8:
        return np.clip(np.rint(t.permute(0, 2, 3, 1).numpy()), 0, 255)
    return t.numpy()


def check_pixels(got, want, dtype):
    got = got.astype(np.float64)
    if dtype == "float16":
        assert np.abs(got - want).max() <= 2e-3 * max(1.0, np.abs(want).max())
    else:
        # uint8 and float32: the same float32 arithmetic, so exact
        assert np.abs(got - want).max() <= (0 if dtype == "uint8" else 1e-6)


def tv_reference(kind, alpha, unmixed, labels, rec):
    """torchvision v2's own transform() with stoker's drawn parameters."""
    t = (v2.MixUp if kind == 1 else v2.CutMix)(alpha=alpha, num_classes=CLASSES)
    x = as_float_nchw(unmixed).clone()
    lab = torch.from_numpy(labels)
    if kind == 1:
        params = {"lam": float(rec["lam_drawn"]), "labels": lab, "batch_size": len(lab)}
    else:
        params = {"box": (int(rec["x1"]), int(rec["y1"]), int(rec["x2"]), int(rec["y2"])),
                  "lam_adjusted": float(rec["lam"]), "labels": lab, "batch_size": len(lab)}
    return t.transform(x, params), t.transform(lab, params)


@pytest.mark.parametrize("dtype", ["uint8", "float32", "float16"])
@pytest.mark.parametrize("op", [("MixUp", {"alpha": 0.2}), ("CutMix", {"alpha": 1.0}),
                                ("RandomChoice", {"transforms": [("MixUp", {"alpha": 0.2}),
                                                                 ("CutMix", {"alpha": 1.0})]})])
def test_torchvision_mix_equals_reference_on_unmixed_batch(daemon, dataset, dtype, op):
    d = daemon()
    kinds = set()
    for unmixed, labels, mixed, soft, mix in pairs(dataset, d.socket, op, dtype=dtype):
        n = len(labels)
        assert np.array_equal(mix["partner"], (np.arange(n) - 1) % n)  # rolled by one
        rec = mix[0]
        assert len(set(mix["lam"])) == 1 and len(set(mix["kind"])) == 1  # one draw per batch
        kind = int(rec["kind"])
        kinds.add(kind)
        alpha = 0.2 if kind == 1 else 1.0
        ref_images, ref_soft = tv_reference(kind, alpha, unmixed, labels, rec)
        check_pixels(mixed, back(ref_images, mixed), dtype)
        assert ref_soft.dtype == torch.float32
        assert np.array_equal(soft, ref_soft.numpy())  # labels exact
    assert kinds <= {1, 2}


def timm_reference(m, unmixed, labels, mix, monkeypatch):
    """timm's own Mixup.__call__ with its draws replaced by stoker's (lam,
    use_cutmix per batch or element, and each CutMix box in turn)."""
    boxes = iter([(int(r["y1"]), int(r["y2"]), int(r["x1"]), int(r["x2"])) for r in mix if r["kind"] == 2])
    monkeypatch.setattr(timm_mixup, "rand_bbox", lambda *a, **k: next(boxes))
    monkeypatch.setattr(timm_mixup, "rand_bbox_minmax", lambda *a, **k: next(boxes))
    n = len(labels)
    if m.mode == "batch":
        r = mix[0]
        monkeypatch.setattr(m, "_params_per_batch", lambda: (float(r["lam_drawn"]), bool(r["kind"] == 2)))
    else:
        half = n // 2 if m.mode == "pair" else n
        lam = np.array(mix["lam_drawn"][:half], dtype=np.float32)
        cut = np.array(mix["kind"][:half] == 2)
        monkeypatch.setattr(m, "_params_per_elem", lambda size: (lam.copy(), cut.copy()))
        if m.mode == "pair":
            # timm draws a pair's box once and pastes it both ways
            boxes = iter([(int(r["y1"]), int(r["y2"]), int(r["x1"]), int(r["x2"]))
                          for r in mix[:half] if r["kind"] == 2])
            monkeypatch.setattr(timm_mixup, "rand_bbox", lambda *a, **k: next(boxes))
            monkeypatch.setattr(timm_mixup, "rand_bbox_minmax", lambda *a, **k: next(boxes))
    x = as_float_nchw(unmixed).clone()
    return m(x, torch.from_numpy(labels))


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("params", [
    dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, mode="batch", label_smoothing=0.1),
    dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, mode="pair", label_smoothing=0.1, prob=0.8),
    dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, mode="elem", label_smoothing=0.0, prob=0.7),
    dict(mixup_alpha=0.0, cutmix_alpha=1.0, cutmix_minmax=(0.2, 0.8), mode="batch", correct_lam=False),
])
def test_timm_mix_equals_reference_on_unmixed_batch(daemon, dataset, dtype, params, monkeypatch):
    d = daemon()
    m = timm_mixup.Mixup(num_classes=CLASSES, **params)
    op = batch_transforms.from_object(m)
    for unmixed, labels, mixed, soft, mix in pairs(dataset, d.socket, op, dtype=dtype, drop_last=True):
        n = len(labels)
        assert np.array_equal(mix["partner"], n - 1 - np.arange(n))  # x.flip(0)
        with monkeypatch.context() as mp:
            ref_images, ref_soft = timm_reference(m, unmixed, labels, mix, mp)
        check_pixels(mixed, back(ref_images, mixed), dtype)
        assert np.array_equal(soft, ref_soft.numpy())  # labels exact
        # the corrected lambda is the one the targets use
        if m.mode == "batch" and mix[0]["kind"] == 2:
            r = mix[0]
            area = (r["y2"] - r["y1"]) * (r["x2"] - r["x1"])
            assert r["lam"] == 1.0 - area / float(32 * 32)


def test_per_sample_pixels_unchanged_by_batch_op_where_not_mixed(daemon, dataset):
    """The batch op's own stream: a CutMix batch outside its box is the
    unmixed batch, byte for byte."""
    d = daemon()
    for unmixed, labels, mixed, soft, mix in pairs(dataset, d.socket, ("CutMix", {"alpha": 1.0})):
        r = mix[0]
        keep = np.ones(unmixed.shape[1:3], bool)
        keep[r["y1"]:r["y2"], r["x1"]:r["x2"]] = False
        assert np.array_equal(mixed[:, keep], unmixed[:, keep])


def test_torch_loader_yields_soft_targets(daemon, dataset):
    d = daemon()
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)])
    with stoker.torch.Loader(dataset, socket=d.socket, batch_transform=mix, **SMALL) as ld:
        for images, targets in ld:
            assert targets.dtype == torch.float32 and tuple(targets.shape) == (len(images), CLASSES)
            assert torch.allclose(targets.sum(1), torch.ones(len(images)), atol=1e-6)
            break


def test_stats_count_the_batch_ops_cpu_time(daemon, dataset):
    """stats' worker_batch_op_seconds grows with batches mixed (float32
    images at 96 px: the mixing takes measurable CPU) and not without a
    batch op."""
    d = daemon()
    opts = dict(SMALL, image_size=96, dtype="float32", socket=d.socket)
    s0 = stoker.stats(d.socket)
    with stoker.Loader(dataset, **opts) as ld:
        n = sum(len(b.labels) for b in ld)
    s1 = stoker.stats(d.socket)
    assert n > 0 and s1["worker_batch_op_seconds"] == s0["worker_batch_op_seconds"] == 0
    with stoker.Loader(dataset, batch_transform=("MixUp", {"alpha": 0.2}), **opts) as ld:
        n = sum(len(b.labels) for b in ld)
    s2 = stoker.stats(d.socket)
    assert n > 0 and s2["worker_batch_op_seconds"] > 0
    # a part of the workers' time, not more
    assert s2["worker_batch_op_seconds"] < s2["worker_busy_seconds"] - s1["worker_busy_seconds"]


def test_translation_reads_every_parameter():
    rc = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=10), v2.CutMix(alpha=1.0, num_classes=10)], p=[1, 3])
    assert batch_transforms.to_text(batch_transforms.from_object(rc)) == (
        "RandomChoice(MixUp(alpha=0.2, num_classes=10), CutMix(alpha=1.0, num_classes=10), p=(0.25, 0.75))")
    m = timm_mixup.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=None, prob=0.9, switch_prob=0.4,
                         mode="elem", correct_lam=False, label_smoothing=0.2, num_classes=7)
    assert batch_transforms.to_text(batch_transforms.from_object(m)) == (
        "timm.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=None, prob=0.9, switch_prob=0.4, "
        "mode=elem, correct_lam=False, label_smoothing=0.2, num_classes=7)")


@pytest.mark.parametrize("obj,name", [
    (lambda: v2.RandomHorizontalFlip(), "RandomHorizontalFlip"),
    (lambda: v2.RandomChoice([v2.MixUp(alpha=1.0, num_classes=4), v2.RandomHorizontalFlip()]),
     "RandomHorizontalFlip"),
    (lambda: v2.MixUp(alpha=1.0, num_classes=4, labels_getter=lambda x: x[1]), "labels_getter"),
    (lambda: object(), "object"),
])
def test_torch_loader_refuses_what_is_not_a_batch_op(daemon, dataset, obj, name):
    with pytest.raises(ValueError, match=name):
        stoker.torch.Loader(dataset, socket="/nonexistent", batch_transform=obj(), **SMALL)


@pytest.mark.parametrize("op,words", [
    (("MixUp", {"alpha": -1}), "MixUp: alpha"),
    (("CutMix", {"alpha": 0}), "CutMix: alpha"),
    (("MixUp", {"beta": 1}), "MixUp: unknown parameter beta"),
    (("MixUp", {"num_classes": 2}), "num_classes 2 is below the data set's 4"),
    (("RandomChoice", {"transforms": [("MixUp", {})], "p": [0.5, 0.5]}), "RandomChoice: p has 2"),
    ("Solarize(p=1)", "Solarize is not a batch op"),
    (("timm.Mixup", {"mode": "row"}), "timm.Mixup: mode"),
    (("timm.Mixup", {"switch_prob": 1.5}), "timm.Mixup: switch_prob"),
    (("timm.Mixup", {"label_smoothing": -0.1}), "timm.Mixup: label_smoothing"),
    (("timm.Mixup", {"cutmix_minmax": (0.9, 0.2)}), "timm.Mixup: cutmix_minmax"),
    (("timm.Mixup", {"mixup_alpha": 0, "cutmix_alpha": 0}), "mixup_alpha or cutmix_alpha"),
    (("timm.Mixup", {"multi_label": True}), "multi_label"),
])
def test_bad_parameters_refused_at_attach_by_name(daemon, dataset, op, words):
    d = daemon()
    with pytest.raises(stoker.StokerError, match=words):
        stoker.Loader(dataset, socket=d.socket, batch_transform=op, **SMALL)


def test_timm_odd_batch_refused(daemon, dataset):
    d = daemon()
    with pytest.raises(stoker.StokerError, match="odd"):
        stoker.Loader(dataset, socket=d.socket, batch_transform=("timm.Mixup", {}), image_size=32, batch_size=7)


# ---- distributions: 100,000 draws of stoker's C code against the references' ----

REC = stoker.MIX_DTYPE


def draws(text, n=N_DRAWS, count=1, size=(224, 224), seed=1):
    r = subprocess.run([str(BUILD / "tests" / "batchmix"), "-s", str(seed), "-c", str(count),
                        "-g", f"{size[0]}x{size[1]}", "-n", str(n), text], capture_output=True, check=True)
    return np.frombuffer(r.stdout, REC)


def beta_draws(a, b, n=N_DRAWS, seed=1):
    r = subprocess.run([str(BUILD / "tests" / "batchmix"), "-s", str(seed), "-b", f"{a},{b}", "-n", str(n)],
                       capture_output=True, check=True)
    return np.frombuffer(r.stdout, np.float64)


def ks_same(x, y, alpha_coef=1.95):
    """Two-sample Kolmogorov-Smirnov at the 0.1% level (1.95 sqrt((n+m)/nm));
    conservative for discrete values."""
    x, y = np.sort(np.asarray(x, np.float64)), np.sort(np.asarray(y, np.float64))
    grid = np.concatenate([x, y])
    d = np.abs(np.searchsorted(x, grid, "right") / len(x) - np.searchsorted(y, grid, "right") / len(y)).max()
    crit = alpha_coef * np.sqrt((len(x) + len(y)) / (len(x) * len(y)))
    assert d < crit, f"KS distance {d:.4f} >= {crit:.4f}"


def freq_same(p_got, p_want, n):
    assert abs(p_got - p_want) < 4.5 * np.sqrt(max(p_want * (1 - p_want), 1e-9) / n) + 1e-9


@pytest.mark.parametrize("a", [0.2, 0.8, 1.0, 2.5])
def test_beta_matches_numpy_and_torch(a):
    got = beta_draws(a, a)
    assert got.min() >= 0 and got.max() <= 1
    ks_same(got, np.random.default_rng(0).beta(a, a, N_DRAWS))  # timm's np.random.beta (float64)
    # torch's Beta is float32, clamped below 1 (torchvision's lambdas: test_torchvision_draws...)
    torch.manual_seed(0)
    ref = torch.distributions.Beta(torch.tensor([a]), torch.tensor([a])).sample((N_DRAWS,)).flatten()
    ks_same(np.minimum(got.astype(np.float32), ref.max().item()), ref)


def test_torchvision_draws_match_make_params():
    torch.manual_seed(0)
    h, w = 224, 160
    got = draws("RandomChoice(MixUp(alpha=0.2), CutMix(alpha=1.0), p=(0.3, 0.7))", size=(w, h))
    freq_same((got["kind"] == 2).mean(), 0.7, N_DRAWS)
    mixup, cut = got[got["kind"] == 1], got[got["kind"] == 2]
    ref_mix = torch.distributions.Beta(torch.tensor([0.2]), torch.tensor([0.2])).sample((len(mixup),)).flatten()
    ks_same(mixup["lam"], ref_mix)
    # torch's Beta is float32: so are the drawn lambdas
    assert np.array_equal(got["lam_drawn"], got["lam_drawn"].astype(np.float32).astype(np.float64))
    t = v2.CutMix(alpha=1.0, num_classes=10)
    img = torch.empty(1, 3, h, w)
    ref = [t.make_params([img]) for _ in range(len(cut))]
    ref_box = np.array([p["box"] for p in ref])
    ref_lam = np.array([p["lam_adjusted"] for p in ref])
    ks_same(cut["lam"], ref_lam)
    for col, k in (("x1", 0), ("y1", 1), ("x2", 2), ("y2", 3)):
        ks_same(cut[col], ref_box[:, k])
    ks_same(cut["x2"] - cut["x1"], ref_box[:, 2] - ref_box[:, 0])
    assert (cut["x2"] <= w).all() and (cut["y2"] <= h).all() and (cut["x1"] >= 0).all()
    # the corrected lambda is the pasted area's, as the reference's
    area = (cut["x2"] - cut["x1"]) * (cut["y2"] - cut["y1"])
    assert np.array_equal(cut["lam"], 1.0 - area / (w * h))


def timm_ref_batch(m, n, shape):
    np.random.seed(0)
    out = []
    for _ in range(n):
        lam, cut = m._params_per_batch()
        box = (0, 0, 0, 0)
        if lam != 1.0 and cut:
            (yl, yh, xl, xh), lam = timm_mixup.cutmix_bbox_and_lam(shape, lam, ratio_minmax=m.cutmix_minmax,
                                                                  correct_lam=m.correct_lam)
            box = (xl, yl, xh, yh)
        out.append((lam, cut and lam != 1.0) + tuple(int(v) for v in box))
    return np.array(out, dtype=np.float64)


@pytest.mark.parametrize("params", [
    dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, prob=1.0),
    dict(mixup_alpha=0.2, cutmix_alpha=0.0, prob=0.6),
    dict(mixup_alpha=0.0, cutmix_alpha=1.0, cutmix_minmax=(0.2, 0.8), correct_lam=True),
    dict(mixup_alpha=0.0, cutmix_alpha=1.0, correct_lam=False),
])
def test_timm_batch_draws_match_params_per_batch(params):
    m = timm_mixup.Mixup(num_classes=10, **params)
    h, w = 224, 192
    got = draws(batch_transforms.to_text(batch_transforms.from_object(m)), size=(w, h))
    ref = timm_ref_batch(m, N_DRAWS, (1, 3, h, w))
    freq_same((got["kind"] == 2).mean(), ref[:, 1].mean(), N_DRAWS)
    freq_same((got["kind"] == 0).mean(), (ref[:, 0] == 1.0).mean(), N_DRAWS)
    ks_same(got["lam"], ref[:, 0])
    cut, rcut = got[got["kind"] == 2], ref[ref[:, 1] == 1]
    if len(rcut):
        for col, k in (("x1", 2), ("y1", 3), ("x2", 4), ("y2", 5)):
            ks_same(cut[col], rcut[:, k])
        ks_same(cut["y2"] - cut["y1"], rcut[:, 5] - rcut[:, 3])


@pytest.mark.parametrize("mode", ["elem", "pair"])
def test_timm_elem_draws_match_params_per_elem(mode):
    m = timm_mixup.Mixup(num_classes=10, mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.3, prob=0.8, mode=mode)
    count = 16
    got = draws(batch_transforms.to_text(batch_transforms.from_object(m)), n=N_DRAWS // count, count=count)
    half = got.reshape(-1, count)[:, : count // 2 if mode == "pair" else count].reshape(-1)
    np.random.seed(0)
    lam, cut = m._params_per_elem(len(half))
    freq_same((half["kind"] == 2).mean(), (cut & (lam != 1)).mean(), len(half))
    ks_same(half["lam_drawn"], lam)
    if mode == "pair":
        g = got.reshape(-1, count)
        assert np.array_equal(g[:, :8]["lam"], g[:, ::-1][:, :8]["lam"])  # a pair shares its draw


RECIPE = [("RandomResizedCrop", {"size": 32}), ("RandomHorizontalFlip", {"p": 0.5}),
          ("TrivialAugmentWide", {}), ("ToDtype", {"dtype": "float32", "scale": True}),
          ("Normalize", {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}),
          ("RandomErasing", {"p": 0.1})]


def test_recipe_pipeline_then_batch_op_equals_reference(daemon, dataset):
    """torchvision's ResNet-50 v2 recipe: the per-sample pipeline (issue 19's),
    then RandomChoice(MixUp, CutMix) and repeated augmentation: each mixed
    batch is the same pipeline's unmixed batch mixed by torchvision."""
    d = daemon()
    op = ("RandomChoice", {"transforms": [("MixUp", {"alpha": 0.2}), ("CutMix", {"alpha": 1.0})]})
    got = pairs(dataset, d.socket, op, transforms=RECIPE, aug_repeats=4, aug_selected_round=0)
    for unmixed, labels, mixed, soft, mix in got:
        assert unmixed.dtype == np.float32
        rec = mix[0]
        ref_images, ref_soft = tv_reference(int(rec["kind"]), 0.2 if rec["kind"] == 1 else 1.0, unmixed, labels,
                                            rec)
        check_pixels(mixed, ref_images.numpy(), "float32")
        assert np.array_equal(soft, ref_soft.numpy())
