"""Detection training (task="detect") against a real stokerd: YOLO data sets from
scripts/mkyolo.py, letterbox and mosaic transforms checked box by box against
the pixels they describe, the boxes array, determinism, label faults, data.yaml,
close_mosaic.

Scenes (mkyolo --kind scenes) are solid rectangles, one colour per class, on
grey 60; so a box can be checked against the pixels of its class's colour:
the connected component of those pixels that it overlaps has (nearly) the
same bounding box.
"""

import math
import re
import time

import numpy as np
import pytest

import stoker

S = 320                     # output side for most tests
GREYS = [(60, 60, 60), (114, 114, 114)]   # scene background, letterbox/mosaic padding
PAD = 114
# The mosaic test's affine: hue/saturation/value untouched, so colours stay.
AFFINE = dict(degrees=10.0, shear=2.0, translate=0.1, scale=0.5, perspective=0.0, hsv_h=0.0, hsv_s=0.0,
              hsv_v=0.0, mixup=0.0, fliplr=0.5, flipud=0.5, mosaic=1.0)


# -- looking at pixels -------------------------------------------------------

def components(mask):
    """8-connected components of a boolean [H,W] mask, as [x0, y0, x1, y1, area]
    (x1, y1 exclusive): union-find over the row runs."""
    H, W = mask.shape
    m = np.zeros((H, W + 2), np.int8)
    m[:, 1:-1] = mask
    d = np.diff(m, axis=1)
    ys, xs = np.nonzero(d == 1)      # run starts, row-major, so they pair with the ends
    _, xe = np.nonzero(d == -1)      # run ends (exclusive)
    first = np.searchsorted(ys, np.arange(H + 1)).tolist()     # first run of each row
    ys, xs, xe = ys.tolist(), xs.tolist(), xe.tolist()
    parent = list(range(len(ys)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for y in range(1, H):
        i, i_end, j, j_end = first[y - 1], first[y], first[y], first[y + 1]
        while i < i_end and j < j_end:
            if xs[i] <= xe[j] and xs[j] <= xe[i]:      # overlap or diagonal contact
                a, b = find(i), find(j)
                if a != b:
                    parent[a] = b
            if xe[i] < xe[j]:
                i += 1
            else:
                j += 1
    out = {}
    for r in range(len(ys)):
        c = out.setdefault(find(r), [xs[r], ys[r], xe[r], ys[r] + 1, 0])
        c[0], c[1] = min(c[0], xs[r]), min(c[1], ys[r])
        c[2], c[3] = max(c[2], xe[r]), max(c[3], ys[r] + 1)
        c[4] += xe[r] - xs[r]
    return list(out.values())


def colour_components(img, palette):
    """{class: components of the pixels nearer to its colour than half the distance to any
    other palette colour or background grey}."""
    px = img.astype(np.int32)
    out = {}
    for c, col in enumerate(palette):
        others = [o for o in list(palette) + GREYS if tuple(o) != tuple(col)]
        thr = 0.5 * min(math.dist(col, o) for o in others)
        d2 = ((px - np.array(col, np.int32)) ** 2).sum(axis=2)
        out[c] = components(d2 < thr * thr)
    return out


def iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def fits(box, ref):
    """A box fits its reference: IoU >= 0.9, or every edge within 1.5 px (resampling
    blur, and the corners of a rotated or sheared rectangle, which cover too little of
    their pixels to pass the colour threshold, cost small boxes their IoU)."""
    return iou(box, ref) >= 0.9 or max(abs(p - q) for p, q in zip(box, ref)) <= 1.5


def overlapping(box, comps):
    """The component whose bounding box overlaps `box` most (None if none does)."""
    best, best_area = None, 0.0
    for c in comps:
        w = min(box[2], c[2]) - max(box[0], c[0])
        h = min(box[3], c[3]) - max(box[1], c[1])
        if w > 0 and h > 0 and w * h > best_area:
            best, best_area = c, w * h
    return best


def pixel_boxes(rows, size):
    """Rows (cls, cx, cy, w, h) normalised -> [(cls, [x0, y0, x1, y1])] in pixels."""
    out = []
    for c, cx, cy, w, h in rows:
        out.append((int(round(c)), [(cx - w / 2) * size, (cy - h / 2) * size, (cx + w / 2) * size,
                                    (cy + h / 2) * size]))
    return out


def letterbox_geometry(W, H, size):
    """Ultralytics: load_image to long side `size` (each side min(ceil(side * r), size)),
    then LetterBox centres it: (scale x, scale y, left, top, width, height)."""
    r = size / max(W, H)
    w1, h1 = min(math.ceil(W * r), size), min(math.ceil(H * r), size)
    left, top = round((size - w1) / 2 - 0.1), round((size - h1) / 2 - 0.1)
    return w1 / W, h1 / H, left, top, w1, h1


# -- reading batches -----------------------------------------------------------

def loader(d, dataset, **kw):
    opts = dict(socket=d.socket, batch_size=8, image_size=S, task="detect", transform="letterbox", seed=0,
                shuffle=False)
    opts.update(kw)
    return stoker.Loader(dataset, **opts)


def take(ld, batches=None):
    """Copies of what the loader yields: [dict(images, boxes, labels, indices, replaced)]."""
    out = []
    for k, b in enumerate(ld):
        if batches is not None and k >= batches:
            break
        out.append(dict(images=np.array(b.images), boxes=np.array(b.boxes), labels=np.array(b.labels),
                        indices=np.array(b.indices), replaced=b.replaced))
    return out


def per_image(batches):
    """[(data-set index, image [S,S,3], rows [n,5] (cls, cx, cy, w, h))] over the batches."""
    out = []
    for b in batches:
        for i, idx in enumerate(b["indices"]):
            out.append((int(idx), b["images"][i], b["boxes"][b["boxes"][:, 0] == i][:, 1:]))
    return out


def train_dir(root):
    return root / "images" / "train"


def check_letterbox(entry, img, rows, palette, size=S, expect_boxes=None):
    """One letterboxed scene against its manifest entry and its own pixels."""
    where = entry["image"]
    W, H = entry["width"], entry["height"]
    sx, sy, left, top, w1, h1 = letterbox_geometry(W, H, size)
    want = entry["boxes"] if expect_boxes is None else expect_boxes
    # Padding: 114 everywhere off the resized image (1 px of slack for rounding).
    pad = np.ones((size, size), bool)
    pad[max(0, top - 1):top + h1 + 1, max(0, left - 1):left + w1 + 1] = False
    assert (img[pad] == PAD).all(), f"{where}: padding not {PAD}"
    inner = img[top + 2:top + h1 - 2, left + 2:left + w1 - 2]
    assert (np.abs(inner.astype(int) - 60) <= 8).all(axis=2).mean() > 0.3, f"{where}: content not where expected"
    got = pixel_boxes(rows, size)
    assert len(got) == len(want), f"{where}: {len(got)} boxes, manifest {len(want)}"
    assert sorted(c for c, _ in got) == sorted(b[0] for b in want), f"{where}: classes changed"
    comps = colour_components(img, palette)
    expected = [(b[0], [b[1] * sx + left, b[2] * sy + top, b[3] * sx + left, b[4] * sy + top]) for b in want]
    for c, box in got:
        assert -1e-3 <= box[0] < box[2] <= size + 1e-3 and -1e-3 <= box[1] < box[3] <= size + 1e-3, (where, box)
        comp = overlapping(box, comps[c])
        assert comp is not None, f"{where}: no {c}-coloured pixels under box {box}"
        assert fits(box, comp[:4]), f"{where}: box {box} vs colour component {comp[:4]} (IoU {iou(box, comp):.3f})"
        assert any(cc == c and fits(box, e) for cc, e in expected), f"{where}: box {box} is no manifest box"


def scenes(make_yolo, **kw):
    opts = dict(kind="scenes", images=16, classes=8, seed=1)
    opts.update(kw)
    return make_yolo(**opts)


# -- the generator, through the same pixel checks ------------------------------

def test_scene_pixels_match_manifest(make_yolo):
    """mkyolo's rectangles are where its manifest says, as colour_components sees them
    (so the checks below measure the daemon, not the helper)."""
    from PIL import Image
    root, m, _ = scenes(make_yolo)
    for e in m["images"]:
        img = np.asarray(Image.open(root / e["image"]).convert("RGB"))
        comps = colour_components(img, m["palette"])
        big = sorted((c, comp[:4]) for c, cs in comps.items() for comp in cs if comp[4] >= 16)
        assert big == sorted((b[0], b[1:]) for b in e["boxes"]), e["image"]


# -- letterbox ------------------------------------------------------------------

def test_letterbox_boxes_match_pixels(daemon, make_yolo):
    root, m, _ = scenes(make_yolo)
    d = daemon()
    with loader(d, train_dir(root)) as ld:
        assert ld.dataset_samples == len(m["images"])
        got = per_image(take(ld))
    assert sorted(i for i, _, _ in got) == list(range(len(m["images"])))
    for idx, img, rows in got:
        assert img.shape == (S, S, 3) and img.dtype == np.uint8
        check_letterbox(m["images"][idx], img, rows, m["palette"])


def test_max_boxes_per_image(daemon, make_yolo):
    root, m, _ = scenes(make_yolo)
    d = daemon()
    with loader(d, train_dir(root), max_boxes=3) as ld:
        got = per_image(take(ld))
    counts = [len(rows) for _, _, rows in got]
    assert counts == [min(3, len(m["images"][i]["boxes"])) for i, _, _ in got]
    assert max(len(e["boxes"]) for e in m["images"]) > 3, "data set too sparse to test max_boxes"


# -- mosaic + affine -------------------------------------------------------------

def check_train_image(img, rows, palette, where, size=S):
    """Every box on its colour's pixels; every whole colour blob under a box of its class."""
    boxes = pixel_boxes(rows, size)
    for c, _ in boxes:
        assert 0 <= c < len(palette), (where, c)
    x0, y0 = rows[:, 1] - rows[:, 3] / 2, rows[:, 2] - rows[:, 4] / 2
    x1, y1 = rows[:, 1] + rows[:, 3] / 2, rows[:, 2] + rows[:, 4] / 2
    eps = 1e-4
    assert (rows[:, 3] > 0).all() and (rows[:, 4] > 0).all(), where
    assert (x0 >= -eps).all() and (y0 >= -eps).all() and (x1 <= 1 + eps).all() and (y1 <= 1 + eps).all(), where
    comps = colour_components(img, palette)
    for c, box in boxes:
        comp = overlapping(box, comps[c])
        assert comp is not None, f"{where}: no {c}-coloured pixels under box {box}"
        if min(box[0], box[1]) > 0.5 and max(box[2], box[3]) < size - 0.5:
            assert fits(box, comp[:4]), \
                f"{where}: box {box} vs colour component {comp[:4]} (IoU {iou(box, comp):.3f})"
        else:
            # Clipped at the border: the box is the clipped bounding box of the transformed
            # rectangle's corners (as Ultralytics), which holds the visible part but may be
            # larger than it once the rectangle is rotated.
            assert all(comp[k] >= box[k] - 1.5 for k in (0, 1)) and all(comp[k] <= box[k] + 1.5 for k in (2, 3)), \
                f"{where}: colour component {comp[:4]} sticks out of border box {box}"
    for c, cs in comps.items():
        for comp in cs:
            cx0, cy0, cx1, cy1, area = comp
            whole = cx0 > 0 and cy0 > 0 and cx1 < size and cy1 < size   # not cut at the border
            if whole and area >= 400 and cx1 - cx0 >= 8 and cy1 - cy0 >= 8:
                assert any(cc == c and iou(box, comp) >= 0.8 for cc, box in boxes), \
                    f"{where}: class {c} blob {comp[:4]} has no box"


def test_mosaic_affine_boxes_match_pixels(daemon, make_yolo):
    root, m, _ = scenes(make_yolo, images=24, min_side=320, max_side=640, seed=2)
    d = daemon()
    with loader(d, train_dir(root), transform="mosaic", shuffle=True, seed=3, **AFFINE) as ld:
        got = per_image(take(ld, batches=2))
    assert len(got) == 16
    n_boxes = 0
    for k, (idx, img, rows) in enumerate(got):
        check_train_image(img, rows, m["palette"], f"image {k} (index {idx})")
        n_boxes += len(rows)
    assert n_boxes >= 16, "mosaic output has almost no boxes"
    # It is a mosaic: no output is its own sample letterboxed, and most show
    # other samples' objects.
    with loader(d, train_dir(root)) as ld:
        plain = {idx: img for idx, img, _ in per_image(take(ld))}
    assert not any(np.array_equal(img, plain[idx]) for idx, img, _ in got), "an image came out letterboxed"
    own = sum(sorted(int(c) for c in rows[:, 0]) == sorted(b[0] for b in m["images"][idx]["boxes"])
              for idx, _, rows in got)
    assert own <= len(got) // 2, f"{own} of {len(got)} images have only their own sample's classes"


def test_mixup_adds_boxes(daemon, make_yolo):
    root, m, _ = scenes(make_yolo, images=24, min_side=320, max_side=640, seed=2)
    d = daemon()
    counts = {}
    for mixup in (0.0, 1.0):
        with loader(d, train_dir(root), transform="mosaic", shuffle=True, seed=3, mosaic=1.0, mixup=mixup) as ld:
            got = per_image(take(ld, batches=2))
        for _, _, rows in got:
            x0, y0 = rows[:, 1] - rows[:, 3] / 2, rows[:, 2] - rows[:, 4] / 2
            x1, y1 = rows[:, 1] + rows[:, 3] / 2, rows[:, 2] + rows[:, 4] / 2
            assert (x0 >= -1e-4).all() and (y0 >= -1e-4).all() and (x1 <= 1 + 1e-4).all() and (y1 <= 1 + 1e-4).all()
            assert (rows[:, 3] > 0).all() and (rows[:, 4] > 0).all()
        counts[mixup] = np.mean([len(rows) for _, _, rows in got])
    assert counts[1.0] > counts[0.0] * 1.3, counts


# -- the boxes array ---------------------------------------------------------------

def test_boxes_array_layout(daemon, make_yolo):
    root, m, _ = make_yolo(kind="photos", images=24, classes=80, min_side=256, max_side=400, seed=4)
    d = daemon()
    B = 8
    with loader(d, train_dir(root), transform="mosaic", batch_size=B, image_size=256, shuffle=True) as ld:
        n_batches = 0
        for b in ld:
            n_batches += 1
            images, labels, boxes = b.images, b.labels, b.boxes
            assert images.dtype == np.uint8 and images.shape == (B, 256, 256, 3)
            assert labels.dtype == np.int64 and labels.shape == (B,)
            assert b.indices.dtype == np.int64 and b.indices.shape == (B,)
            assert ((b.indices >= 0) & (b.indices < len(m["images"]))).all()
            assert boxes.dtype == np.float32 and boxes.ndim == 2 and boxes.shape[1] == 6
            for a in (images, labels, boxes):
                assert not a.flags.writeable
            with pytest.raises(ValueError):
                boxes[0, 0] = 1
            col0 = boxes[:, 0]
            assert (col0 == np.round(col0)).all() and (col0 >= 0).all() and (col0 < B).all()
            assert (np.diff(col0) >= 0).all(), "boxes not sorted by image"
            assert boxes.shape[0] == int(labels.sum())
            for i in range(B):
                assert labels[i] == int((col0 == i).sum())
            cls = boxes[:, 1]
            assert (cls == np.round(cls)).all() and (cls >= 0).all() and (cls < 80).all()
            assert (boxes[:, 2:] >= 0).all() and (boxes[:, 2:] <= 1).all()
            assert boxes.shape[0] > 0
        assert n_batches == 3


# -- determinism -------------------------------------------------------------------

def test_deterministic_across_workers_and_loaders(daemon, make_yolo):
    root, m, _ = make_yolo(kind="photos", images=16, classes=10, min_side=256, max_side=400, seed=5)
    d1, d2 = daemon(workers=1), daemon(workers=2)
    # shuffle=False: the same samples in the same order whatever the seed, so a
    # different seed must show in the augmentation itself.
    opts = dict(transform="mosaic", image_size=256, shuffle=False, mixup=0.3, degrees=5.0, shear=1.0)

    def run(d, seed):
        with loader(d, train_dir(root), seed=seed, **opts) as ld:
            return take(ld, batches=2)

    a, b, c, other = run(d1, 7), run(d2, 7), run(d2, 7), run(d2, 8)
    def same(x, y, key):
        return all(p[key].tobytes() == q[key].tobytes() for p, q in zip(x, y))

    for what, x in (("--workers 2", b), ("a second loader", c)):
        assert len(x) == len(a) == 2
        for key in ("indices", "labels", "images", "boxes"):
            ok = same(a, x, key)
            assert ok, f"{what}: {key} differ"
    assert same(a, other, "indices")
    ok = [same(a, other, "images"), same(a, other, "boxes")]
    assert not ok[0], "seed has no effect on images"
    assert not ok[1], "seed has no effect on boxes"


# -- label faults --------------------------------------------------------------------

@pytest.fixture
def faulty(make_yolo):
    """Scenes with bad label lines, missing label files and polygon labels."""
    return scenes(make_yolo, images=24, bad_labels=4, no_labels_for=3, polygons=4, seed=6)


def test_bad_label_lines_counted_logged_and_served(daemon, faulty):
    root, m, printed = faulty
    assert len(printed) >= 4
    d = daemon()
    with loader(d, train_dir(root)) as ld:
        got = per_image(take(ld))
        assert ld.label_errors == len(printed)
    assert stoker.stats(socket=d.socket)["label_errors"] == len(printed)
    log = d.stderr()
    for line in printed:
        path, lineno = line.rsplit(":", 1)
        name = path.rsplit("/", 1)[-1]
        assert re.search(re.escape(name) + r"\W+(?:line\W+)?" + lineno + r"\b", log), \
            f"daemon log does not name {name} line {lineno}:\n{log}"
    seen = 0
    for idx, img, rows in got:
        e = m["images"][idx]
        if e["role"] == "bad":
            seen += 1
            check_letterbox(e, img, rows, m["palette"])     # the good lines' boxes, all of them
    assert seen == 4


def test_missing_label_file_means_no_objects(daemon, faulty):
    root, m, _ = faulty
    d = daemon()
    with loader(d, train_dir(root)) as ld:
        got = per_image(take(ld))
        assert ld.label_errors == sum(len(e["bad_lines"]) for e in m["images"])
    missing = [(idx, img, rows) for idx, img, rows in got if m["images"][idx]["role"] == "missing"]
    assert len(missing) == 3
    for idx, img, rows in missing:
        assert len(rows) == 0
        check_letterbox(m["images"][idx], img, rows, m["palette"], expect_boxes=[])


def test_polygon_labels_give_their_bounding_box(daemon, faulty):
    root, m, _ = faulty
    d = daemon()
    with loader(d, train_dir(root)) as ld:
        got = per_image(take(ld))
    polys = [(idx, img, rows) for idx, img, rows in got if m["images"][idx]["role"] == "polygons"]
    assert len(polys) == 4
    for idx, img, rows in polys:
        check_letterbox(m["images"][idx], img, rows, m["palette"])


def test_data_yaml_names_and_class_range(daemon, make_yolo):
    root, m, _ = scenes(make_yolo, images=8, classes=4, seed=77)   # options of its own: changed below
    target = next(e for e in m["images"] if e["role"] == "boxes")
    with open(root / target["label"], "a") as f:
        f.write("4 0.500000 0.500000 0.100000 0.100000\n")         # class 4 of 4 names
    d = daemon()
    with loader(d, root / "data.yaml", split="train") as ld:
        assert ld.class_names == ["red", "green", "blue", "yellow"]
        assert ld.num_classes == 4
        assert ld.dataset_samples == 8
        got = per_image(take(ld))
        assert ld.label_errors == 1
    assert stoker.stats(socket=d.socket)["label_errors"] == 1
    for idx, img, rows in got:
        check_letterbox(m["images"][idx], img, rows, m["palette"])
    # A directory has no names.
    with loader(d, train_dir(root)) as ld:
        assert ld.class_names == []


def test_list_file_of_image_paths(daemon, make_yolo, tmp_path):
    root, m, _ = scenes(make_yolo)
    order = list(reversed(range(len(m["images"]))))
    lst = tmp_path / "train.txt"
    lst.write_text("".join(f"{root / m['images'][i]['image']}\n" for i in order))
    d = daemon()
    with loader(d, lst) as ld:
        assert ld.dataset_samples == len(order)
        got = per_image(take(ld))
    assert [idx for idx, _, _ in got] == list(range(len(order)))
    for idx, img, rows in got:
        check_letterbox(m["images"][order[idx]], img, rows, m["palette"])


def test_corrupt_jpeg_replaced(daemon, make_yolo):
    root, m, printed = scenes(make_yolo, images=14, corrupt=2, seed=8)
    bad = {i for i, e in enumerate(m["images"]) if e["corrupt"]}
    assert len(bad) == 2 and len(m["images"]) == 16
    assert sorted(printed) == sorted(str(root / m["images"][i]["image"]) for i in bad)
    d = daemon()
    with loader(d, train_dir(root)) as ld:
        batches = take(ld)
    assert [len(b["labels"]) for b in batches] == [8, 8], "batches not complete"
    assert sum(b["replaced"] for b in batches) == 2
    got = per_image(batches)
    assert not {idx for idx, _, _ in got} & bad, "a corrupt sample was delivered"
    for idx, img, rows in got:
        check_letterbox(m["images"][idx], img, rows, m["palette"])
    assert stoker.stats(socket=d.socket)["decode_errors"] >= 2


# -- close_mosaic, parameter bounds ----------------------------------------------------

def test_close_mosaic_last_epochs_as_mosaic_off(daemon, make_yolo):
    root, m, _ = scenes(make_yolo, images=16, seed=9)
    d = daemon()
    common = dict(transform="mosaic", image_size=256, shuffle=True, seed=11)
    closing = loader(d, train_dir(root), epochs=3, close_mosaic=1, **common)
    plain = loader(d, train_dir(root), mosaic=0.0, **common)
    try:
        def first(ld, epoch):
            ld.set_epoch(epoch)
            return take(ld, batches=1)[0]

        def same(a, b):
            return (a["images"].tobytes() == b["images"].tobytes() and a["boxes"].tobytes() == b["boxes"].tobytes()
                    and (a["indices"] == b["indices"]).all())

        ok = [same(first(closing, e), first(plain, e)) for e in (2, 1, 0)]
        assert ok[0], "epoch 2 of 3 with close_mosaic=1 is not as mosaic=0"
        assert not ok[1], "mosaic already closed at epoch 1 of 3 with close_mosaic=1"
        assert not ok[2], "mosaic off at epoch 0"
    finally:
        closing.close()
        plain.close()


def test_hyper_parameter_out_of_range_refused(daemon, make_yolo):
    root, _, _ = scenes(make_yolo)
    d = daemon()
    with pytest.raises(stoker.StokerError):
        loader(d, train_dir(root), transform="mosaic", fliplr=1.5)
    with loader(d, train_dir(root), transform="mosaic", fliplr=1.0) as ld:   # the daemon still serves
        assert len(take(ld, batches=1)) == 1


# -- what the daemon refuses, and hostile files --------------------------------------

@pytest.mark.parametrize("kw, words", [
    (dict(transform="random_resized_crop"), "detect takes letterbox or mosaic"),
    (dict(dtype="float32"), "uint8"),
    (dict(coordinated=True), "coordinated"),
    (dict(max_boxes=0), "max_boxes"),
    (dict(max_boxes=10001), "max_boxes"),
    (dict(degrees=181.0), "degrees"),
    (dict(mosaic=float("nan")), None),            # the library refuses a NaN before sending it
    (dict(split="../x"), "split"),
])
def test_detect_refusals(daemon, make_yolo, kw, words):
    root, _, _ = scenes(make_yolo)
    d = daemon()
    with pytest.raises(stoker.StokerError) as e:
        loader(d, train_dir(root), **kw)
    if words:
        assert words in str(e.value), str(e.value)
    # A classification client may not send detection's transform or options.
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(train_dir(root), socket=d.socket, transform="letterbox")
    assert "classify" in str(e.value)
    with pytest.raises(TypeError):
        stoker.Loader(train_dir(root), socket=d.socket, mosaic=0.5)
    with loader(d, train_dir(root)) as ld:                 # and the daemon serves on
        assert len(take(ld, batches=1)) == 1


def test_hostile_label_files_and_yaml(daemon, make_yolo, tmp_path):
    """Label files that are huge, binary, enormous lines, many fields, a label path
    that is a directory; a yaml that is garbage: counted or refused, never a crash."""
    src, m, _ = scenes(make_yolo, images=8, seed=91)
    root = tmp_path / "hostile"
    import shutil
    shutil.copytree(src, root)
    labels = sorted((root / "labels" / "train").glob("*.txt"))
    labels[0].write_bytes(b"0 0.5 0.5 0.1 0.1\n" * (300000))           # 5.4 MB: over the 4 MiB bound
    labels[1].write_bytes(bytes(range(256)) * 64)                      # binary, with NUL bytes
    labels[2].write_text("0 " + "0.5 " * 20000 + "\n1 0.5 0.5 0.2 0.2\n")  # a 20001-value line, then a good one
    labels[3].write_text("0 0.5 0.5 0.2 0.2 " + "x" * 100000 + "\n")   # a 100 kB field
    labels[4].unlink()
    labels[4].mkdir()                                                  # a directory where a file should be
    labels[5].write_text("1e40 0.5 0.5 0.2 0.2\n0 inf 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n")
    d = daemon()
    with loader(d, train_dir(root)) as ld:
        got = per_image(take(ld))
        errors = ld.label_errors
    assert len(got) == 8
    # 1 (too big) + binary lines (>= 1) + 1 (many values) + 1 (long field) + 1 (directory) + 2 (1e40, inf)
    assert errors >= 7
    assert stoker.stats(socket=d.socket)["label_errors"] == errors
    by_index = {idx: rows for idx, _, rows in got}
    assert len(by_index[0]) == 0                                       # the huge file: no objects
    assert len(by_index[2]) == 1 and by_index[2][0][0] == 1            # its good line survived
    assert len(by_index[5]) == 1
    log = d.stderr()
    assert "larger than 4 MiB" in log and "not a number" in log
    # A yaml that is garbage, or names a split that is not there: refused with the reason.
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(stoker.StokerError) as e:
        loader(d, bad)
    assert "bad.yaml" in str(e.value)
    with pytest.raises(stoker.StokerError) as e:
        loader(d, root / "data.yaml", split="test")
    assert "no 'test' split" in str(e.value)
    with loader(d, root / "data.yaml", split="val") as ld:            # val: the same images here
        assert ld.dataset_samples == 8


def test_detect_resume_exact(daemon, make_yolo):
    """A checkpoint taken mid-epoch resumes detection batches byte for byte, in a new
    loader, on a restarted daemon."""
    root, _, _ = scenes(make_yolo, images=40, seed=13)
    kw = dict(transform="mosaic", batch_size=4, shuffle=True, seed=5)
    d = daemon()
    with loader(d, train_dir(root), **kw) as ld:
        ld.set_epoch(1)
        it = iter(ld)
        for _ in range(3):
            next(it)
        state = ld.state_dict()
        rest = [dict(images=np.array(b.images), boxes=np.array(b.boxes)) for b in it]
    d.stop()
    d2 = daemon()
    with loader(d2, train_dir(root), **kw) as ld:
        ld.load_state_dict(state)
        again = [dict(images=np.array(b.images), boxes=np.array(b.boxes)) for b in ld]
    assert len(again) == len(rest) == 10 - 3
    for a, b in zip(rest, again):
        assert np.array_equal(a["images"], b["images"]) and np.array_equal(a["boxes"], b["boxes"])


def test_mosaic_partner_images_within_memory_budget(daemon, make_yolo, tmp_path):
    """The mosaic's shared partner images count against memory_budget: an attach they
    would overrun is refused and says why; letterbox, which needs none, fits."""
    root, _, _ = scenes(make_yolo)
    conf = tmp_path / "budget.conf"
    # Ring: 5 slots x 8 x 640x640x3 = 49 MB; partner images as much again.
    conf.write_text("[stokerd]\nmemory_budget = 80M\ncache_bytes = 0\n")
    d = daemon(config=conf)
    with pytest.raises(stoker.StokerError) as e:
        loader(d, train_dir(root), transform="mosaic", image_size=640)
    assert "partner images" in str(e.value)
    with loader(d, train_dir(root), transform="letterbox", image_size=640) as ld:
        assert len(take(ld, batches=1)) == 1


def test_mosaic_decodes_each_image_once_with_many_workers(daemon, make_yolo):
    """A mosaic batch's images are made once each however many workers share the
    batch: a worker that needs a partner another worker is still making waits for
    it (making the batch's unstarted images meanwhile) instead of decoding its own
    copy. Six workers on one 16-image batch raced to 1.6 file reads a sample before.
    The daemon's encoded-cache lookups count the file reads; once the daemon is
    idle every job it made is whole, so reads == samples made, exactly."""
    root, _, _ = make_yolo(kind="photos", images=64, classes=10, min_side=200, max_side=320, seed=11)
    d = daemon(workers=6, prefetch=2)
    with loader(d, train_dir(root), transform="mosaic", image_size=256, batch_size=16, shuffle=True) as ld:
        assert sum(len(b["indices"]) for b in take(ld)) == 64
        last, still = None, 0
        for _ in range(600):  # until the daemon has made all it will (whole jobs): 10 equal reads
            st = d.stats()
            made = (st["samples_decoded"], st["cache"]["encoded"]["hits"] + st["cache"]["encoded"]["misses"])
            still = still + 1 if made == last else 0
            if still >= 10 and made[0] % 16 == 0:
                break
            last = made
            time.sleep(0.05)
    samples, reads = made
    assert samples >= 64
    assert reads == samples, f"{reads} file reads for {samples} mosaic samples"
