"""The pixel ops of daemon/pixels/pixelops.h against their references.

Parity: each op on real photos (data/photos, as PNG both sides read alike)
against what torchvision's PIL path or PIL itself computes, within 1 per
pixel (most are exact: the max difference each reaches is asserted, not
just the bound). Draws: >= 100,000 parameter sets from stoker's code
(tests/tools/pixelop -n) against as many from the reference's own code,
category by category and bin by bin within 5 standard errors.
"""

import math

import numpy as np
import pytest

from pixelop_util import RGB_PHOTOS, apply, as_png, draws, max_diff, refused

PIL = pytest.importorskip("PIL")
from PIL import ImageEnhance, ImageOps  # noqa: E402

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.v2.functional")
T = pytest.importorskip("torchvision.transforms.v2")

N_DRAWS = 100_000


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("photos")
    return [as_png(tmp, name) for name in RGB_PHOTOS + ["camera.png"]]


# (op, params, reference on a PIL image, the max difference allowed)
DETERMINISTIC = [
    ("ColorJitter", {"brightness": [1.7, 1.7]}, lambda im: ImageEnhance.Brightness(im).enhance(1.7), 0),
    ("ColorJitter", {"brightness": [0.3, 0.3]}, lambda im: ImageEnhance.Brightness(im).enhance(0.3), 0),
    ("ColorJitter", {"contrast": [1.8, 1.8]}, lambda im: ImageEnhance.Contrast(im).enhance(1.8), 0),
    ("ColorJitter", {"contrast": [0.4, 0.4]}, lambda im: ImageEnhance.Contrast(im).enhance(0.4), 0),
    ("ColorJitter", {"saturation": [1.9, 1.9]}, lambda im: ImageEnhance.Color(im).enhance(1.9), 0),
    ("ColorJitter", {"saturation": [0.2, 0.2]}, lambda im: ImageEnhance.Color(im).enhance(0.2), 0),
    ("ColorJitter", {"hue": [0.2, 0.2]}, lambda im: F.adjust_hue(im, 0.2), 0),
    ("ColorJitter", {"hue": [-0.37, -0.37]}, lambda im: F.adjust_hue(im, -0.37), 0),
    ("Grayscale", {"num_output_channels": 3}, lambda im: F.rgb_to_grayscale(im, 3), 0),
    ("RandomGrayscale", {"p": 1}, lambda im: F.rgb_to_grayscale(im, 3), 0),
    ("RandomPosterize", {"bits": 3, "p": 1}, lambda im: F.posterize(im, 3), 0),
    ("RandomSolarize", {"threshold": 100, "p": 1}, lambda im: F.solarize(im, 100), 0),
    ("RandomSolarize", {"threshold": 127.5, "p": 1}, lambda im: F.solarize(im, 127.5), 0),
    ("RandomEqualize", {"p": 1}, lambda im: F.equalize(im), 0),
    ("RandomAutocontrast", {"p": 1}, lambda im: F.autocontrast(im), 0),
    ("RandomAdjustSharpness", {"sharpness_factor": 2.5, "p": 1}, lambda im: F.adjust_sharpness(im, 2.5), 0),
    ("RandomAdjustSharpness", {"sharpness_factor": 0.3, "p": 1}, lambda im: F.adjust_sharpness(im, 0.3), 0),
    ("RandomInvert", {"p": 1}, lambda im: F.invert(im), 0),
    # torchvision's tensor kernel (float conv2d), rounded: within 1
    ("GaussianBlur", {"kernel_size": 9, "sigma": [1.5, 1.5]}, lambda im: F.gaussian_blur(im, [9, 9], [1.5, 1.5]), 1),
    ("GaussianBlur", {"kernel_size": [5, 11], "sigma": [0.7, 0.7]},
     lambda im: F.gaussian_blur(im, [5, 11], [0.7, 0.7]), 1),
    ("GaussianBlur", {"kernel_size": 23, "sigma": [4.0, 4.0]}, lambda im: F.gaussian_blur(im, [23, 23], [4.0, 4.0]), 1),
]

FIGURES = {}


@pytest.mark.parametrize("op,params,ref,bound", DETERMINISTIC,
                         ids=[f"{c[0]}-{'-'.join(map(str, c[1].values()))}" for c in DETERMINISTIC])
