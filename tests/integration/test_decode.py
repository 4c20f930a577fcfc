"""JPEG variants found in real data sets decode like Pillow decodes them."""

import numpy as np
import pytest
from PIL import Image

import stoker
from stoker_testutil import REPO, expected_samples, read_epoch
from test_pixels import reference_center_crop

PHOTOS = REPO / "data" / "photos"


def _src(name, box=None, size=None):
    im = Image.open(PHOTOS / name)
    im = im.convert("L" if im.mode == "L" else "RGB")
    if box:
        im = im.crop(box)
    if size:
        im = im.resize(size, Image.Resampling.LANCZOS)
    return im


# name -> (image, save options). All small enough that the centre window is
# < 2x the output, so the daemon decodes at full scale (see test_pixels).
VARIANTS = {
    "baseline420": (lambda: _src("coffee.png", size=(400, 300)), dict(quality=90)),
    "progressive": (lambda: _src("astronaut.png", size=(384, 384)), dict(quality=85, progressive=True)),
    "progressive_gray": (lambda: _src("camera.png", size=(320, 400)), dict(quality=80, progressive=True)),
    "ycc444": (lambda: _src("chelsea.png"), dict(quality=95, subsampling=0)),
    "ycc422": (lambda: _src("rocket.jpg", size=(480, 320)), dict(quality=88, subsampling=1)),
    "restart_markers": (lambda: _src("hubble_deep_field.jpg", size=(420, 366)),
                        dict(quality=90, restart_marker_blocks=3)),
    "odd_size": (lambda: _src("rocket.jpg", box=(13, 7, 314, 264)), dict(quality=92)),
    "tiny_upscaled": (lambda: _src("chelsea.png", box=(200, 100, 217, 123)), dict(quality=90)),
    "wide_strip": (lambda: _src("hubble_deep_field.jpg", box=(0, 400, 1000, 440)), dict(quality=90)),
    "tall_strip": (lambda: _src("astronaut.png", box=(250, 0, 290, 512)), dict(quality=90)),
    "optimized_q100": (lambda: _src("gravel.png", size=(300, 300)), dict(quality=100, optimize=True)),
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    d = root / "class_a"
    d.mkdir()
    for i, (name, (make, kw)) in enumerate(VARIANTS.items()):
        make().save(d / f"v{i:02d}_{name}.jpg", "JPEG", **kw)
    return root


def test_variants_match_pil(daemon, variants):
    want = expected_samples(variants)
    assert len(want) == len(VARIANTS)
    d = daemon()
    with stoker.Loader(variants, socket=d.socket, transform="center_crop", image_size=224,
                       batch_size=4, shuffle=False) as ld:
        r = read_epoch(ld, keep_images=True)
    assert r["replaced"] == 0, "a valid JPEG was treated as unreadable"
    assert r["indices"] == list(range(len(want)))
    got = np.concatenate(r["images"])
    bad = []
    for i, (path, _) in enumerate(want):
        diff = np.abs(got[i].astype(np.int16) - reference_center_crop(path).astype(np.int16))
        if diff.mean() >= 0.5 or diff.max() > 2:  # same tolerance as test_pixels' full decode
            bad.append(f"{path.rsplit('/', 1)[1]}: mean {diff.mean():.2f} max {diff.max()}")
    assert not bad, "; ".join(bad)


def test_random_crops_of_variants(daemon, variants):
    """Random crops hit every iMCU / crop-scanline alignment; none may fail."""
    d = daemon()
    with stoker.Loader(variants, socket=d.socket, image_size=96, batch_size=4, seed=5) as ld:
        for epoch in range(4):
            ld.set_epoch(epoch)
            r = read_epoch(ld)
            assert r["replaced"] == 0, f"epoch {epoch}"
            assert sorted(r["indices"]) == list(range(len(VARIANTS)))


def test_cmyk_jpeg(daemon, tmp_path):
    """Adobe CMYK JPEGs (ImageNet has some) come out RGB, close to Pillow's."""
    d = tmp_path / "cmyk" / "a"
    d.mkdir(parents=True)
    _src("coffee.png", size=(360, 240)).convert("CMYK").save(d / "cmyk.jpg", "JPEG", quality=95)
    dm = daemon()
    with stoker.Loader(tmp_path / "cmyk", socket=dm.socket, transform="center_crop", image_size=224,
                       batch_size=1, shuffle=False) as ld:
        r = read_epoch(ld, keep_images=True)
    assert r["replaced"] == 0
    ref = reference_center_crop(str(d / "cmyk.jpg")).astype(np.int16)
    diff = np.abs(r["images"][0][0].astype(np.int16) - ref)
    assert diff.mean() < 3.0, f"CMYK conversion differs from Pillow: mean {diff.mean():.2f}"


def test_png_named_jpg_decodes(daemon, tmp_path):
    """A PNG saved as .jpg (ImageNet has one, as .JPEG) is told by its content
    and decoded as PNG (tests/integration/test_formats.py has every format)."""
    d = tmp_path / "ds" / "a"
    d.mkdir(parents=True)
    _src("chelsea.png").save(d / "a0.jpg", "PNG")
    _src("coffee.png").save(d / "a1.jpg", "JPEG", quality=90)
    dm = daemon()
    with stoker.Loader(tmp_path / "ds", socket=dm.socket, transform="center_crop", image_size=224, batch_size=2,
                       shuffle=False) as ld:
        r = read_epoch(ld, keep_images=True)
    assert r["replaced"] == 0
    assert r["indices"] == [0, 1]
    assert dm.stats()["decode_errors"] == 0
    diff = np.abs(r["images"][0][0].astype(np.int16) - reference_center_crop(str(d / "a0.jpg")).astype(np.int16))
    assert diff.max() <= 1
