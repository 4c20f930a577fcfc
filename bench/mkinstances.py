#!/usr/bin/env python3
"""A small real-photo YOLO data set for segment and pose, every label exact.

Four objects are cut out of the photos in data/photos along polygons
written by hand for this script (the OBJECTS table: the cat's head in
chelsea.png, the cup and saucer in coffee.png, the astronaut's head in
astronaut.png, the rocket in rocket.jpg), each with three keypoints written
by hand (the object's left and right feature as they appear in the photo,
and its centre one: eyes and nose, the saucer's ends and the coffee, the
rocket's base corners and nose). Each scene is a random crop of a
background photo (hubble_deep_field, or brick / grass / gravel tinted a
random colour) with one to three objects pasted at random scales and
positions, mirrored with p 0.5, never overlapping and never cut by the
image border. An object's pixels are those inside its polygon, so the
polygon carried through the same scale, mirror and shift is the pasted
region exactly: the segment label is that polygon, the pose label its box
and its keypoints (left and right swapped when mirrored, so flip_idx
[1, 0, 2] holds; all visible).

Writes OUT/segment and OUT/pose, each an Ultralytics data set
(images/{train,val}, labels/{train,val}, data.yaml; pose's with kpt_shape
[3, 3] and flip_idx [1, 0, 2]) over the same JPEG scenes, and
OUT/NOTICE.md (the photos' licences). Deterministic for a --seed.

    python3 bench/mkinstances.py OUT [--train 48] [--val 16] [--seed 0] [--scale 1]
"""

import argparse
import os
import random
import shutil

import cv2
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = os.path.join(REPO, "data", "photos")

# name, photo, polygon (x, y normalised to the photo), keypoints (left, right,
# centre; normalised). Written by hand for this data set over the photos.
OBJECTS = [
    ("cat", "chelsea.png",
     [(0.10, 0.05), (0.30, 0.00), (0.70, 0.00), (0.88, 0.10), (0.86, 0.45), (0.80, 0.75), (0.68, 0.95),
      (0.55, 1.00), (0.40, 1.00), (0.25, 0.92), (0.12, 0.75), (0.05, 0.50)],
     [(0.377, 0.383), (0.705, 0.460), (0.565, 0.800)]),
    ("cup", "coffee.png",
     [(0.30, 0.08), (0.40, 0.04), (0.55, 0.04), (0.66, 0.08), (0.69, 0.16), (0.68, 0.22), (0.75, 0.30),
      (0.80, 0.45), (0.78, 0.62), (0.70, 0.78), (0.58, 0.90), (0.45, 0.95), (0.32, 0.92), (0.20, 0.82),
      (0.14, 0.68), (0.13, 0.52), (0.17, 0.38), (0.24, 0.28), (0.29, 0.20)],
     [(0.130, 0.550), (0.800, 0.520), (0.450, 0.375)]),
    ("face", "astronaut.png",
     [(0.445, 0.029), (0.533, 0.059), (0.572, 0.146), (0.563, 0.225), (0.514, 0.293), (0.440, 0.347),
      (0.372, 0.293), (0.343, 0.225), (0.328, 0.166), (0.367, 0.068)],
     [(0.392, 0.200), (0.479, 0.202), (0.436, 0.249)]),
    ("rocket", "rocket.jpg",
     [(0.500, 0.300), (0.512, 0.315), (0.519, 0.340), (0.519, 0.930), (0.530, 0.960), (0.470, 0.960),
      (0.484, 0.930), (0.484, 0.340), (0.488, 0.315)],
     [(0.484, 0.930), (0.519, 0.930), (0.500, 0.300)]),
]
BACKGROUNDS = ["hubble_deep_field.jpg", "brick.png", "grass.png", "gravel.png"]
NOTICE = """# Photos in this data set

Scenes composited by bench/mkinstances.py from the photos in data/photos (scikit-image's sample data):
astronaut.png (NASA, public domain), chelsea.png (Stefan van der Walt, CC0), coffee.png (Rachel Michetti,
CC0), rocket.jpg (SpaceX, public domain), hubble_deep_field.jpg (NASA, public domain), brick.png, grass.png,
gravel.png (CC0Textures, CC0). Polygons and keypoints written by hand for this project (MIT).
"""


class Cutout:
    """One object: its photo's bounding-box crop, polygon and keypoints in crop pixels."""

    def __init__(self, cls, photo, poly, kpts):
        img = cv2.imread(os.path.join(PHOTOS, photo), cv2.IMREAD_COLOR)
        h, w = img.shape[:2]
        p = np.array(poly, np.float64) * (w, h)
        x0, y0 = np.floor(p.min(0)).astype(int)
        x1, y1 = np.ceil(p.max(0)).astype(int)
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
        self.cls, self.img = cls, img[y0:y1, x0:x1]
        self.poly = p - (x0, y0)
        self.kpts = np.array(kpts, np.float64) * (w, h) - (x0, y0)


def background(rng, photos, w, h):
    name = rng.choice(BACKGROUNDS)
    src = photos[name]
    sh, sw = src.shape[:2]
    side = rng.uniform(0.5, 1.0)
    cw, ch = min(sw, int(sw * side)), min(sh, int(sw * side * h / w))
    x, y = rng.randrange(sw - cw + 1), rng.randrange(sh - ch + 1)
    bg = cv2.resize(src[y:y + ch, x:x + cw], (w, h), interpolation=cv2.INTER_AREA)
    if src.ndim == 2 or name != "hubble_deep_field.jpg":  # a grey texture, tinted
        grey = bg if bg.ndim == 2 else cv2.cvtColor(bg, cv2.COLOR_BGR2GRAY)
        tint = np.array([rng.uniform(0.4, 1.0) for _ in range(3)], np.float32)
        bg = np.clip(grey[..., None].astype(np.float32) * tint, 0, 255).astype(np.uint8)
    return bg


