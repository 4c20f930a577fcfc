#!/usr/bin/env python3
"""Build a YOLO detection data set (Ultralytics layout) from data/photos.

  OUT/images/train/img_NNNNN.jpg    the images
  OUT/labels/train/img_NNNNN.txt    one `class cx cy w h` line per object,
                                    normalised to 0..1 (6 decimals)
  OUT/data.yaml                     path, train, val, names (a mapping)
  OUT/manifest.json                 every image's true boxes in pixels

Kinds:
  photos  realistic scenes for throughput: each image a random crop of a
          photo (long side in [--min-side, --max-side], aspect 3/4..4/3,
          JPEG quality in --quality-range), with 1..--max-objects real
          patches (random crops of other photos) pasted at random boxes,
          which are the labels.
  scenes  synthetic test scenes: a mid-grey (60) or photo background with
          1..--max-objects solid rectangles, one colour per class (PALETTE),
          that neither overlap nor touch each other and keep MARGIN px from
          the edges; JPEG q95 4:4:4, so the colours stay clean.

Faults for tests (each on its own images, disjoint):
  --no-labels-for K  K images get no label file ("no objects")
  --bad-labels K     K label files mix malformed lines with the good ones;
                     each bad line is printed on stdout as LABELPATH:LINENO
  --polygons K       K label files use segment lines (class x1 y1 ... xn yn)
                     whose bounding box is the object's box
  --corrupt K        K extra unreadable JPEGs (truncated, empty, random bytes),
                     as mkdataset.py; their paths are printed on stdout

Output depends only on the arguments (each image has its own seeded
generator), not on --jobs.
"""

import argparse
import io
import json
import math
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mkdataset  # noqa: E402  (photo_paths, _photo, corrupt_bytes)

# Scene colours, one per class, pairwise far apart (>= 255 in RGB distance)
# and far from the backgrounds (60 grey, 114 letterbox/mosaic padding).
PALETTE = [
    ("red", (255, 0, 0)),
    ("green", (0, 255, 0)),
    ("blue", (0, 0, 255)),
    ("yellow", (255, 255, 0)),
    ("magenta", (255, 0, 255)),
    ("cyan", (0, 255, 255)),
    ("white", (255, 255, 255)),
    ("black", (0, 0, 0)),
]
SCENE_GREY = 60
MARGIN = 16      # scene rectangles keep this far from the image edge (px)
GAP = 24         # ... and this far from each other
MIN_RECT = 24    # smallest scene rectangle side (px)
DEFAULTS = {     # kind -> (min side, max side, quality range, max objects, classes)
    "photos": (480, 800, (75, 95), 8, 80),
    "scenes": (320, 800, (95, 95), 6, 8),
}
# Malformed label lines, each with a valid-looking box around it.
BAD_KINDS = ["fields", "nonnumeric", "class_negative", "class_fraction", "cx_over", "w_zero",
             "w_negative", "w_over"]


def _fmt(v):
    return f"{v:.6f}"


def _crop(rng, src, aspect, min_area=0.25):
    """A random crop of `src` with width/height `aspect` and 0.25..1 of the largest such area."""
    W, H = src.size
    w_max = min(W, H * aspect)
    f = math.sqrt(rng.uniform(min_area, 1.0))
    w = max(8, int(round(w_max * f)))
    h = max(8, int(round(w / aspect)))
    w, h = min(w, W), min(h, H)
    x, y = rng.randint(0, W - w), rng.randint(0, H - h)
    return src.crop((x, y, x + w, y + h))


def _photo_crop(rng, photos, size, avoid=None):
    """A crop of a random photo (not `avoid`) resized to `size`, and that photo."""
    choices = [p for p in photos if p != avoid] or photos
    path = rng.choice(choices)
    im = _crop(rng, mkdataset._photo(path), size[0] / size[1])
    return im.resize(size, Image.Resampling.BILINEAR), path