def test_deterministic_parity(photos, op, params, ref, bound):
    worst = 0
    for path, im in photos:
        got = apply(op, params, path)
        want = np.asarray(ref(im).convert("RGB"))
        worst = max(worst, max_diff(got, want))
    FIGURES[(op, str(params))] = worst
    print(f"parity {op} {params}: max abs diff {worst}")
    assert worst <= bound


def test_random_p_skips(photos):
    """p=0 leaves the image alone."""
    path, im = photos[0]
    for op, params in [("RandomInvert", {"p": 0}), ("RandomEqualize", {"p": 0}),
                       ("RandomPosterize", {"bits": 2, "p": 0}), ("RandomGrayscale", {"p": 0})]:
        assert max_diff(apply(op, params, path), np.asarray(im)) == 0, op


@pytest.mark.parametrize("op,params,word", [
    ("ColorJitter", {"brightness": -1}, "brightness"),
    ("ColorJitter", {"hue": 0.7}, "hue"),
    ("ColorJitter", {"saturation": [2, 1]}, "saturation"),
    ("RandomPosterize", {"bits": 9}, "bits"),
    ("RandomSolarize", {"threshold": 10, "p": -0.1}, "p"),
    ("GaussianBlur", {"kernel_size": 4}, "kernel_size"),
    ("GaussianBlur", {"kernel_size": 3, "sigma": [0, 1]}, "sigma"),
    ("RandomGrayscale", {"q": 1}, "q"),
])
def test_bounds_refused(op, params, word):
    msg = refused(op, params)
    assert msg and op in msg and word in msg, msg


# ---- distributions ----

def close_freqs(a, b, what, sigmas=5.0):
    """Two samples of categories (dicts of counts) agree within `sigmas` standard errors each."""
    na, nb = sum(a.values()), sum(b.values())
    for k in set(a) | set(b):
        pa, pb = a.get(k, 0) / na, b.get(k, 0) / nb
        p = (a.get(k, 0) + b.get(k, 0)) / (na + nb)
        se = math.sqrt(max(p * (1 - p), 1e-12) * (1 / na + 1 / nb))
        assert abs(pa - pb) <= sigmas * se + 1e-12, f"{what} {k}: {pa:.5f} vs {pb:.5f} (se {se:.5f})"


