"""The geometric ops, erasing and the output dtypes against torchvision's
PIL path (what ImageFolder + transforms compute), on the real photos of
data/photos: each op with each interpolation, crops, padding modes, flips,
erasing, with the draws stoker made replayed through torchvision's
functional ops. Within 1 per pixel (8-bit), nearest exact."""

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

from tpipe_util import PHOTOS, run

MODES = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR,
         "bicubic": InterpolationMode.BICUBIC}
FILTERS = {0: "nearest", 1: "bilinear", 2: "bicubic"}  # pipeline.c's enum interp


def load(path):
    return Image.open(path).convert("RGB")


def assert_close(got, want, what, max_tol=1, mean_tol=0.05):
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.max() <= max_tol and diff.mean() <= mean_tol, \
        f"{what}: max |diff| {diff.max()}, mean {diff.mean():.4f} (at {np.unravel_index(diff.argmax(), diff.shape)})"


def by_op(draws, kind):
    return [(op, v) for op, k, v in draws if k == kind]


@pytest.mark.parametrize("interp", list(MODES))
def test_resize_center_crop(interp):
    text = f"Resize(size=232, interpolation={interp}); CenterCrop(size=224)"
    for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS)):
        want = F.center_crop(F.resize(load(path), 232, MODES[interp]), 224)
        assert_close(got, want, f"{text} {path.name}", max_tol=0 if interp == "nearest" else 1)


@pytest.mark.parametrize("interp", list(MODES))
def test_resize_to_size(interp):
    text = f"Resize(size=(150, 150), interpolation={interp})"
    for path, (_, got) in zip(PHOTOS, run(text, PHOTOS)):
        want = F.resize(load(path), [150, 150], MODES[interp])
        assert_close(got, want, f"{text} {path.name}", max_tol=0 if interp == "nearest" else 1)


def test_resize_max_size():
    text = "Resize(size=100, max_size=120); CenterCrop(size=96)"
    for path, (_, got) in zip(PHOTOS, run(text, PHOTOS)):
        want = F.center_crop(F.resize(load(path), 100, max_size=120), 96)
        assert_close(got, want, f"{text} {path.name}")


@pytest.mark.parametrize("interp", list(MODES) + ["random"])
def test_random_resized_crop(interp):
    text = f"RandomResizedCrop(size=128, interpolation={interp}); RandomHorizontalFlip(p=0.5)"
    seen = set()
    for seed in (3, 4):
        for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS, seed=seed)):
            (_, (top, left, h, w)), = by_op(draws, "crop")
            (_, (mode, *_)), = by_op(draws, "interp")
            (_, (flip, *_)), = by_op(draws, "flip")
            seen.add(FILTERS[int(mode)])
            if interp != "random":
                assert FILTERS[int(mode)] == interp
            want = F.resized_crop(load(path), int(top), int(left), int(h), int(w), [128, 128],
                                  MODES[FILTERS[int(mode)]])
            if flip:
                want = F.hflip(want)
            assert_close(got, want, f"{text} {path.name} seed {seed}",
                         max_tol=0 if FILTERS[int(mode)] == "nearest" else 1)
    if interp == "random":
        assert seen == {"bilinear", "bicubic"}


@pytest.mark.parametrize("interp", list(MODES))
def test_non_square_outputs(interp):
    """(h, w) sizes: RandomResizedCrop((h, w)), Resize((h, w)) and
    CenterCrop((h, w)), each with its draws replayed through torchvision."""
    text = f"RandomResizedCrop(size=(96, 160), interpolation={interp}); RandomHorizontalFlip(p=0.5)"
    tol = 0 if interp == "nearest" else 1
    for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS, seed=11)):
        (_, (top, left, h, w)), = by_op(draws, "crop")
        (_, (flip, *_)), = by_op(draws, "flip")
        want = F.resized_crop(load(path), int(top), int(left), int(h), int(w), [96, 160], MODES[interp])
        if flip:
            want = F.hflip(want)
        assert got.shape == (96, 160, 3)
        assert_close(got, want, f"{text} {path.name}", max_tol=tol)
    text = f"Resize(size=(140, 90), interpolation={interp})"
    for path, (_, got) in zip(PHOTOS, run(text, PHOTOS)):
        assert_close(got, F.resize(load(path), [140, 90], MODES[interp]), f"{text} {path.name}", max_tol=tol)
    text = f"Resize(size=200, interpolation={interp}); CenterCrop(size=(120, 180)); ToTensor()"
    for path, (_, got) in zip(PHOTOS, run(text, PHOTOS)):
        want = F.to_tensor(F.center_crop(F.resize(load(path), 200, MODES[interp]), [120, 180])).numpy()
        assert got.shape == (3, 120, 180) and got.dtype == np.float32
        # the float values of the 8-bit pixels, which are within 1 of PIL's
        assert np.abs(got - want).max() <= 1 / 255 + 1e-6, f"{text} {path.name}"


def test_crop_then_resize_then_crop_and_flip():
    """CenterCrop before a Resize (the filter stops at the crop), a flip
    between the Resize and the CenterCrop after it (mirrored window)."""
    text = ("CenterCrop(size=300); Resize(size=170, interpolation=bicubic); RandomHorizontalFlip(p=1); "
            "CenterCrop(size=150); RandomVerticalFlip(p=1)")
    for path, (_, got) in zip(PHOTOS, run(text, PHOTOS)):
        im = F.resize(F.center_crop(load(path), 300), 170, InterpolationMode.BICUBIC)
        want = F.vflip(F.center_crop(F.hflip(im), 150))
        assert_close(got, want, f"{text} {path.name}")


