"""What Ultralytics' validator needs from detection batches, against a real stokerd:
per-image metadata (original and load_image sizes, ratio_pad), sample file names, and
rectangular batches (rect=True), checked against an independent numpy transcription
of Ultralytics' formulas (BaseDataset.load_image / set_rectangle, LetterBox,
ContiguousDistributedSampler) and the images' own sizes (Pillow). The comparison
with Ultralytics' own YOLODataset is tests/detect_parity (make check-detect-parity).
"""

import math
import os
import shutil

import numpy as np
import pytest
from PIL import Image

import stoker

PAD = 114


def images_of(root):
    return sorted((root / "images" / "train").glob("*.jpg"))


def load_size(w0, h0, imgsz):
    """load_image: r = imgsz / max(h0, w0); each side min(ceil(side0 * r), imgsz)."""
    r = imgsz / max(h0, w0)
    return min(math.ceil(w0 * r), imgsz), min(math.ceil(h0 * r), imgsz)


def letterbox(w, h, new_h, new_w):
    """LetterBox(scaleup=False): (r, new_unpad w, h, left, top)."""
    r = min(new_h / h, new_w / w, 1.0)
    uw, uh = (w, h) if r == 1.0 else (max(round(w * r), 1), max(round(h * r), 1))
    return r, uw, uh, round((new_w - uw) / 2 - 0.1), round((new_h - uh) / 2 - 0.1)


def rect_plan(sizes, batch, imgsz, stride=32, pad=0.5):
    """set_rectangle with a stable sort: (order, batch_shapes [nb, 2] as (h, w))."""
    s = np.array([(h, w) for w, h in sizes], dtype=np.int64)
    ar = s[:, 0] / s[:, 1]
    order = np.argsort(ar, kind="stable")
    ar = ar[order]
    n = len(sizes)
    bi = np.floor(np.arange(n) / batch).astype(int)
    nb = bi[-1] + 1
    shapes = [[1, 1]] * nb
    for i in range(nb):
        ari = ar[bi == i]
        mini, maxi = ari.min(), ari.max()
        if maxi < 1:
            shapes[i] = [maxi, 1]
        elif mini > 1:
            shapes[i] = [1, 1 / mini]
    return order, np.ceil(np.array(shapes) * imgsz / stride + pad).astype(int) * stride


def contiguous_range(n, batch, rank, world):
    """ContiguousDistributedSampler._get_rank_indices."""
    unit = 1 if batch >= n else batch
    nb = math.ceil(n / unit)
    base, rem = divmod(nb, world)
    mine = base + (1 if rank < rem else 0)
    start = rank * base + min(rank, rem)
    return min(start * unit, n), min((start + mine) * unit, n)


def open_loader(d, path, **kw):
    opts = dict(socket=d.socket, batch_size=4, image_size=256, task="detect", transform="letterbox")
    opts.update(kw)
    return stoker.Loader(path, **opts)


def collect(ld):
    out = []
    for b in ld:
        out.append(dict(images=np.array(b.images), boxes=np.array(b.boxes), indices=np.array(b.indices),
                        shapes=np.array(b.shapes), ratio_pad=np.array(b.ratio_pad), replaced=b.replaced))
    return out


@pytest.fixture
def varied(make_yolo):
    """Scenes of independent width and height, 320..800: many aspect ratios."""
    root, manifest, _ = make_yolo(kind="scenes", images=23, classes=4, seed=21)
    files = images_of(root)
    sizes = [Image.open(f).size for f in files]
    return root, files, sizes


def check_metadata(b, sizes, imgsz, out_h, out_w):
    for i, idx in enumerate(b["indices"]):
        w0, h0 = sizes[idx]
        w1, h1 = load_size(w0, h0, imgsz)
        r, uw, uh, left, top = letterbox(w1, h1, out_h, out_w)
        assert b["shapes"][i].tolist() == [h0, w0, h1, w1], (idx, b["shapes"][i])
        want = [h1 / h0 * r, w1 / w0 * r, left, top]
        assert b["ratio_pad"][i].tolist() == want, (idx, b["ratio_pad"][i], want)
        img = b["images"][i]
        # the padding is exactly where LetterBox puts it
        assert (img[:top] == PAD).all() and (img[top + uh:] == PAD).all()
        assert (img[:, :left] == PAD).all() and (img[:, left + uw:] == PAD).all()


def test_square_letterbox_metadata(daemon, varied):
    root, files, sizes = varied
    d = daemon()
    with open_loader(d, root / "images" / "train", shuffle=False) as ld:
        batches = collect(ld)
    assert sum(len(b["indices"]) for b in batches) == len(files)
    for b in batches:
        assert b["images"].shape[1:] == (256, 256, 3)
        check_metadata(b, sizes, 256, 256, 256)