def close_values(a, b, what, lo, hi, bins=20):
    """Two samples of a continuous draw: same histogram on [lo, hi], bin by bin."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.min() >= lo - 1e-6 and a.max() <= hi + 1e-6, (what, a.min(), a.max())
    ha, _ = np.histogram(a, bins=bins, range=(lo, hi))
    hb, _ = np.histogram(b, bins=bins, range=(lo, hi))
    close_freqs(dict(enumerate(ha)), dict(enumerate(hb)), what)


def test_color_jitter_draws():
    cj = T.ColorJitter(brightness=0.4, contrast=(0.5, 1.2), saturation=0.4, hue=0.1)
    got = draws("ColorJitter", {"brightness": 0.4, "contrast": [0.5, 1.2], "saturation": 0.4, "hue": 0.1},
                N_DRAWS, size="2x2")
    assert len(got) == N_DRAWS
    torch.manual_seed(0)
    ref = [cj.make_params([]) for _ in range(N_DRAWS)]
    perm_a, perm_b = {}, {}
    for d in got:
        k = tuple(int(v) for n, v in d if n == "order")
        perm_a[k] = perm_a.get(k, 0) + 1
    for p in ref:
        k = tuple(p["fn_idx"].tolist())
        perm_b[k] = perm_b.get(k, 0) + 1
    assert len(perm_a) == 24
    close_freqs(perm_a, perm_b, "ColorJitter order")
    for name, key, lo, hi in [("brightness", "brightness_factor", 0.6, 1.4), ("contrast", "contrast_factor", 0.5, 1.2),
                              ("saturation", "saturation_factor", 0.6, 1.4), ("hue", "hue_factor", -0.1, 0.1)]:
        a = [v for d in got for n, v in d if n == name]
        assert len(a) == N_DRAWS
        close_values(a, [p[key] for p in ref], f"ColorJitter {name}", lo, hi)


def test_gaussian_blur_sigma_draws():
    got = [v for d in draws("GaussianBlur", {"kernel_size": 3, "sigma": [0.1, 2.0]}, N_DRAWS, size="2x2")
           for n, v in d if n == "sigma"]
    gb = T.GaussianBlur(3, sigma=(0.1, 2.0))
    torch.manual_seed(0)
    ref = [gb.make_params([])["sigma"][0] for _ in range(N_DRAWS)]
    close_values(got, ref, "GaussianBlur sigma", 0.1, 2.0)


@pytest.mark.parametrize("op,params,p", [("RandomGrayscale", {"p": 0.1}, 0.1), ("RandomInvert", {"p": 0.5}, 0.5),
                                         ("RandomPosterize", {"bits": 4, "p": 0.3}, 0.3)])
def test_probability_draws(op, params, p):
    got = [v for d in draws(op, params, N_DRAWS, size="1x1") for n, v in d if n == "apply"]
    torch.manual_seed(0)
    # torchvision's _RandomApplyTransform: skipped when torch.rand(1) >= p
    ref = (torch.rand(N_DRAWS) < p).int().tolist()
    close_freqs({0: got.count(0), 1: got.count(1)}, {0: ref.count(0), 1: ref.count(1)}, op)


# ---- the policies' ops at fixed magnitudes ----

def _tv_policy_ref(interp, fill):
    from torchvision.transforms import InterpolationMode
    return T.RandAugment(interpolation=getattr(InterpolationMode, interp.upper()), fill=fill)


TV_OPS = [("ShearX", 0.27), ("ShearY", -0.3), ("ShearX", 0.99), ("TranslateX", -67.2), ("TranslateY", 31.0),
          ("Rotate", 21.0), ("Rotate", -135.0), ("Rotate", 90.0), ("Rotate", 180.0), ("Brightness", 0.5),
          ("Color", -0.6), ("Contrast", 0.9), ("Sharpness", -0.9), ("Posterize", 5), ("Solarize", 0.5333333),
          ("AutoContrast", 0.0), ("Equalize", 0.0), ("Invert", 0.0)]
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


@pytest.mark.parametrize("interp", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("fill", [None, [10, 200, 30]])
def test_torchvision_policy_ops(photos, interp, fill):
    """Each op of torchvision's policies at a fixed magnitude, as its own
    _apply_image_or_video_transform computes it on a PIL image."""
    ra = _tv_policy_ref(interp, fill)
    params = {"interpolation": interp}
    if fill:
        params["fill"] = fill
    worst = {}
    for path, im in photos[:3]:
        for op, m in TV_OPS:
            if interp != "nearest" and op not in GEOMETRIC:
                continue
            got = apply("RandAugment", params, path, forced=f"{op}:{m}")
            want = np.asarray(ra._apply_image_or_video_transform(im, op, m, interpolation=ra.interpolation,
                                                                   fill=ra._fill))
            worst[op] = max(worst.get(op, 0), max_diff(got, want))
    print(f"parity torchvision policy ops ({interp}, fill {fill}): {worst}")
    assert max(worst.values()) == 0, worst


TIMM_OPS = [("Rotate", -21.0), ("ShearX", 0.27), ("ShearY", -0.12), ("TranslateXRel", 0.3),
            ("TranslateYRel", -0.405), ("Posterize", 2), ("Solarize", 100), ("SolarizeAdd", 77), ("Color", 1.9),
            ("Contrast", 0.2), ("Brightness", 1.5), ("Sharpness", 1.72), ("AutoContrast", 0), ("Equalize", 0),
            ("Invert", 0)]


@pytest.mark.parametrize("interp", ["bilinear", "bicubic", "nearest"])
def test_timm_policy_ops(photos, interp):
    """timm's op functions (auto_augment.NAME_TO_OP) with their own fill and resample."""
    aa = pytest.importorskip("timm.data.auto_augment")
    from PIL import Image
    rs = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}[interp]
    mean = (124, 116, 104)
    worst = {}
    for path, im in photos[:3]:
        for op, arg in TIMM_OPS:
            got = apply("rand_augment_transform", {"config_str": "rand-m9-n2", "img_mean": list(mean)}, path,
                        forced=f"{op}:{arg}:{interp}")
            fn = aa.NAME_TO_OP[op]
            want = np.asarray(fn(im) if op in ("AutoContrast", "Equalize", "Invert")
                              else fn(im, arg, fillcolor=mean, resample=rs))
            worst[op] = max(worst.get(op, 0), max_diff(got, want))
    print(f"parity timm policy ops ({interp}): {worst}")
    assert max(worst.values()) == 0, worst