def test_center_crop_pads():
    text = "Resize(size=60); CenterCrop(size=80)"
    for path, (_, got) in zip(PHOTOS, run(text, PHOTOS)):
        want = F.center_crop(F.resize(load(path), 60), 80)
        assert_close(got, want, f"{text} {path.name}")


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
def test_random_crop_padding(mode):
    text = (f"Resize(size=(90, 90)); RandomCrop(size=96, padding=(4, 7, 9, 2), fill=(10, 200, 30), "
            f"padding_mode={mode}, pad_if_needed=true)")
    for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS, seed=9)):
        (_, (top, left, h, w)), = by_op(draws, "crop")
        im = F.pad(F.resize(load(path), [90, 90]), [4, 7, 9, 2], fill=(10, 200, 30), padding_mode=mode)
        want = F.crop(im, int(top), int(left), int(h), int(w))
        assert_close(got, want, f"{text} {path.name}")


def test_random_crop_alone_is_exact():
    """RandomCrop first, no padding: only the crop's pixels, unresampled."""
    text = "RandomCrop(size=200)"
    for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS, seed=5)):
        (_, (top, left, h, w)), = by_op(draws, "crop")
        want = F.crop(load(path), int(top), int(left), int(h), int(w))
        assert_close(got, want, f"{text} {path.name}", max_tol=0)


def test_random_crop_pad_if_needed_v1():
    """torchvision pads both sides by the shortfall (pad_if_needed)."""
    text = "Resize(size=(50, 70)); RandomCrop(size=64, pad_if_needed=true, padding_mode=reflect)"
    for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS, seed=2)):
        (_, (top, left, h, w)), = by_op(draws, "crop")
        im = F.resize(load(path), [50, 70])
        im = F.pad(im, [0, 64 - 50], padding_mode="reflect")
        want = F.crop(im, int(top), int(left), int(h), int(w))
        assert_close(got, want, f"{text} {path.name}")


def test_erasing_uint8():
    text = "Resize(size=(120, 120)); RandomErasing(p=1, value=(10, 20, 250), scale=(0.1, 0.3))"
    for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS, seed=11)):
        boxes = by_op(draws, "erase")
        assert len(boxes) == 1
        top, left, h, w = (int(x) for x in boxes[0][1])
        t = F.pil_to_tensor(F.resize(load(path), [120, 120]))
        want = F.erase(t, top, left, h, w, torch.tensor([10, 20, 250], dtype=torch.uint8)[:, None, None])
        assert_close(got, want.permute(1, 2, 0).numpy(), f"{text} {path.name}")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_normalize_and_erasing_float(dtype):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    text = (f"RandomResizedCrop(size=112); PILToTensor(); ToDtype(dtype={dtype}, scale=true); "
            f"Normalize(mean={mean}, std={std}); RandomErasing(p=1, value=(0.5, -1, 2))").replace(
        "PILToTensor(); ", "ToDtype(dtype=uint8); ")
    tdt = {"float32": torch.float32, "float16": torch.float16}[dtype]
    for path, (draws, got) in zip(PHOTOS, run(text, PHOTOS, seed=13)):
        (_, (top, left, h, w)), = by_op(draws, "crop")
        (_, (et, el, eh, ew)), = by_op(draws, "erase")
        im = F.resized_crop(load(path), int(top), int(left), int(h), int(w), [112, 112])
        ref8 = F.pil_to_tensor(im)
        # the 8-bit pixels within 1, then the float values of stoker's own 8-bit image exactly as torch computes
        x = F.normalize(F.to_dtype(ref8, torch.float32, scale=True) if hasattr(F, "to_dtype")
                        else ref8.float() / 255, mean, std)
        x = F.erase(x, int(et), int(el), int(eh), int(ew), torch.tensor([0.5, -1, 2])[:, None, None]).to(tdt)
        got_t = torch.from_numpy(got.astype(np.float32))
        assert got.shape == (3, 112, 112)
        one = max(1 / 255 / s for s in std) * 1.01 + (1e-2 if dtype == "float16" else 1e-6)
        err = (got_t - x.float()).abs()
        assert err.max() <= one, f"{path.name}: max |diff| {err.max()}"
        region = got_t[:, int(et):int(et + eh), int(el):int(el + ew)]
        assert torch.allclose(region, torch.tensor([0.5, -1, 2])[:, None, None].expand_as(region), atol=1e-3)


def test_erasing_random_values_are_normal():
    """value="random": a standard normal per pixel and channel (torch's normal_())."""
    text = "RandomResizedCrop(size=128); ToTensor(); RandomErasing(p=1, value=random, scale=(0.2, 0.3))"
    vals = []
    for _, ((_, (top, left, h, w)),), in [(0, by_op(d, "erase")) for d, _ in []]:
        pass
    for draws, got in run(text, PHOTOS, seed=21):
        (_, (top, left, h, w)), = by_op(draws, "erase")
        vals.append(got[:, int(top):int(top + h), int(left):int(left + w)].ravel())
    v = np.concatenate(vals)
    assert len(v) > 10000
    assert abs(v.mean()) < 0.05 and abs(v.std() - 1) < 0.05
    assert abs(np.mean(np.abs(v) < 1) - 0.6827) < 0.02