def test_mosaic_metadata_describes_each_sample(daemon, varied):
    root, files, sizes = varied
    d = daemon()
    with open_loader(d, root / "images" / "train", transform="mosaic", seed=3) as ld:
        batches = collect(ld)
    seen = 0
    for b in batches:
        for i, idx in enumerate(b["indices"]):
            w0, h0 = sizes[idx]
            w1, h1 = load_size(w0, h0, 256)
            assert b["shapes"][i].tolist() == [h0, w0, h1, w1]
            assert b["ratio_pad"][i].tolist() == [h1 / h0, w1 / w0, 0.0, 0.0]
            seen += 1
    assert seen == len(files)


def test_sample_paths_name_the_delivered_files(daemon, varied):
    root, files, sizes = varied
    d = daemon()
    with open_loader(d, root / "images" / "train", transform="mosaic", seed=1) as ld:
        for b in ld:
            paths = ld.sample_paths(b.indices)
            for i, p in enumerate(paths):
                assert p == os.path.realpath(files[b.indices[i]])
                # and the metadata is that file's
                assert b.shapes[i, :2].tolist() == list(Image.open(p).size[::-1])
        with pytest.raises(stoker.StokerError) as e:
            ld.sample_path(len(files))
        assert e.value.errno == 34  # ERANGE
        assert "past" in str(e.value)


def test_sample_names_in_chunks_of_a_long_list(daemon, varied, tmp_path):
    """2,500 entries with long names, relative and absolute: every name right, over many
    bounded replies and chunk evictions."""
    root, files, sizes = varied
    links = tmp_path / "imgs"
    links.mkdir()
    lines, want = [], []
    for k in range(2500):
        f = files[k % len(files)]
        name = f"{k:05d}_" + "x" * 180 + ".jpg"       # ~190 bytes: a reply holds ~170
        (links / name).symlink_to(f)
        if k % 2:
            lines.append(str(links / name))             # absolute
        else:
            lines.append(f"./imgs/{name}")              # relative to the list
        want.append(str(links / name))
    listing = tmp_path / "list.txt"
    listing.write_text("\n".join(lines) + "\n")
    d = daemon()
    with open_loader(d, listing, batch_size=8, shuffle=False) as ld:
        assert ld.dataset_samples == 2500
        got = [ld.sample_path(i) for i in range(2500)]
        # in an order that defeats the cache, interleaved with batches
        it = iter(ld)
        for i in (2499, 0, 1500, 3, 2048, 1023, 1024):
            assert ld.sample_path(i) == want[i]
            next(it)
    assert got == want


def test_rect_batches_follow_set_rectangle(daemon, varied):
    root, files, sizes = varied
    d = daemon()
    order, shapes = rect_plan(sizes, 4, 256)
    with open_loader(d, root / "images" / "train", rect=True) as ld:
        assert len(ld) == len(shapes)
        batches = collect(ld)
    assert [b["images"].shape[1:3] for b in batches] == [tuple(s) for s in shapes.tolist()]
    assert np.concatenate([b["indices"] for b in batches]).tolist() == order.tolist()
    assert any(s[0] != s[1] for s in shapes.tolist()), "the data set should give rectangular batches"
    for b, (h, w) in zip(batches, shapes.tolist()):
        check_metadata(b, sizes, 256, h, w)
        # boxes normalised to this batch's own width and height
        bx = b["boxes"]
        assert ((bx[:, 2] - bx[:, 4] / 2) >= -1e-6).all() and ((bx[:, 2] + bx[:, 4] / 2) <= 1 + 1e-6).all()


@pytest.mark.parametrize("world,batch", [(3, 4), (2, 5), (4, 64)])
def test_rect_ranks_take_contiguous_whole_batches(daemon, varied, world, batch):
    root, files, sizes = varied
    d = daemon()
    order, shapes = rect_plan(sizes, batch, 256)
    seen = []
    for rank in range(world):
        with open_loader(d, root / "images" / "train", rect=True, batch_size=batch, rank=rank,
                         world_size=world) as ld:
            batches = collect(ld)
        lo, hi = contiguous_range(len(files), batch, rank, world)
        got = np.concatenate([b["indices"] for b in batches]).tolist()
        assert got == order[lo:hi].tolist(), (rank, lo, hi)
        for k, b in enumerate(batches):
            g = (lo + k * batch) // batch if batch < len(files) else 0
            assert b["images"].shape[1:3] == tuple(shapes[g].tolist())
        seen += got
    assert sorted(seen) == list(range(len(files)))          # each image once, none padded