def test_policies_refused():
    for op, params, word in [("RandAugment", {"magnitude": 31}, "magnitude"),
                             ("RandAugment", {"num_ops": -1}, "num_ops"),
                             ("RandAugment", {"num_magnitude_bins": 1}, "num_magnitude_bins"),
                             ("RandAugment", {"interpolation": "lanczos"}, "interpolation"),
                             ("TrivialAugmentWide", {"fill": [1, 2]}, "fill"),
                             ("AutoAugment", {"policy": "mnist"}, "policy"),
                             ("AugMix", {"severity": 0}, "severity"),
                             ("AugMix", {"interpolation": "bicubic"}, "interpolation"),
                             ("rand_augment_transform", {"config_str": "rand-m9-x3"}, "config_str"),
                             ("rand_augment_transform", {"config_str": "rand-m9-t3a"}, "config_str"),
                             ("rand_augment_transform", {}, "config_str"),
                             ("auto_augment_transform", {"config_str": "v1"}, "config_str"),
                             ("auto_augment_transform", {"config_str": "v0", "img_mean": [300, 0, 0]}, "img_mean")]:
        msg = refused(op, params)
        assert msg and op in msg and word in msg, (op, params, msg)


# ---- the policies' draws ----

TV_PRIMS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
            "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert"]


def _tv_ours(op, params, n):
    """Per sample, the tuple of (op, magnitude) applied, from stoker's trace."""
    out = []
    for d in draws(op, params, n, size="8x8"):
        steps, cur = [], None
        for name, v in d:
            if name == "op":
                cur = TV_PRIMS[int(v)]
            elif name == "magnitude":
                steps.append((cur, round(v + 0.0, 4) + 0.0))
        out.append(tuple(steps))
    return out


def _tv_ref(policy, n):
    """The same from torchvision's own forward (its op application recorded, the image left alone)."""
    from PIL import Image
    rec = []
    policy._apply_image_or_video_transform = \
        lambda img, tid, mag, interpolation, fill: (rec.append((tid, round(mag + 0.0, 4) + 0.0)), img)[1]
    im = Image.new("RGB", (8, 8))
    torch.manual_seed(0)
    out = []
    for _ in range(n):
        rec.clear()
        policy(im)
        out.append(tuple(rec))
    return out


def _counts(xs):
    c = {}
    for x in xs:
        c[x] = c.get(x, 0) + 1
    return c


@pytest.mark.parametrize("name,params,ref", [
    ("RandAugment", {"num_ops": 1, "magnitude": 9}, lambda: T.RandAugment(num_ops=1, magnitude=9)),
    ("TrivialAugmentWide", {}, lambda: T.TrivialAugmentWide()),
    ("AutoAugment", {}, lambda: T.AutoAugment()),
    ("AutoAugment", {"policy": "cifar10"}, lambda: T.AutoAugment(T.AutoAugmentPolicy.CIFAR10)),
    ("AutoAugment", {"policy": "svhn"}, lambda: T.AutoAugment(T.AutoAugmentPolicy.SVHN)),
])
def test_torchvision_policy_draws(name, params, ref):
    ours = _tv_ours(name, params, N_DRAWS)
    theirs = _tv_ref(ref(), N_DRAWS)
    # op choice, magnitude bin and sign together, per sample
    close_freqs(_counts(ours), _counts(theirs), name)
    # and each op alone
    close_freqs(_counts(s[0] for t in ours for s in t), _counts(s[0] for t in theirs for s in t), name + " ops")


TIMM_NAMES = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "PosterizeIncreasing",
              "PosterizeOriginal", "Solarize", "SolarizeIncreasing", "SolarizeAdd", "Color", "ColorIncreasing",
              "Contrast", "ContrastIncreasing", "Brightness", "BrightnessIncreasing", "Sharpness",
              "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]


