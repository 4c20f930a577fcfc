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
