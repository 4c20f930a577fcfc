"""Random draws follow the references' distributions: 100,000 parameter
sets drawn by stoker's C code (tpipe draw: the daemon's own draw functions)
against as many from torchvision's own get_params (and timm's), compared
coordinate by coordinate with a two-sample Kolmogorov-Smirnov statistic
(critical value at alpha = 1e-4) and by their means."""

import math
import random

import numpy as np
import pytest
import torch
from torchvision import transforms as T

from tpipe_util import draw

N = 100_000       # stoker's draws (C)
N_REF = 20_000    # the reference's (its Python is slow): KS and the means take unequal sizes
W, H = 500, 375


def ks(a, b):
    """The two-sample KS statistic and its critical value at alpha 1e-4."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) -
                      np.searchsorted(b, grid, side="right") / len(b)))
    return d, math.sqrt(-0.5 * math.log(1e-4 / 2)) * math.sqrt((len(a) + len(b)) / (len(a) * len(b)))


def compare(ours, ref, names):
    for k, name in enumerate(names):
        d, crit = ks(ours[:, k], ref[:, k])
        assert d < crit, f"{name}: KS {d:.4f} >= {crit:.4f}"
        se = math.sqrt(ours[:, k].var() / len(ours) + ref[:, k].var() / len(ref))
        assert abs(ours[:, k].mean() - ref[:, k].mean()) < 5 * se + 1e-9, \
            f"{name}: mean {ours[:, k].mean():.3f} vs {ref[:, k].mean():.3f}"


@pytest.fixture(scope="module")
def img():
    return torch.zeros(3, H, W, dtype=torch.uint8)


@pytest.mark.parametrize("scale,ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.35, 1.0), (0.5, 2.0)),
                                         ((0.9, 1.0), (3 / 4, 4 / 3))])
def test_random_resized_crop(img, scale, ratio):
    ours = draw(f"RandomResizedCrop(size=224, scale={scale}, ratio={ratio})", 0, W, H, N)
    torch.manual_seed(0)
    ref = np.array([T.RandomResizedCrop.get_params(img, list(scale), list(ratio)) for _ in range(N_REF)], float)
    compare(ours, ref, ["top", "left", "height", "width"])


def test_random_resized_crop_timm(img):
    """timm's RandomResizedCropAndInterpolation.get_params (Python's random)."""
    from timm.data.transforms import RandomResizedCropAndInterpolation as R
    from PIL import Image
    pil = Image.new("RGB", (W, H))
    random.seed(0)
    ref = np.array([R.get_params(pil, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(N_REF)], float)
    ours = draw("RandomResizedCrop(size=224, interpolation=random)", 0, W, H, N)
    compare(ours, ref, ["top", "left", "height", "width"])


def test_random_crop(img):
    ours = draw("RandomCrop(size=(300, 300))", 0, W, H, N)
    torch.manual_seed(0)
    ref = np.array([T.RandomCrop.get_params(img, (300, 300)) for _ in range(N_REF)], float)
    compare(ours, ref, ["top", "left", "height", "width"])


@pytest.mark.parametrize("p", [0.5, 0.1])
def test_flips(p):
    for name in ("RandomHorizontalFlip", "RandomVerticalFlip"):
        ours = draw(f"CenterCrop(size=8); {name}(p={p})", 1, W, H, N)[:, 0]
        # torchvision: flip when torch.rand(1) < p
        se = math.sqrt(p * (1 - p) / N)
        assert abs(ours.mean() - p) < 5 * se, f"{name}: {ours.mean()} vs {p}"


@pytest.mark.parametrize("p,scale,ratio", [(0.5, (0.02, 0.33), (0.3, 3.3)), (1.0, (0.1, 0.4), (0.5, 2.0))])
def test_random_erasing(p, scale, ratio):
    f = torch.zeros(3, 224, 224)
    ours = draw(f"CenterCrop(size=224); ToTensor(); RandomErasing(p={p}, scale={scale}, ratio={ratio})", 2, 224, 224, N)
    torch.manual_seed(0)
    ref = []
    for _ in range(N_REF):
        if torch.rand(1) < p:
            i, j, h, w, v = T.RandomErasing.get_params(f, scale, ratio, [0])
            ref.append((i, j, h, w) if v is not f else (-1, -1, -1, -1))
        else:
            ref.append((-1, -1, -1, -1))
    ref = np.array(ref, float)
    erased_ours, erased_ref = ours[:, 0] >= 0, ref[:, 0] >= 0
    se = math.sqrt(p * (1 - p) / N + p * (1 - p) / N_REF) + 1e-3
    assert abs(erased_ours.mean() - erased_ref.mean()) < 5 * se
    compare(ours[erased_ours], ref[erased_ref], ["top", "left", "height", "width"])


def test_random_erasing_timm():
    """timm's RandomErasing(probability, mode) draws: u > p skips; 10 tries of area and log-aspect."""
    from timm.data.random_erasing import RandomErasing as TE
    ours = draw("CenterCrop(size=64); ToTensor(); RandomErasing(p=0.25, scale=(0.02, 0.3333333333333333), "
                "ratio=(0.3, 3.3333333333333335), value=pixel)", 2, 64, 64, N)
    te = TE(probability=0.25, mode="pixel", device="cpu")
    random.seed(0)
    boxes = []
    for _ in range(N_REF):
        x = torch.zeros(3, 64, 64)
        te._erase(x, 3, 64, 64, x.dtype)
        nz = (x[0] != 0).nonzero()
        if len(nz):
            t, l = nz.min(0).values.tolist()
            b, r = nz.max(0).values.tolist()
            boxes.append((t, l, b - t + 1, r - l + 1))
        else:
            boxes.append((-1, -1, -1, -1))
    ref = np.array(boxes, float)
    assert abs((ours[:, 0] >= 0).mean() - (ref[:, 0] >= 0).mean()) < 5 * math.sqrt(0.1875 / N_REF)
    compare(ours[ours[:, 0] >= 0], ref[ref[:, 0] >= 0], ["top", "left", "height", "width"])
