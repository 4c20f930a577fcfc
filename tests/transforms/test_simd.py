"""The vectorised pixel kernels (AVX2: colour ops, sharpness, the float
output's planes, the bilinear affine warp four pixels a step;
daemon/pixels/color.c, augment.c, affine.c) give the bytes of the
portable code: every policy op at several magnitudes, each interpolation
and a fill, and whole pipelines with float outputs, run once with the
kernels the CPU picks and once with STOKER_RESIZE_ISA=scalar (the pixels
layer's one switch), compared byte for byte."""

import os
import subprocess

import pytest

from pixelop_util import PHOTOS, RGB_PHOTOS, tool
from tpipe_util import TPIPE

OPS = ["ShearX:0.3", "ShearY:-0.3", "TranslateX:30", "TranslateY:-20", "Rotate:30", "Rotate:-17",
       "Brightness:0.6", "Brightness:-0.6", "Color:0.7", "Color:-0.9", "Contrast:0.5", "Contrast:-0.8",
       "Sharpness:0.9", "Sharpness:-0.9", "Posterize:3", "Solarize:100", "Solarize:100.5", "AutoContrast:0",
       "Equalize:0", "Invert:0"]


def _avx2():
    with open("/proc/cpuinfo") as f:
        return " avx2" in f.read()


pytestmark = pytest.mark.skipif(not _avx2(), reason="no AVX2 on this CPU: only the portable code runs")


def _run(cmd, isa):
    env = dict(os.environ, STOKER_RESIZE_ISA=isa)
    r = subprocess.run(cmd, capture_output=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


AFFINE_OPS = ["ShearX:0.3", "ShearX:-0.05", "ShearY:0.29", "ShearY:-0.3", "TranslateX:30", "TranslateX:-1",
              "TranslateY:-20", "TranslateY:3", "Rotate:30", "Rotate:-17", "Rotate:0.5", "Rotate:-135", "Rotate:90"]

# crops of the photos whose widths put the four-pixel steps' tail and border
# cases everywhere: 1..9 and odd sizes, one pixel high or wide
EDGE_SIZES = [(1, 1), (1, 6), (6, 1), (2, 2), (3, 7), (4, 4), (5, 3), (7, 9), (8, 5), (9, 2), (17, 13), (33, 31)]


@pytest.fixture(scope="module")
def edge_crops(tmp_path_factory):
    from PIL import Image

    out = tmp_path_factory.mktemp("edges")
    paths = []
    for name in RGB_PHOTOS[:2]:
        with Image.open(PHOTOS / name) as im:
            im = im.convert("RGB")
            for w, h in EDGE_SIZES:
                left, top = (im.width - w) // 3, (im.height - h) // 2
                path = out / f"{name.split('.')[0]}_{w}x{h}.png"
                im.crop((left, top, left + w, top + h)).save(path)
                paths.append(path)
    return paths


@pytest.mark.parametrize("interp", ["bilinear", "bicubic"])
def test_affine_edge_sizes_scalar_equal(interp, edge_crops):
    """Every affine op at several magnitudes, bilinear and bicubic, on tiny and odd sizes of real photos."""
    for path in edge_crops:
        for op in AFFINE_OPS:
            cmd = [tool(), "-p", f"{op}:{interp}:10,20,30", "-f", str(path), "TrivialAugmentWide",
                   f"interpolation={interp}", "fill=10,20,30"]
            fast, portable = _run(cmd, "avx2"), _run(cmd, "scalar")
            assert len(fast) > 4
            assert fast == portable, (path.name, op, interp)


@pytest.mark.parametrize("interp,fill", [("nearest", None), ("bilinear", "10,20,30"), ("bicubic", "128,128,128")])
def test_policy_ops_scalar_equal(interp, fill):
    for name in RGB_PHOTOS[:2]:
        for op in OPS + AFFINE_OPS:
            forced = f"{op}:{interp}" + (f":{fill}" if fill else "")
            cmd = [tool(), "-p", forced, "-f", str(PHOTOS / name), "TrivialAugmentWide", f"interpolation={interp}"]
            if fill:
                cmd.append(f"fill={fill}")
            fast, portable = _run(cmd, "avx2"), _run(cmd, "scalar")
            assert len(fast) > 100
            assert fast == portable, (name, op, interp)


PIPELINES = [
    # torchvision's ResNet-50 v2 recipe as its reference script runs it: TrivialAugmentWide bilinear
    "RandomResizedCrop(size=176); RandomHorizontalFlip(p=0.5); TrivialAugmentWide(interpolation=bilinear); "
    "ToDtype(dtype=uint8)",
    "RandomResizedCrop(size=(61, 37)); RandAugment(num_ops=3, magnitude=13, interpolation=bilinear); "
    "ToDtype(dtype=uint8)",
    "RandomResizedCrop(size=176); RandomHorizontalFlip(p=0.5); TrivialAugmentWide(); "
    "ToDtype(dtype=float32, scale=true); Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)); "
    "RandomErasing(p=0.5)",
    "RandomResizedCrop(size=131); ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4); "
    "RandomPosterize(bits=3, p=0.5); RandomSolarize(threshold=99.5, p=0.5); RandomInvert(p=0.3); "
    "RandomAdjustSharpness(sharpness_factor=2, p=0.5); ToDtype(dtype=float32, scale=true)",
    "Resize(size=100); CenterCrop(size=99); rand_augment_transform(config_str=\"rand-m9-n3-mstd0.5-inc1\"); "
    "RandomVerticalFlip(p=0.5); ToTensor(); Normalize(mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2))",
]


@pytest.mark.parametrize("text", PIPELINES)
def test_pipelines_scalar_equal(text):
    files = [str(p) for p in sorted(PHOTOS.iterdir()) if p.suffix in (".png", ".jpg")]
    cmd = [str(TPIPE), "run", text, "5"] + files + files
    fast, portable = _run(cmd, "avx2"), _run(cmd, "scalar")
    assert fast.count(b"\nout ") + fast.startswith(b"out ") >= len(files)
    assert fast == portable