def test_rect_resume_exact(daemon, varied):
    root, files, sizes = varied
    d = daemon()
    with open_loader(d, root / "images" / "train", rect=True, batch_size=3) as ld:
        it = iter(ld)
        for _ in range(2):
            next(it)
        state = ld.state_dict()
        rest = [(np.array(b.images), np.array(b.boxes), np.array(b.indices)) for b in it]
    d.stop()
    d2 = daemon()
    with open_loader(d2, root / "images" / "train", rect=True, batch_size=3) as ld:
        ld.load_state_dict(state)
        again = [(np.array(b.images), np.array(b.boxes), np.array(b.indices)) for b in ld]
    assert len(rest) == len(again) == math.ceil(len(files) / 3) - 2
    for a, b in zip(rest, again):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_rect_checkpoint_records_rect_stride_pad(daemon, varied):
    """A rect token names rect, stride and pad; restoring it where they differ is refused
    (another order, other shapes)."""
    root, files, sizes = varied
    d = daemon()
    with open_loader(d, root / "images" / "train", rect=True, batch_size=3, stride=16, pad=0.25) as ld:
        it = iter(ld)
        next(it)
        state = ld.state_dict()
        rest = [np.array(b.indices) for b in it]
    assert " rect=1 stride=16 pad=0.25" in state["token"]
    for kw in (dict(shuffle=False), dict(rect=True, stride=32, pad=0.25), dict(rect=True, stride=16, pad=0.5)):
        with open_loader(d, root / "images" / "train", batch_size=3, **kw) as ld:
            with pytest.raises(stoker.StokerError) as e:
                ld.load_state_dict(state)
            assert "rect" in str(e.value) and "stride" in str(e.value), str(e.value)
    # a square token is refused by a rect loader too
    with open_loader(d, root / "images" / "train", batch_size=3, shuffle=False) as ld:
        square = ld.state_dict()
    assert "rect" not in square["token"]
    with open_loader(d, root / "images" / "train", rect=True, batch_size=3, stride=16, pad=0.25) as ld:
        with pytest.raises(stoker.StokerError, match="rect"):
            ld.load_state_dict(square)
        ld.load_state_dict(state)                                   # the matching one works
        got = collect(ld)
    assert [b["indices"].tolist() for b in got] == [r.tolist() for r in rest]
    order, shapes = rect_plan(sizes, 3, 256, stride=16, pad=0.25)
    for k, b in enumerate(got):
        assert b["images"].shape[1:3] == tuple(shapes[k + 1].tolist())


def test_rect_sizes_of_every_format(daemon, varied, tmp_path):
    """Rect's aspect ratios come from every format's header (PNG, WebP lossy, lossless and
    extended, BMP, TIFF and BigTIFF: the formats Ultralytics lists), so the batches are
    set_rectangle's for a data set of mixed formats; each file's size is the decoded one."""
    root, files, sizes = varied
    out = tmp_path / "mixed"
    (out / "images" / "train").mkdir(parents=True)
    shutil.copytree(root / "labels" / "train", out / "labels" / "train")
    kinds = ["png", "webp", "webp-lossless", "webp-exif", "bmp", "tiff", "bigtiff", "jpg"]
    for k, f in enumerate(files):
        kind = kinds[k % len(kinds)]
        im = Image.open(f).convert("RGB")
        dst = out / "images" / "train" / (f.stem + "." + kind.split("-")[0])
        if kind == "webp-lossless":
            im.save(dst, "WEBP", lossless=True)
        elif kind == "webp-exif":
            ex = Image.Exif()
            ex[0x010F] = "stoker"               # an EXIF chunk without orientation: VP8X
            im.save(dst, "WEBP", exif=ex)
        elif kind == "bigtiff":
            im.save(dst.with_suffix(".tif"), "TIFF", big_tiff=True)
        else:
            im.save(dst)
    mixed = sorted((out / "images" / "train").iterdir())
    assert {p.suffix for p in mixed} == {".png", ".webp", ".bmp", ".tiff", ".tif", ".jpg"}
    msizes = [Image.open(p).size for p in mixed]
    assert msizes == sizes
    d = daemon()
    with open_loader(d, out / "images" / "train", rect=True, batch_size=3) as ld:
        assert ld.dataset_samples == len(mixed)
        got = collect(ld)
    order, shapes = rect_plan(msizes, 3, 256)
    assert [i for b in got for i in b["indices"].tolist()] == order.tolist()
    for k, b in enumerate(got):
        assert b["images"].shape[1:3] == tuple(shapes[k].tolist())
        check_metadata(b, msizes, 256, *b["images"].shape[1:3])
    assert "0 without a readable image header" in d.stderr()


