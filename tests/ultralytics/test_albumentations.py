"""daemon/pixels/albu.c, the Albumentations Ultralytics applies by default
(Blur, MedianBlur, ToGray, CLAHE at p=0.01), against what albumentations
2.x runs for them: cv2.blur, cv2.medianBlur, cv2.cvtColor(RGB2GRAY) and
cv2.createCLAHE on the L of cv2.cvtColor(RGB2LAB), back with LAB2RGB
(albumentations/augmentations/{blur,pixel}/functional.py), on Ultralytics'
BGR image. Through build/tests/albuop, on real photos at training sizes and
odd ones; the 8-bit LAB conversions on all 2^24 colours; the draws against
Albumentations' distributions (sample_odd_from_range(3, 7), uniform(1, 4),
p per op); flips folded into the warp give the bytes of flipping after."""

import os
import pathlib
import subprocess

import cv2
import numpy as np
import pytest

TOOL = pathlib.Path(os.environ.get("STOKER_BUILD", "build")) / "tests" / "albuop"
PHOTOS = pathlib.Path(__file__).resolve().parents[2] / "data" / "photos"
SIZES = [(640, 640), (480, 640), (333, 517), (9, 13)]


def run(args, img=None):
    data = b"" if img is None else f"{img.shape[1]} {img.shape[0]}\n".encode() + np.ascontiguousarray(img).tobytes()
    p = subprocess.run([str(TOOL)] + [str(a) for a in args], input=data, capture_output=True, check=True)
    if img is None:
        return p.stdout.decode()
    head, _, body = p.stdout.partition(b"\n")
    w, h = map(int, head.split())
    return np.frombuffer(body, np.uint8).reshape(h, w, 3), p.stderr.decode()


def photos():
    """RGB photos, resized to each test size (Ultralytics' images are BGR:
    bgr(x) is what its Albumentations sees)."""
    out = []
    for f in sorted(PHOTOS.iterdir()):
        im = cv2.imread(str(f), cv2.IMREAD_COLOR)
        if im is None:
            continue
        rgb = im[:, :, ::-1]
        for w, h in SIZES:
            out.append((f.name, (w, h), np.ascontiguousarray(cv2.resize(rgb, (w, h)))))
    return out


def bgr(x):
    return np.ascontiguousarray(x[:, :, ::-1])


def ref_clahe(img_bgr, clip):
    """albumentations.augmentations.pixel.functional.clahe (RGB branch) on
    Ultralytics' BGR image."""
    lab = cv2.cvtColor(img_bgr, cv2.COLOR_RGB2LAB)
    lab[:, :, 0] = cv2.createCLAHE(clipLimit=clip, tileGridSize=(8, 8)).apply(lab[:, :, 0])
    return cv2.cvtColor(lab, cv2.COLOR_LAB2RGB)


@pytest.fixture(scope="module")
def images():
    ims = photos()
    assert len(ims) >= 8 * len(SIZES)
    return ims


@pytest.mark.parametrize("k", [3, 5, 7])
def test_blur_is_cv2_blur(images, k):
    for name, size, rgb in images:
        got, _ = run(["blur", k], rgb)
        assert np.array_equal(bgr(got), cv2.blur(bgr(rgb), (k, k))), (name, size, k)


@pytest.mark.parametrize("k", [3, 5, 7])
def test_median_is_cv2_median_blur(images, k):
    for name, size, rgb in images:
        got, _ = run(["median", k], rgb)
        assert np.array_equal(bgr(got), cv2.medianBlur(bgr(rgb), k)), (name, size, k)


def test_gray_is_cv2_rgb2gray_of_the_bgr_image(images):
    for name, size, rgb in images:
        got, _ = run(["gray"], rgb)
        want = cv2.cvtColor(bgr(rgb), cv2.COLOR_RGB2GRAY)
        assert np.array_equal(got, np.repeat(want[:, :, None], 3, 2)), (name, size)