def photos_image(rng, photos, a):
    """A photo crop with pasted photo patches: (PIL image, [[cls, x0, y0, x1, y1]])."""
    long_side = rng.randint(a["min_side"], a["max_side"])
    aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
    if aspect >= 1:
        W, H = long_side, max(16, int(round(long_side / aspect)))
    else:
        W, H = max(16, int(round(long_side * aspect))), long_side
    im, bg_path = _photo_crop(rng, photos, (W, H))
    keep_gray = im.mode == "L" and rng.random() < 0.5
    im = im.convert("L" if keep_gray else "RGB")
    boxes = []
    for _ in range(rng.randint(1, a["max_objects"])):
        w = rng.randint(max(8, W // 20), max(8, W // 2))
        h = rng.randint(max(8, H // 20), max(8, H // 2))
        x0, y0 = rng.randint(0, W - w), rng.randint(0, H - h)
        patch, _ = _photo_crop(rng, photos, (w, h), avoid=bg_path)
        im.paste(patch.convert(im.mode), (x0, y0))
        boxes.append([rng.randrange(a["classes"]), x0, y0, x0 + w, y0 + h])
    return im, boxes


def scenes_image(rng, photos, a):
    """Solid class-coloured rectangles on grey or a photo: (PIL image, boxes)."""
    W = rng.randint(a["min_side"], a["max_side"])
    H = rng.randint(a["min_side"], a["max_side"])
    if a["background"] == "photo":
        im = _photo_crop(rng, photos, (W, H))[0].convert("RGB")
    else:
        im = Image.new("RGB", (W, H), (SCENE_GREY,) * 3)
    boxes = []
    want = rng.randint(1, a["max_objects"])
    for _ in range(200 * want):
        if len(boxes) == want:
            break
        w = rng.randint(MIN_RECT, max(MIN_RECT, (W - 2 * MARGIN) // 3))
        h = rng.randint(MIN_RECT, max(MIN_RECT, (H - 2 * MARGIN) // 3))
        x0 = rng.randint(MARGIN, W - MARGIN - w)
        y0 = rng.randint(MARGIN, H - MARGIN - h)
        x1, y1 = x0 + w, y0 + h
        if any(x0 < b[3] + GAP and b[1] < x1 + GAP and y0 < b[4] + GAP and b[2] < y1 + GAP for b in boxes):
            continue
        c = rng.randrange(a["classes"])
        im.paste(PALETTE[c][1], (x0, y0, x1, y1))
        boxes.append([c, x0, y0, x1, y1])
    return im, boxes


def box_line(c, x0, y0, x1, y1, W, H):
    return " ".join([str(c), _fmt((x0 + x1) / 2 / W), _fmt((y0 + y1) / 2 / H), _fmt((x1 - x0) / W),
                     _fmt((y1 - y0) / H)])


def polygon_line(rng, c, x0, y0, x1, y1, W, H):
    """A segment line: a polygon touching each side of the box once (4..8 points)."""
    pts = [(rng.uniform(x0, x1), y0), (x1, rng.uniform(y0, y1)), (rng.uniform(x0, x1), y1),
           (x0, rng.uniform(y0, y1))]
    extra = rng.randint(0, 4)
    # Extra points strictly inside the box, each after a random vertex.
    for _ in range(extra):
        p = (rng.uniform(x0 + 0.25 * (x1 - x0), x1 - 0.25 * (x1 - x0)),
             rng.uniform(y0 + 0.25 * (y1 - y0), y1 - 0.25 * (y1 - y0)))
        pts.insert(rng.randint(1, len(pts)), p)
    return " ".join([str(c)] + [_fmt(v) for x, y in pts for v in (x / W, y / H)])


def bad_line(kind, rng, classes):
    """One malformed line of `kind` (see BAD_KINDS)."""
    v = [str(rng.randrange(classes)), _fmt(rng.uniform(0.3, 0.7)), _fmt(rng.uniform(0.3, 0.7)),
         _fmt(rng.uniform(0.05, 0.3)), _fmt(rng.uniform(0.05, 0.3))]
    if kind == "fields":
        v = v[:4]
    elif kind == "nonnumeric":
        v[rng.randint(1, 4)] = rng.choice(["abc", "0.5x", "--", "1e"])
    elif kind == "class_negative":
        v[0] = "-1"
    elif kind == "class_fraction":
        v[0] = f"{rng.randrange(classes)}.5"
    elif kind == "cx_over":
        v[1] = _fmt(rng.uniform(1.05, 1.5))
    elif kind == "w_zero":
        v[3] = _fmt(0)
    elif kind == "w_negative":
        v[3] = _fmt(-rng.uniform(0.05, 0.3))
    elif kind == "w_over":
        v[3] = _fmt(rng.uniform(1.05, 1.5))
    else:
        raise ValueError(kind)
    return " ".join(v)


def _job(job):
    """Make one image (and its label file); return its manifest entry."""
    out, name, seed_key, role, bad_kinds, corrupt_kind, a = job
    rng = random.Random(seed_key)
    photos = mkdataset.photo_paths(a["photos"])
    make = photos_image if a["kind"] == "photos" else scenes_image
    im, boxes = make(rng, photos, a)
    W, H = im.size
    q = rng.randint(*a["quality_range"])
    kw = {"quality": q}
    if im.mode == "RGB":
        kw["subsampling"] = 0 if a["kind"] == "scenes" else rng.choice([2, 2, 2, 1, 0])
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    data = buf.getvalue()
    img_rel = os.path.join("images", "train", name + ".jpg")
    lab_rel = os.path.join("labels", "train", name + ".txt")
    if corrupt_kind is not None:
        data = mkdataset.corrupt_bytes(corrupt_kind, rng, data)
    with open(os.path.join(out, img_rel), "wb") as f:
        f.write(data)

    entry = {"image": img_rel, "label": None if role == "missing" else lab_rel, "width": W, "height": H,
             "boxes": boxes, "role": role, "corrupt": corrupt_kind, "bad_lines": []}
    if role == "missing":
        return entry
    if role == "polygons":
        lines = [polygon_line(rng, *b, W, H) for b in boxes]
    else:
        lines = [box_line(*b, W, H) for b in boxes]
    if role == "bad":
        for kind in bad_kinds:
            pos = rng.randint(0, len(lines))
            lines.insert(pos, (kind, bad_line(kind, rng, a["classes"])))
        # Line numbers are 1-based, after every insertion.
        entry["bad_lines"] = [[n + 1, ln[0]] for n, ln in enumerate(lines) if isinstance(ln, tuple)]
        lines = [ln[1] if isinstance(ln, tuple) else ln for ln in lines]
    with open(os.path.join(out, lab_rel), "w") as f:
        f.write("".join(ln + "\n" for ln in lines))
    return entry


def build(out, images=64, kind="photos", classes=None, seed=0, min_side=None, max_side=None,
          quality_range=None, max_objects=None, background="grey", no_labels_for=0, bad_labels=0,
          polygons=0, corrupt=0, jobs=1, photos_dir=mkdataset.PHOTOS):
    """Write the data set; return the manifest (a dict, also in OUT/manifest.json)."""
    d_min, d_max, d_q, d_obj, d_classes = DEFAULTS[kind]
    min_side = d_min if min_side is None else min_side
    max_side = d_max if max_side is None else max_side
    quality_range = tuple(d_q if quality_range is None else quality_range)
    max_objects = d_obj if max_objects is None else max_objects
    classes = d_classes if classes is None else classes
    if images < 0 or min(no_labels_for, bad_labels, polygons, corrupt) < 0:
        raise ValueError("counts must be >= 0")
    if no_labels_for + bad_labels + polygons > images:
        raise ValueError("--no-labels-for + --bad-labels + --polygons exceed --images")
    if classes < 1 or (kind == "scenes" and classes > len(PALETTE)):
        raise ValueError(f"--classes must be 1..{len(PALETTE) if kind == 'scenes' else 'N'}")
    if not (64 <= min_side <= max_side):
        raise ValueError("need 64 <= min-side <= max-side")
    if not (1 <= quality_range[0] <= quality_range[1] <= 100):
        raise ValueError("need 1 <= quality min <= quality max <= 100")
    if max_objects < 1:
        raise ValueError("--max-objects must be >= 1")
    mkdataset.photo_paths(photos_dir)  # fails early without photos
    out = os.path.abspath(out)
    for sub in ("images", "labels"):
        os.makedirs(os.path.join(out, sub, "train"), exist_ok=True)
    a = dict(kind=kind, classes=classes, min_side=min_side, max_side=max_side, quality_range=quality_range,
             max_objects=max_objects, background=background, photos=photos_dir)

    order = list(range(images))
    random.Random(f"{seed}:roles").shuffle(order)
    roles = ["boxes"] * images
    for i in order[:no_labels_for]:
        roles[i] = "missing"
    for i in order[no_labels_for:no_labels_for + bad_labels]:
        roles[i] = "bad"
    for i in order[no_labels_for + bad_labels:no_labels_for + bad_labels + polygons]:
        roles[i] = "polygons"
    # Bad lines cycle through BAD_KINDS, so every kind appears once there are enough.
    jobs_list, k = [], 0
    for i in range(images):
        kinds = []
        if roles[i] == "bad":
            n = random.Random(f"{seed}:badcount:{i}").randint(1, 3)
            kinds = [BAD_KINDS[(k + t) % len(BAD_KINDS)] for t in range(n)]
            k += n
        jobs_list.append((out, f"img_{i:05d}", f"{seed}:{kind}:{i}", roles[i], kinds, None, a))
    corrupt_kinds = ["truncated", "empty", "random"]
    for j in range(corrupt):
        jobs_list.append((out, f"corrupt_{j:03d}", f"{seed}:{kind}:corrupt:{j}", "boxes", [],
                          corrupt_kinds[j % 3], a))

    if jobs > 1 and len(jobs_list) > 8:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            entries = list(ex.map(_job, jobs_list, chunksize=4))
    else:
        entries = [_job(j) for j in jobs_list]
    entries.sort(key=lambda e: e["image"])  # the data set's order: sorted by path

    names = [PALETTE[c][0] for c in range(classes)] if kind == "scenes" else [f"class_{c:02d}" for c in
                                                                                range(classes)]
    with open(os.path.join(out, "data.yaml"), "w") as f:
        f.write(f"# made by scripts/mkyolo.py --kind {kind} --images {images} --seed {seed}\n")
        f.write(f"path: {out}\ntrain: images/train\nval: images/train\nnames:\n")
        f.write("".join(f"  {c}: {n}\n" for c, n in enumerate(names)))
    manifest = {"kind": kind, "seed": seed, "classes": classes, "names": names, "root": out,
                "palette": [list(PALETTE[c][1]) for c in range(classes)] if kind == "scenes" else None,
                "background": (SCENE_GREY if background == "grey" else "photo") if kind == "scenes" else None,
                "images": entries}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return manifest


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("out", metavar="OUT_DIR")
    p.add_argument("--kind", choices=sorted(DEFAULTS), default="photos")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--classes", type=int, default=None, help="default 80 (photos), 8 (scenes, at most 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-side", type=int, default=None,
                   help="photos: long side, default 480..800; scenes: each side, default 320..800")
    p.add_argument("--max-side", type=int, default=None)
    p.add_argument("--quality-range", type=int, nargs=2, metavar=("MIN", "MAX"), default=None,
                   help="JPEG quality, default 75 95 (photos), 95 95 (scenes)")
    p.add_argument("--max-objects", type=int, default=None, help="objects per image: 1..this (8 photos, 6 scenes)")
    p.add_argument("--background", choices=["grey", "photo"], default="grey", help="scenes' background")
    p.add_argument("--no-labels-for", type=int, default=0, metavar="K")
    p.add_argument("--bad-labels", type=int, default=0, metavar="K")
    p.add_argument("--polygons", type=int, default=0, metavar="K")
    p.add_argument("--corrupt", type=int, default=0, metavar="K")
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                   help="encoder processes (output does not depend on it)")
    p.add_argument("--photos", default=mkdataset.PHOTOS, help="source photo directory")
    a = p.parse_args(argv)
    try:
        m = build(a.out, a.images, a.kind, a.classes, a.seed, a.min_side, a.max_side, a.quality_range,
                  a.max_objects, a.background, a.no_labels_for, a.bad_labels, a.polygons, a.corrupt,
                  a.jobs, a.photos)
    except ValueError as e:
        p.error(str(e))
    n_bad = 0
    for e in m["images"]:
        if e["corrupt"]:
            print(os.path.join(m["root"], e["image"]))
        for lineno, _ in e["bad_lines"]:
            print(f"{os.path.join(m['root'], e['label'])}:{lineno}")
            n_bad += 1
    n_boxes = sum(len(e["boxes"]) for e in m["images"])
    print(f"mkyolo: {len(m['images'])} images ({a.corrupt} corrupt), {n_boxes} objects, {n_bad} bad label "
          f"lines in {m['root']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
