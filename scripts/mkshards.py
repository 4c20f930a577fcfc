#!/usr/bin/env python3
"""Write WebDataset tar shards from an ImageFolder or YOLO tree.

  mkshards.py imagefolder SRC OUTDIR [--prefix train] [--maxcount N] [--maxsize BYTES]
  mkshards.py yolo SRC OUTDIR ...     (SRC: an images directory or a .txt list of images)

Samples go in the order stokerd (and torchvision / Ultralytics) give the same
tree as loose files, so sample i of the shards is sample i of the tree:
ImageFolder: classes sorted, then every directory under a class sorted as a
path, files sorted by name; YOLO: every image under SRC sorted by relative
path, or a list's order. Each sample is `KEY.EXT` (the image, its extension
lower-cased) plus `KEY.cls` (the class index) or `KEY.txt` (the YOLO label
file, when the image has one). KEY is the image's relative path without its
extension, with dots in the file name made '_' (WebDataset's key ends at the
first dot of the name). A shard holds at most --maxcount samples and
--maxsize bytes (a sample is never split; a shard holds at least one).

Headers are deterministic (mtime 0, uid/gid 0, no user names, mode 0644,
POSIX pax only for long names): the same tree gives the same bytes. Shards
are written as OUTDIR/PREFIX-000000.tar, ... (each via a temporary file and
a rename); the brace pattern naming them is printed.
"""

import argparse
import io
import os
import sys
import tarfile

# The files each loose-file loader lists (daemon/data/dataset_local.c and
# dataset_yolo.c): torchvision's
# IMG_EXTENSIONS, and the Ultralytics IMG_FORMATS stoker decodes.
IMAGEFOLDER_EXTS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
YOLO_EXTS = (".bmp", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff", ".webp")


def _walk_dirs(root, rel):
    """rel and every directory under it (following links, as os.walk does)."""
    out = [rel]
    for name in os.listdir(os.path.join(root, rel)):
        child = os.path.join(rel, name)
        if os.path.isdir(os.path.join(root, child)):
            out.extend(_walk_dirs(root, child))
    return out


def _images_in(root, rel, exts):
    full = os.path.join(root, rel)
    return sorted(n for n in os.listdir(full)
                  if n.lower().endswith(exts) and not os.path.isdir(os.path.join(full, n)))


def imagefolder_samples(src):
    """(relative image path, class index) in torchvision's order."""
    classes = sorted(n for n in os.listdir(src) if os.path.isdir(os.path.join(src, n)))
    if not classes:
        raise SystemExit(f"mkshards: {src}: no class directories")
    for c, cls in enumerate(classes):
        for d in sorted(_walk_dirs(src, cls)):
            for f in _images_in(src, d, IMAGEFOLDER_EXTS):
                yield os.path.join(d, f), c


def label_path(image_path):
    """Ultralytics' img2label_paths for one image."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    head, sep, tail = image_path.rpartition(sa)
    p = head + sb + tail if sep else image_path
    return os.path.splitext(p)[0] + ".txt"


def yolo_samples(src):
    """(image path relative to base, base) in Ultralytics' order."""
    if os.path.isdir(src):
        rels = []
        for d in _walk_dirs(src, "."):
            rels.extend(os.path.normpath(os.path.join(d, f)) for f in _images_in(src, d, YOLO_EXTS))
        return sorted(rels), src
    base = os.path.dirname(os.path.abspath(src))
    rels = []
    with open(src) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                rels.append(line[2:] if line.startswith("./") else line)
    return rels, base


def sample_key(rel):
    d, name = os.path.split(rel)
    stem = os.path.splitext(name)[0].replace(".", "_")
    return os.path.join(d, stem).replace(os.sep, "/")


def _info(name, size):
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 0
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


class ShardWriter:
    def __init__(self, outdir, prefix, maxcount, maxsize):
        self.outdir, self.prefix = outdir, prefix
        self.maxcount, self.maxsize = maxcount, maxsize
        self.index = -1
        self.tar = None
        self.count = self.size = 0
        self.paths = []

    def _next(self):
        self.close()
        self.index += 1
        path = os.path.join(self.outdir, f"{self.prefix}-{self.index:06d}.tar")
        self.tmp = path + ".tmp"
        self.path = path
        self.tar = tarfile.open(self.tmp, "w", format=tarfile.PAX_FORMAT)
        self.count = self.size = 0

    def write(self, members):
        """members: [(name, bytes)], one sample."""
        nbytes = sum(512 + (len(b) + 511) // 512 * 512 for _, b in members)
        if self.tar is None or self.count >= self.maxcount or (self.count and self.size + nbytes > self.maxsize):
            self._next()
        for name, data in members:
            self.tar.addfile(_info(name, len(data)), io.BytesIO(data))
        self.count += 1
        self.size += nbytes

    def close(self):
        if self.tar is not None:
            self.tar.close()
            os.replace(self.tmp, self.path)
            self.paths.append(self.path)
            self.tar = None


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("layout", choices=("imagefolder", "yolo"))
    ap.add_argument("src")
    ap.add_argument("outdir")
    ap.add_argument("--prefix", default="train")
    ap.add_argument("--maxcount", type=int, default=10000, help="samples per shard (10000)")
    ap.add_argument("--maxsize", type=int, default=1 << 30, help="bytes per shard (1 GiB)")
    a = ap.parse_args(argv)
    if a.maxcount < 1 or a.maxsize < 1:
        ap.error("--maxcount and --maxsize must be positive")
    os.makedirs(a.outdir, exist_ok=True)
    w = ShardWriter(a.outdir, a.prefix, a.maxcount, a.maxsize)
    seen = set()
    n = 0
    if a.layout == "imagefolder":
        items = ((os.path.join(a.src, rel), rel, str(c).encode(), "cls") for rel, c in imagefolder_samples(a.src))
    else:
        rels, base = yolo_samples(a.src)

        def yolo_items():
            for rel in rels:
                image = os.path.join(base, rel)
                lp = label_path(os.path.abspath(image))
                yield image, rel, _read(lp) if os.path.exists(lp) else None, "txt"
        items = yolo_items()
    for image, rel, label, label_ext in items:
        key = sample_key(rel)
        if key in seen:
            raise SystemExit(f"mkshards: two images make the key {key!r} ({rel})")
        seen.add(key)
        ext = os.path.splitext(rel)[1].lower()
        members = [(key + ext, _read(image))]
        if label is not None:
            members.append((f"{key}.{label_ext}", label))
        w.write(members)
        n += 1
    w.close()
    if n == 0:
        raise SystemExit(f"mkshards: no images under {a.src}")
    last = w.index
    pattern = os.path.join(a.outdir, f"{a.prefix}-{{{0:06d}..{last:06d}}}.tar")
    print(pattern)
    print(f"mkshards: {n} samples in {last + 1} shard(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