def test_rect_resume_option_sets_rect_stride_pad(daemon, varied):
    """The C `resume` option (stoker_opts_set) brings back rect, stride and pad from the
    token: the rest of the epoch, in the same batches and shapes, with no rect option given."""
    import ctypes

    root, files, sizes = varied
    d = daemon()
    with open_loader(d, root / "images" / "train", rect=True, batch_size=3, stride=16, pad=0.25) as ld:
        it = iter(ld)
        next(it)
        token = ld.state_dict()["token"]
        rest = [(np.array(b.indices).tolist(), b.images.shape[1:3]) for b in it]
    lib = stoker.load_library()
    h = stoker._connect(d.socket)
    o = ctypes.c_void_p()
    assert lib.stoker_opts_new(ctypes.byref(o)) == 0
    try:
        for k, v in (("task", "detect"), ("transform", "letterbox"), ("image_size", "256"), ("resume", token)):
            assert lib.stoker_opts_set(o, k.encode(), v.encode()) == 0, k
        assert lib.stoker_attach(h, str(root / "images" / "train").encode(), o) == 0
        got = []
        b = ctypes.c_void_p()
        while lib.stoker_next(h, 60000, ctypes.byref(b)) == 0:
            n = lib.stoker_batch_count(b)
            idx = ctypes.cast(lib.stoker_batch_indices(b), ctypes.POINTER(ctypes.c_uint64))
            got.append(([idx[i] for i in range(n)],
                        (lib.stoker_batch_height(b), lib.stoker_batch_width(b))))
            lib.stoker_release(b)
    finally:
        lib.stoker_opts_free(o)
        lib.stoker_close(h)
    assert got == rest


def test_resample_modes_differ_only_in_pixels(daemon, make_yolo):
    root, _, _ = make_yolo(kind="photos", images=6, classes=5, seed=4, min_side=500, max_side=900)
    d = daemon()
    out = {}
    for mode in ("cv2", "antialias"):
        with open_loader(d, root / "images" / "train", shuffle=False, resample=mode) as ld:
            out[mode] = collect(ld)
    for a, b in zip(out["cv2"], out["antialias"]):
        for key in ("indices", "boxes", "shapes", "ratio_pad"):
            assert np.array_equal(a[key], b[key]), key
    diff = np.mean([np.abs(a["images"].astype(int) - b["images"].astype(int)).mean()
                    for a, b in zip(out["cv2"], out["antialias"])])
    assert diff > 0.1, "the two resamplers gave the same pixels"


@pytest.mark.parametrize("kw,words", [
    (dict(rect=True, transform="mosaic"), "mosaic, mixup and cutmix 0"),
    (dict(rect=True, transform="mosaic", mosaic=0.0, mixup=0.5), "mosaic, mixup and cutmix 0"),
    (dict(rect=True, drop_last=True), "drop_last"),
    (dict(rect=True, stride=0), "stride"),
    (dict(rect=True, stride=4096), "stride"),
    (dict(rect=True, pad=-1.0), "pad"),
    (dict(rect=True, pad=100.0), "pad"),
    (dict(rect=True, image_size=2048, stride=1024, pad=8.0), "ring"),  # slots sized for 10240 x 10240
    (dict(resample="lanczos"), None),          # the library refuses it before sending
    (dict(rect=True, world_size=9, rank=8, batch_size=4), "no batch"),   # 6 batches, 9 ranks
])
def test_rect_refusals(daemon, varied, kw, words):
    root, files, sizes = varied
    d = daemon()
    with pytest.raises(stoker.StokerError) as e:
        open_loader(d, root / "images" / "train", **kw)
    if words:
        assert words in str(e.value), str(e.value)
    with open_loader(d, root / "images" / "train", rect=True) as ld:     # the daemon serves on
        assert len(collect(ld)) == len(rect_plan(sizes, 4, 256)[1])


