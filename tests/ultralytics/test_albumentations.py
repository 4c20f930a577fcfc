"""daemon/pixels/albu.c, the Albumentations Ultralytics applies by default
(Blur, MedianBlur, ToGray, CLAHE at p=0.01), against what albumentations
2.x runs for them: cv2.blur, cv2.medianBlur, cv2.cvtColor(RGB2GRAY) and
cv2.createCLAHE on the L of cv2.cvtColor(RGB2LAB), back with LAB2RGB
(albumentations/augmentations/{blur,pixel}/functional.py), on Ultralytics'
BGR image. Through build/tests/albuop, on real photos at training sizes and
odd ones; the 8-bit LAB conversions on all 2^24 colours; the draws against
Albumentations' distributions (sample_odd_from_range(3, 7), uniform(1, 4),
p per op); flips folded into the warp give the bytes of flipping after."""

import importlib.util
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


# ---- through the daemon and the trainer's options ----

IMGSZ = 160


@pytest.fixture(scope="module")
def yolo(make_yolo):
    path, _, _ = make_yolo(kind="photos", images=12, classes=4, min_side=200, max_side=400, seed=3)
    return path


def train_images(d, path, **kw):
    import stoker

    ld = stoker.Loader(str(path / "images" / "train"), socket=d.socket, task="detect", image_size=IMGSZ,
                       batch_size=4, seed=7, epochs=3, hsv_h=0, hsv_s=0, hsv_v=0, fliplr=0, **kw)
    try:
        return [(int(i), np.array(im, copy=True)) for b in ld for i, im in zip(b.indices, b.images)]
    finally:
        ld.close()


def test_daemon_applies_them_between_mixup_and_hsv(daemon, yolo):
    """albumentations=1 (every op on every sample): each training image is
    the albumentations=0 one with the ops drawn from its own stream (seed,
    epoch, sample) applied: the workers' wiring, with every other draw
    unchanged. Refused for letterbox and outside 0..1."""
    import stoker

    d = daemon(workers=2)
    plain = train_images(d, yolo)
    every = train_images(d, yolo, albumentations=1.0)
    assert [i for i, _ in plain] == [i for i, _ in every] and len(plain) == 12
    for (index, a), (_, b) in zip(plain, every):
        want, draw = run(["apply", 1.0, 7, index, 0, 0], a)
        assert np.array_equal(b, want), (index, draw)
    for bad, what in ((dict(albumentations=1.5), "albumentations 1.5 is not in 0..1"),
                      (dict(albumentations=0.01, transform="letterbox"), "training augmentation")):
        with pytest.raises(stoker.StokerError, match=what):
            stoker.Loader(str(yolo / "images" / "train"), socket=d.socket, task="detect", image_size=IMGSZ,
                          batch_size=4, **bad)


ALBU_PY = pathlib.Path(os.environ.get("STOKER_BUILD", "build")) / "pydeps" / "albumentations"


def albumentations_site():
    """albumentations 2.0.8 in a folder of its own (not the environment's:
    its dependencies would replace packages the other tests use)."""
    if not (ALBU_PY / "albumentations").is_dir():
        subprocess.run([os.sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--target", str(ALBU_PY), "albumentations==2.0.8"], check=True)
    return ALBU_PY


def test_trainer_options_follow_ultralytics_albumentations(yolo):
    """The training loader's `albumentations` is the p of the ops
    Ultralytics' own Albumentations object holds: 0.01 with albumentations
    importable (a real install, in a subprocess), 0 with custom
    `augmentations` (refused by name) or without the package."""
    # appended, not prepended: the environment's own packages (numpy, cv2,
    # pydantic) come first, the folder gives only what it lacks
    code = f"""
import sys
sys.path.append({str(albumentations_site())!r})
from ultralytics.cfg import get_cfg
from stoker.ultralytics import albumentations_p, loader_options
args = get_cfg(overrides=dict(data={str(yolo / 'data.yaml')!r}, imgsz={IMGSZ}, workers=0))
print(albumentations_p(args), loader_options(args, "train").get("albumentations"),
      loader_options(args, "val").get("albumentations"))
"""
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2] / "client" / "python"))
    out = subprocess.run([os.sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1].split() == ["0.01", "0.01", "None"], out.stdout + out.stderr
    from ultralytics.cfg import get_cfg
    from stoker.ultralytics import albumentations_p, loader_options

    args = get_cfg(overrides=dict(data=str(yolo / "data.yaml"), imgsz=IMGSZ, workers=0))
    if importlib.util.find_spec("albumentations") is None:
        assert albumentations_p(args) == 0 and "albumentations" not in loader_options(args, "train")
    args.augmentations = [object()]
    assert albumentations_p(args) == 0
    with pytest.raises(ValueError, match="augmentations"):
        loader_options(args, "train")
