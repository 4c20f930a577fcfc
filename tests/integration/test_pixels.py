"""Pixels: determinism across daemons, and center_crop against a PIL reference."""

import numpy as np
import pytest
from PIL import Image

import stoker
from stoker_testutil import expected_samples, read_epoch

RRC = dict(image_size=64, batch_size=8, transform="random_resized_crop")


def by_index(r):
    return dict(zip(r["indices"], r["hashes"]))


def test_same_seed_same_pixels_across_daemons(daemon, dataset):
    a = daemon(workers=1, prefetch=1)
    b = daemon(workers=2, prefetch=3)
    with stoker.Loader(dataset, socket=a.socket, seed=7, prefetch=1, **RRC) as ld:
        ra = read_epoch(ld)
    with stoker.Loader(dataset, socket=b.socket, seed=7, prefetch=4, **RRC) as ld:
        rb = read_epoch(ld)
    assert ra["indices"] == rb["indices"], "order differs between daemons"
    assert ra["hashes"] == rb["hashes"], "pixels differ between daemons"
    with stoker.Loader(dataset, socket=b.socket, seed=8, **RRC) as ld:
        rc = read_epoch(ld)
    assert sorted(rc["indices"]) == sorted(ra["indices"])
    assert rc["indices"] != ra["indices"], "seed does not change the order"
    ha, hc = by_index(ra), by_index(rc)
    same = sum(ha[i] == hc[i] for i in ha)
    assert same <= len(ha) // 4, f"{same}/{len(ha)} samples identical under another seed"


def reference_center_crop(path, size=224):
    """torchvision: Resize(size*256/224) on the short side (BILINEAR), CenterCrop(size)."""
    im = Image.open(path).convert("RGB")
    w, h = im.size
    short = size * 256 // 224
    if w <= h:
        nw, nh = short, int(short * h / w)
    else:
        nw, nh = int(short * w / h), short
    im = im.resize((nw, nh), Image.Resampling.BILINEAR)
    top = int(round((nh - size) / 2.0))
    left = int(round((nw - size) / 2.0))
    return np.asarray(im.crop((left, top, left + size, top + size)))


# Tolerances. stoker decodes with libjpeg-turbo (as Pillow does) and resizes
# with Pillow's BILINEAR triangle filter, on the same source window, so when
# the whole image is decoded only fixed-point rounding differs: measured
# max |diff| 1, mean < 0.03. When the centre window is >= 2x the output, the
# daemon decodes at 1/2..1/8 scale in the DCT domain first: a sharper filter
# than the triangle, so high-frequency textures (grass, gravel) differ more;
# measured worst image mean 2.9 (a texture at 2.01x), p99 13, data-set mean
# 0.5-0.7.
@pytest.mark.parametrize("sides,img_mean_tol,p99_tol,max_tol,set_mean_tol", [
    ((256, 480), 0.5, 2, 2, 0.1),     # centre window < 2x output: full decode
    ((460, 1000), 3.0, 16, 255, 1.0),  # >= 2x: DCT-domain downscale
], ids=["full-decode", "dct-scaled"])
def test_center_crop_matches_pil(daemon, make_dataset, sides, img_mean_tol, p99_tol, max_tol,
                                 set_mean_tol):
    # 9 classes: one per source photo, grayscale ones and textures included.
    root, _ = make_dataset(classes=9, per_class=4, min_side=sides[0], max_side=sides[1], seed=21)
    want = expected_samples(root)
    d = daemon()
    with stoker.Loader(root, socket=d.socket, transform="center_crop", image_size=224, batch_size=8,
                       shuffle=False) as ld:
        r = read_epoch(ld, keep_images=True)
    got = np.concatenate(r["images"])
    assert got.shape == (len(want), 224, 224, 3)
    assert r["indices"] == list(range(len(want)))
    stats = []
    for i, (path, _) in enumerate(want):
        ref = reference_center_crop(path)
        diff = np.abs(got[i].astype(np.int16) - ref.astype(np.int16))
        stats.append((float(diff.mean()), float(np.percentile(diff, 99)), int(diff.max()), path))
        if Image.open(path).mode == "L":
            assert (got[i][..., 0] == got[i][..., 1]).all() and (got[i][..., 1] == got[i][..., 2]).all(), \
                f"grayscale {path} not gray"
    bad = [s for s in stats if s[0] >= img_mean_tol or s[1] > p99_tol or s[2] > max_tol]
    assert not bad, "differs from PIL reference (mean, p99, max, file): " + "; ".join(
        f"{m:.2f} {p:.0f} {x} {f}" for m, p, x, f in sorted(bad, reverse=True)[:5])
    set_mean = float(np.mean([s[0] for s in stats]))
    assert set_mean < set_mean_tol, f"mean |diff| over the data set {set_mean:.3f}"
