#!/usr/bin/env python3
"""Build a realistic JPEG data set from the photographs in data/photos.

Each image is a random crop (random size, aspect ~3/4..4/3) of one source
photo, rescaled so its shorter side lies in [--min-side, --max-side], maybe
mirrored, and re-encoded at a random JPEG quality and chroma subsampling.
Class k comes from photo k mod P (rotated by 90 degrees per wrap, so classes
stay distinct); grayscale photos give some grayscale JPEGs. Output depends
only on the arguments (each image has its own seeded generator).

Layouts:
  imagefolder  OUT/class_XX/img_YYYY.jpg
  list         OUT/images/cXX_YYYY.jpg and OUT/list.txt ("images/... label")

--corrupt N adds N unreadable files (truncated, empty, random bytes) among
the samples and prints their paths, one per line, on stdout.
"""

import argparse
import io
import math
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor

from PIL import Image

PHOTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "photos")
_photo_cache = {}


def photo_paths(photos_dir=PHOTOS):
    names = sorted(n for n in os.listdir(photos_dir) if n.lower().endswith((".png", ".jpg", ".jpeg")))
    if not names:
        raise SystemExit(f"mkdataset: no photos in {photos_dir}")
    return [os.path.join(photos_dir, n) for n in names]


def _photo(path):
    im = _photo_cache.get(path)
    if im is None:
        im = Image.open(path)
        im = im.convert("L" if im.mode in ("L", "LA", "I", "I;16") else "RGB")
        im.load()
        _photo_cache[path] = im
    return im


def make_image(photo, turns, rng, min_side, max_side, q_min, q_max):
    """One JPEG (bytes) drawn from `photo` with generator `rng`."""
    src = _photo(photo)
    if turns % 4:
        src = src.rotate(90 * (turns % 4), expand=True)
    W, H = src.size
    area = W * H * rng.uniform(0.25, 1.0)
    aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
    w = min(W, max(16, int(round(math.sqrt(area * aspect)))))
    h = min(H, max(16, int(round(math.sqrt(area / aspect)))))
    x, y = rng.randint(0, W - w), rng.randint(0, H - h)
    im = src.crop((x, y, x + w, y + h))
    short = rng.randint(min_side, max_side)
    if w <= h:
        size = (short, max(1, int(round(h * short / w))))
    else:
        size = (max(1, int(round(w * short / h))), short)
    im = im.resize(size, Image.Resampling.LANCZOS if short < min(w, h) else Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    # Grayscale sources: about half stay 1-channel JPEGs, the rest RGB.
    if im.mode == "L" and rng.random() < 0.5:
        im = im.convert("RGB")
    kw = {"quality": rng.randint(q_min, q_max)}
    if im.mode == "RGB":
        kw["subsampling"] = rng.choice([2, 2, 2, 1, 0])  # mostly 4:2:0
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def corrupt_bytes(kind, rng, good_jpeg):
    """Unreadable file contents of `kind`: truncated | empty | random."""
    if kind == "empty":
        return b""
    if kind == "random":
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(64, 4096)))
    # Truncated a little after the start of the entropy-coded data, so any
    # crop needs bytes that are not there.
    sos = good_jpeg.find(b"\xff\xda")
    cut = (sos if sos > 0 else len(good_jpeg) // 8) + 64
    return good_jpeg[:cut]


def _job(job):
    path, photo, turns, seed_key, a = job
    rng = random.Random(seed_key)
    data = make_image(photo, turns, rng, a["min_side"], a["max_side"], a["quality_min"], a["quality_max"])
    with open(path, "wb") as f:
        f.write(data)
    return path


def build(out, classes=4, per_class=16, seed=0, min_side=300, max_side=800, quality_min=75,
          quality_max=95, layout="imagefolder", corrupt=0, jobs=1, photos_dir=PHOTOS):
    """Write the data set; return the list of corrupt file paths."""
    if classes < 1 or per_class < 0 or corrupt < 0:
        raise ValueError("classes must be >= 1, per-class and corrupt >= 0")
    if not (16 <= min_side <= max_side) or not (1 <= quality_min <= quality_max <= 100):
        raise ValueError("need 16 <= min-side <= max-side and 1 <= quality-min <= quality-max <= 100")
    photos = photo_paths(photos_dir)
    a = dict(min_side=min_side, max_side=max_side, quality_min=quality_min, quality_max=quality_max)
    os.makedirs(out, exist_ok=True)
    jobs_list, labels = [], []
    for k in range(classes):
        if layout == "imagefolder":
            d = os.path.join(out, f"class_{k:02d}")
            os.makedirs(d, exist_ok=True)
        else:
            d = os.path.join(out, "images")
            os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            name = f"img_{i:04d}.jpg" if layout == "imagefolder" else f"c{k:02d}_{i:04d}.jpg"
            path = os.path.join(d, name)
            jobs_list.append((path, photos[k % len(photos)], k // len(photos), f"{seed}:{k}:{i}", a))
            labels.append((path, k))

    if jobs > 1 and len(jobs_list) > 8:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            list(ex.map(_job, jobs_list, chunksize=4))
    else:
        for j in jobs_list:
            _job(j)

    rng = random.Random(f"{seed}:corrupt")
    kinds = ["truncated", "empty", "random"]
    bad = []
    for j in range(corrupt):
        k = rng.randrange(classes)
        if layout == "imagefolder":
            path = os.path.join(out, f"class_{k:02d}", f"corrupt_{j:03d}.jpg")
        else:
            path = os.path.join(out, "images", f"corrupt_{j:03d}.jpg")
        good = make_image(photos[k % len(photos)], 0, random.Random(f"{seed}:corrupt:{j}"),
                          min_side, max_side, quality_min, quality_max)
        with open(path, "wb") as f:
            f.write(corrupt_bytes(kinds[j % len(kinds)], rng, good))
        bad.append(path)
        labels.append((path, k))

    if layout == "list":
        random.Random(f"{seed}:list").shuffle(labels)  # list order need not follow classes
        with open(os.path.join(out, "list.txt"), "w") as f:
            f.write("# path label\n")
            for path, k in labels:
                f.write(f"{os.path.relpath(path, out)} {k}\n")
    return bad


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", metavar="OUT_DIR")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--per-class", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-side", type=int, default=300)
    p.add_argument("--max-side", type=int, default=800)
    p.add_argument("--quality-min", type=int, default=75)
    p.add_argument("--quality-max", type=int, default=95)
    p.add_argument("--layout", choices=["imagefolder", "list"], default="imagefolder")
    p.add_argument("--corrupt", type=int, default=0, metavar="N")
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                   help="encoder processes (output does not depend on it)")
    p.add_argument("--photos", default=PHOTOS, help="source photo directory")
    a = p.parse_args(argv)
    try:
        bad = build(a.out, a.classes, a.per_class, a.seed, a.min_side, a.max_side, a.quality_min,
                    a.quality_max, a.layout, a.corrupt, a.jobs, a.photos)
    except ValueError as e:
        p.error(str(e))
    for path in bad:
        print(path)
    n = a.classes * a.per_class + len(bad)
    print(f"mkdataset: {n} files ({len(bad)} corrupt) in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