def _timm_ours(op, params, n):
    out = []
    for d in draws(op, params, n, size="8x8"):
        steps, cur, arg = [], None, None
        for name, v in d:
            if name == "op":
                cur = TIMM_NAMES[int(v)]
            elif name == "arg":
                arg = v
                steps.append([cur, arg, None])
            elif name == "resample":
                steps[-1][2] = int(v)
        out.append(tuple(tuple(s) for s in steps))
    return out


def _timm_ref(tf, n):
    import random
    rec = []
    ops = tf.ops if hasattr(tf, "ops") else [op for sub in tf.policy for op in sub]
    for op in ops:
        def fn(img, *args, _name=op.name, _orig=op.aug_fn, **kw):
            from timm.data.auto_augment import _interpolation
            rs = _interpolation(dict(kw)) if _name in ("Rotate", "ShearX", "ShearY", "TranslateXRel",
                                                       "TranslateYRel") else None
            rec.append((_name, args[0] if args else 0.0, int(rs) if rs is not None and isinstance(
                kw.get("resample"), (list, tuple)) else None))
            return img
        op.aug_fn = fn
    from PIL import Image
    im = Image.new("RGB", (8, 8))
    random.seed(0)
    np.random.seed(0)
    out = []
    for _ in range(n):
        rec.clear()
        tf(im)
        out.append(tuple(rec))
    return out


def _timm_tf(kind, cfg):
    aa = pytest.importorskip("timm.data.auto_augment")
    hp = dict(translate_const=100, img_mean=(124, 116, 104))
    return aa.rand_augment_transform(cfg, hp) if kind == "rand" else aa.auto_augment_transform(cfg, hp)


@pytest.mark.parametrize("kind,cfg", [("rand", "rand-m9-mstd0.5-inc1"), ("rand", "rand-m7-n3-mstd0"),
                                      ("auto", "original"), ("auto", "v0")])
def test_timm_policy_draws(kind, cfg):
    op = "rand_augment_transform" if kind == "rand" else "auto_augment_transform"
    ours = _timm_ours(op, {"config_str": cfg, "img_mean": [124, 116, 104]}, N_DRAWS)
    theirs = _timm_ref(_timm_tf(kind, cfg), N_DRAWS)
    # which ops ran (choice x probability), how many per sample
    close_freqs(_counts(s[0] for t in ours for s in t), _counts(s[0] for t in theirs for s in t), cfg + " ops")
    close_freqs(_counts(len(t) for t in ours), _counts(len(t) for t in theirs), cfg + " ops per sample")
    # resample choice (bilinear 2 / bicubic 3) of the geometric ops
    close_freqs(_counts(s[2] for t in ours for s in t if s[2] is not None),
                _counts(s[2] for t in theirs for s in t if s[2] is not None), cfg + " resample")
    # the arguments: discrete ones exactly by value, continuous ones (magnitude noise) by histogram
    for name in ("Rotate", "ShearX", "ColorIncreasing", "PosterizeIncreasing", "SolarizeIncreasing", "Color",
                 "PosterizeOriginal", "Solarize", "SolarizeAdd", "TranslateYRel"):
        a = [s[1] for t in ours for s in t if s[0] == name]
        b = [s[1] for t in theirs for s in t if s[0] == name]
        if len(a) < 1000 or len(b) < 1000:
            continue
        if "mstd0." in cfg and name in ("Rotate", "ShearX", "ColorIncreasing", "TranslateYRel"):
            lo, hi = min(min(a), min(b)), max(max(a), max(b))
            close_values(a, b, f"{cfg} {name}", lo, hi)
        else:
            close_freqs(_counts(round(x, 6) for x in a), _counts(round(float(x), 6) for x in b), f"{cfg} {name}")


def test_hue_and_saturation_every_colour(tmp_path):
    """adjust_hue's HSV round trip and ImageEnhance.Color on all 16,777,216 colours: exact."""
    from PIL import Image
    v = np.arange(1 << 24, dtype=np.uint32)
    im = Image.fromarray(np.stack([(v >> 16) & 255, (v >> 8) & 255, v & 255], -1).astype(np.uint8)
                         .reshape(4096, 4096, 3))
    path = tmp_path / "every.png"
    im.save(path)
    for h in (0.2, -0.37):
        assert max_diff(apply("ColorJitter", {"hue": [h, h]}, path), np.asarray(F.adjust_hue(im, h))) == 0, h
    got = apply("ColorJitter", {"saturation": [1.7, 1.7]}, path)
    assert max_diff(got, np.asarray(ImageEnhance.Color(im).enhance(1.7))) == 0