def test_clahe_is_cv2_clahe_in_lab(images):
    rng = np.random.default_rng(5)
    for name, size, rgb in images:
        clip = float(rng.uniform(1, 4))
        got, _ = run(["clahe", repr(clip)], rgb)
        assert np.array_equal(bgr(got), ref_clahe(bgr(rgb), clip)), (name, size, clip)


@pytest.fixture(scope="module")
def every_colour():
    v = np.arange(1 << 24, dtype=np.uint32)
    return np.stack([(v >> 16) & 255, (v >> 8) & 255, v & 255], -1).astype(np.uint8).reshape(4096, 4096, 3)


def test_lab_both_ways_on_every_colour(every_colour):
    """cv2's 8-bit RGB2LAB of every colour, and LAB2RGB of every byte
    triple read as L, a, b (so every LAB input CLAHE can produce)."""
    got, _ = run(["lab"], every_colour)
    assert np.array_equal(got, cv2.cvtColor(every_colour, cv2.COLOR_RGB2LAB))
    got, _ = run(["lab-inv"], every_colour)
    assert np.array_equal(got, cv2.cvtColor(every_colour, cv2.COLOR_LAB2RGB))


def test_draws_follow_albumentations():
    """100,000 draws: each op applied with probability p, kernels uniform on
    3, 5, 7 (sample_odd_from_range(3, 7)), the clip limit uniform on [1, 4)
    (CLAHE(clip_limit=(1, 4)).get_params): counts within 5 standard errors."""
    n, p = 100000, 0.3
    rows = [line.split() for line in run(["draws", n, p, 11]).splitlines()]
    assert len(rows) == n
    a = np.array([[float(x) for x in r] for r in rows])
    for col in (0, 2, 4, 5):
        assert abs(a[:, col].mean() - p) < 5 * np.sqrt(p * (1 - p) / n), col
    for col in (1, 3):
        counts = np.array([(a[:, col] == k).sum() for k in (3, 5, 7)])
        assert counts.sum() == n
        assert np.all(np.abs(counts / n - 1 / 3) < 5 * np.sqrt(2 / 9 / n)), counts
    clip = a[:, 6]
    assert clip.min() >= 1 and clip.max() < 4
    assert abs(clip.mean() - 2.5) < 5 * np.sqrt(0.75 / n)
    hist, _ = np.histogram(clip, bins=10, range=(1, 4))
    assert np.all(np.abs(hist / n - 0.1) < 5 * np.sqrt(0.09 / n)), hist
    # the draws do not depend on p: the kernels and clip of p=0.3 are those of p=0.01
    other = [line.split() for line in run(["draws", 1000, 0.01, 11]).splitlines()]
    assert [(r[1], r[3], r[6]) for r in other] == [(r[1], r[3], r[6]) for r in rows[:1000]]


@pytest.mark.parametrize("flipud,fliplr", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_apply_on_a_flipped_image_is_albumentations_then_the_flip(images, flipud, fliplr):
    """The worker runs the ops on an image its warp already flipped; the
    bytes are those of Albumentations first and Ultralytics' RandomFlip
    after (CLAHE's tiles are not symmetric: it runs unflipped)."""
    name, size, rgb = next(i for i in images if i[1] == (640, 640))
    def flip(x):
        if flipud:
            x = x[::-1]
        if fliplr:
            x = x[:, ::-1]
        return np.ascontiguousarray(x)
    for index in range(6):
        got, draw = run(["apply", 1.0, 3, index, flipud, fliplr], flip(rgb))
        blur, bk, med, mk, gray, clahe, clip = draw.split()
        want = bgr(rgb)
        want = cv2.blur(want, (int(bk), int(bk)))
        want = cv2.medianBlur(want, int(mk))
        want = cv2.cvtColor(cv2.cvtColor(want, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)
        want = ref_clahe(want, float(clip))
        assert np.array_equal(got, flip(bgr(want))), (name, index, draw)