def scene(rng, cutouts, photos, w, h):
    """One image and its objects: (class, polygon px, keypoints px) each."""
    img = background(rng, photos, w, h)
    placed, objs = [], []
    for _ in range(rng.randint(1, 3)):
        c = rng.choice(cutouts)
        ch, cw = c.img.shape[:2]
        for _try in range(40):
            s = rng.uniform(0.3, 0.65) * min(w, h) / max(cw, ch)
            nw, nh = max(2, round(cw * s)), max(2, round(ch * s))
            if nw >= w or nh >= h:
                continue
            ox, oy = rng.randrange(w - nw), rng.randrange(h - nh)
            if all(ox + nw <= px or px + pw <= ox or oy + nh <= py or py + ph <= oy for px, py, pw, ph in placed):
                break
        else:
            continue
        placed.append((ox, oy, nw, nh))
        sx, sy = nw / cw, nh / ch
        patch = cv2.resize(c.img, (nw, nh), interpolation=cv2.INTER_AREA)
        poly, kpts = c.poly * (sx, sy), c.kpts * (sx, sy)
        if rng.random() < 0.5:  # mirrored: x -> nw - x, and the left and right keypoints swap
            patch = patch[:, ::-1]
            poly[:, 0] = nw - poly[:, 0]
            kpts[:, 0] = nw - kpts[:, 0]
            kpts = kpts[[1, 0, 2]]
        poly, kpts = poly + (ox, oy), kpts + (ox, oy)
        mask = np.zeros((h, w), np.uint8)
        cv2.fillPoly(mask, [np.round(poly * 16).astype(np.int32)], 1, lineType=cv2.LINE_8, shift=4)
        region = img[oy:oy + nh, ox:ox + nw]
        m = mask[oy:oy + nh, ox:ox + nw, None].astype(bool)
        img[oy:oy + nh, ox:ox + nw] = np.where(m, patch, region)
        objs.append((c.cls, poly, kpts))
    return img, objs


def write_labels(path, objs, w, h, task):
    lines = []
    for cls, poly, kpts in objs:
        p = poly / (w, h)
        if task == "segment":
            lines.append(f"{cls} " + " ".join(f"{x:.6f} {y:.6f}" for x, y in p))
        else:
            (x0, y0), (x1, y1) = p.min(0), p.max(0)
            k = kpts / (w, h)
            lines.append(f"{cls} {(x0 + x1) / 2:.6f} {(y0 + y1) / 2:.6f} {x1 - x0:.6f} {y1 - y0:.6f} "
                         + " ".join(f"{x:.6f} {y:.6f} 2" for x, y in k))
    with open(path, "w") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))


def build(out, n_train, n_val, seed, quality=90, scale=1):
    cutouts = [Cutout(i, photo, poly, kpts) for i, (_, photo, poly, kpts) in enumerate(OBJECTS)]
    photos = {n: cv2.imread(os.path.join(PHOTOS, n), cv2.IMREAD_UNCHANGED) for n in BACKGROUNDS}
    names = "".join(f"  {i}: {name}\n" for i, (name, *_) in enumerate(OBJECTS))
    shutil.rmtree(out, ignore_errors=True)
    for task in ("segment", "pose"):
        root = os.path.join(out, task)
        for split in ("train", "val"):
            os.makedirs(os.path.join(root, "images", split))
            os.makedirs(os.path.join(root, "labels", split))
        extra = "kpt_shape: [3, 3]\nflip_idx: [1, 0, 2]\n" if task == "pose" else ""
        with open(os.path.join(root, "data.yaml"), "w") as f:
            f.write(f"path: {os.path.abspath(root)}\ntrain: images/train\nval: images/val\n{extra}names:\n{names}")
    counts = [0] * len(OBJECTS)
    for split, n, split_seed in (("train", n_train, seed), ("val", n_val, seed + 10007)):
        rng = random.Random(split_seed)
        for i in range(n):
            w, h = (v * scale for v in rng.choice([(320, 240), (288, 256), (256, 320), (320, 320), (352, 256)]))
            img, objs = scene(rng, cutouts, photos, w, h)
            for cls, *_ in objs:
                counts[cls] += 1
            stem = f"{split}{i:04d}"
            for task in ("segment", "pose"):
                root = os.path.join(out, task)
                cv2.imwrite(os.path.join(root, "images", split, stem + ".jpg"), img,
                            [cv2.IMWRITE_JPEG_QUALITY, quality])
                write_labels(os.path.join(root, "labels", split, stem + ".txt"), objs, w, h, task)
    with open(os.path.join(out, "NOTICE.md"), "w") as f:
        f.write(NOTICE)
    return counts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--train", type=int, default=48, help="training images")
    p.add_argument("--val", type=int, default=16, help="validation images")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=int, default=1, help="scene sizes times this (1: 256-352 px, 2: 512-704 px)")
    a = p.parse_args()
    counts = build(a.out, a.train, a.val, a.seed, scale=a.scale)
    print(f"mkinstances: {a.train} + {a.val} images in {a.out}/segment and {a.out}/pose; objects per class "
          + ", ".join(f"{OBJECTS[i][0]} {n}" for i, n in enumerate(counts)))


if __name__ == "__main__":
    main()