def test_rect_shuffle_only_with_one_shape(daemon, varied, tmp_path):
    """shuffle with rect, Ultralytics' trainer's rule: batches of several shapes come in
    aspect-ratio order, unshuffled (the daemon logs it); a data set whose batches all have
    one shape (every image 4:3 here) is shuffled, each batch in that shape."""
    root, files, sizes = varied
    d = daemon()
    order, shapes = rect_plan(sizes, 4, 256)
    assert len({tuple(x) for x in shapes}) > 1
    with open_loader(d, root / "images" / "train", rect=True, shuffle=True, seed=5) as ld:
        got = collect(ld)
    assert np.concatenate([b["indices"] for b in got]).tolist() == order.tolist()
    assert [b["images"].shape[1:3] for b in got] == [tuple(x) for x in shapes]
    assert "batches of several shapes" in d.stderr()

    same = tmp_path / "same"
    same.mkdir()
    for i, f in enumerate(files[:10]):
        Image.open(f).convert("RGB").resize((320 + 8 * i, 240 + 6 * i)).save(same / f"im{i}.jpg")
    (order, shapes), seen = rect_plan([(320 + 8 * i, 240 + 6 * i) for i in range(10)], 4, 256), []
    assert {tuple(x) for x in shapes} == {(224, 288)}
    for seed in (5, 6):
        with open_loader(d, same, rect=True, shuffle=True, seed=seed) as ld:
            got = collect(ld)
        assert [b["images"].shape[1:3] for b in got] == [(224, 288)] * 3
        seen.append(np.concatenate([b["indices"] for b in got]).tolist())
    assert sorted(seen[0]) == sorted(seen[1]) == list(range(10))
    assert seen[0] != seen[1] and order.tolist() not in seen  # shuffled, by the seed


def test_rect_training_shapes_and_boxes(daemon, varied):
    """transform mosaic with rect (mosaic, mixup and cutmix 0: Ultralytics' rect
    training, pad 0): the rect order and batch shapes, each image its batch's shape,
    every box inside it; without geometric draws each image is its load_image output
    centred in the shape (the padding 114 around it, on whole pixels where it is even)."""
    root, files, sizes = varied
    d = daemon()
    order, shapes = rect_plan(sizes, 4, 256, pad=0.0)
    flat = dict(mosaic=0.0, mixup=0.0, cutmix=0.0, degrees=0.0, translate=0.0, scale=0.0, shear=0.0,
                fliplr=0.0, flipud=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)
    with open_loader(d, root / "images" / "train", rect=True, shuffle=False, transform="mosaic", pad=0.0,
                     **flat) as ld:
        got = collect(ld)
    assert np.concatenate([b["indices"] for b in got]).tolist() == order.tolist()
    assert [b["images"].shape[1:3] for b in got] == [tuple(x) for x in shapes]
    whole = 0
    for b, (out_h, out_w) in zip(got, shapes):
        for i, idx in enumerate(b["indices"]):
            w1, h1 = load_size(*sizes[idx], 256)
            assert w1 <= out_w and h1 <= out_h
            if (out_w - w1) % 2 == 0 and (out_h - h1) % 2 == 0:
                left, top = (out_w - w1) // 2, (out_h - h1) // 2
                img = b["images"][i]
                assert (img[:top] == PAD).all() and (img[top + h1:] == PAD).all()
                assert (img[:, :left] == PAD).all() and (img[:, left + w1:] == PAD).all()
                assert (img[top:top + h1, left:left + w1] != PAD).any()
                whole += 1
    assert whole > 0
    with open_loader(d, root / "images" / "train", rect=True, shuffle=False, transform="mosaic", pad=0.0,
                     mosaic=0.0, mixup=0.0, cutmix=0.0, seed=3) as ld:
        for b, (out_h, out_w) in zip(collect(ld), shapes):
            assert b["images"].shape[1:3] == (out_h, out_w)
            boxes = b["boxes"]
            assert len(boxes) and (boxes[:, 2:6] >= 0).all() and (boxes[:, 2:6] <= 1).all()


def test_rect_unreadable_image_square_and_replaced(daemon, make_yolo):
    """A corrupt file: its header gives no size (taken as square), it is replaced by the next
    image, shrunk to fit the batch's shape as LetterBox would, and counted."""
    root, manifest, _ = make_yolo(kind="scenes", images=12, classes=3, seed=8, corrupt=2)
    files = images_of(root)
    corrupt = [i for i, f in enumerate(files) if f.name.startswith("corrupt")]
    assert len(files) == 14 and len(corrupt) == 2
    d = daemon()
    with open_loader(d, root / "images" / "train", rect=True, batch_size=3) as ld:
        batches = collect(ld)
        assert ld.dataset_samples == 14
    delivered = np.concatenate([b["indices"] for b in batches]).tolist()
    assert len(delivered) == 14 and not set(corrupt) & set(delivered)      # stand-ins instead
    assert sum(b["replaced"] for b in batches) == 2
    for b in batches:
        h, w = b["images"].shape[1:3]
        for i in range(len(b["indices"])):
            oh, ow, rh, rw = b["shapes"][i].tolist()
            r, uw, uh, left, top = letterbox(rw, rh, h, w)
            assert b["ratio_pad"][i].tolist() == [rh / oh * r, rw / ow * r, left, top]