# ---- AugMix: torchvision runs its ops with the tensor kernels ----

AUGMIX_OPS = [("ShearX", 0.27), ("ShearY", -0.3), ("TranslateX", -67.2), ("TranslateY", 31.0), ("Rotate", 21.0),
              ("Rotate", -17.3), ("Rotate", 90.0), ("Rotate", 180.0), ("Brightness", 0.5), ("Brightness", -0.8),
              ("Color", -0.6), ("Color", 0.9), ("Contrast", 0.9), ("Contrast", -0.5), ("Sharpness", -0.9),
              ("Sharpness", 0.7), ("Posterize", 3), ("Posterize", 0), ("Solarize", 0.5333333), ("AutoContrast", 0.0),
              ("Equalize", 0.0)]


@pytest.mark.parametrize("interp", ["bilinear", "nearest"])
@pytest.mark.parametrize("fill", [None, [10, 200, 30]])
def test_augmix_ops(photos, interp, fill):
    """Each AugMix op at a fixed magnitude against AugMix's own _apply_image_or_video_transform on the
    tensor it makes of the PIL image (float32 kernels: grid_sample, blends): within 1."""
    from torchvision.transforms import InterpolationMode
    am = T.AugMix(interpolation=getattr(InterpolationMode, interp.upper()), fill=fill)
    params = {"interpolation": interp}
    if fill:
        params["fill"] = fill
    worst = {}
    for path, im in photos[:3]:
        t = F.pil_to_tensor(im)
        for op, m in AUGMIX_OPS:
            got = apply("AugMix", params, path, forced=f"{op}:{m}")
            want = am._apply_image_or_video_transform(t, op, m, interpolation=am.interpolation,
                                                      fill=am._fill).permute(1, 2, 0).numpy()
            worst[op] = max(worst.get(op, 0), max_diff(got, want))
    print(f"parity AugMix ops ({interp}, fill {fill}): {worst}")
    assert max(worst.values()) <= 1, worst


AUGMIX_PRIMS = TV_PRIMS


@pytest.mark.parametrize("params,kw", [({"severity": 7, "alpha": 0.5}, dict(severity=7, alpha=0.5))])
def test_augmix_draws(params, kw):
    n = N_DRAWS
    ours, m0_a, w0_a = [], [], []
    for d in draws("AugMix", params, n, size="8x8"):
        steps, cur = [], None
        for name, v in d:
            if name == "op":
                cur = AUGMIX_PRIMS[int(v)]
            elif name == "magnitude":
                steps.append((cur, round(v + 0.0, 4) + 0.0))
            elif name == "m0":
                m0_a.append(v)
            elif name == "w" and len(w0_a) < len(m0_a):
                w0_a.append(v)
        ours.append(tuple(steps))
    from PIL import Image
    am = T.AugMix(**kw)
    rec, dirs = [], []
    am._apply_image_or_video_transform = \
        lambda img, tid, mag, interpolation, fill: (rec.append((tid, round(mag + 0.0, 4) + 0.0)), img)[1]
    real = am._sample_dirichlet
    am._sample_dirichlet = lambda p: (lambda r: (dirs.append(r[0].tolist()), r)[1])(real(p))
    im = Image.new("RGB", (8, 8))
    torch.manual_seed(0)
    theirs, m0_b, w0_b = [], [], []
    for _ in range(n):
        rec.clear()
        dirs.clear()
        am(im)
        theirs.append(tuple(rec))
        m0_b.append(dirs[0][0])
        w0_b.append(dirs[1][0] * dirs[0][1])
    close_freqs(_counts(s for t in ours for s in t), _counts(s for t in theirs for s in t), "AugMix op, bin, sign")
    close_freqs(_counts(len(t) for t in ours), _counts(len(t) for t in theirs), "AugMix ops per sample")
    close_values(m0_a, m0_b, "AugMix m[0]", 0, 1)
    close_values(w0_a, w0_b, "AugMix weight of chain 0", 0, 1)
