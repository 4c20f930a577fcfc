"""WebDataset tar shards against a real stokerd: shards written by
scripts/mkshards.py from real-photo trees give the very pixels, labels,
boxes and order of the loose files; shard order covers the epoch exactly
once over ranks, whatever the worker count, and resumes exactly; damaged
shards and hostile headers are refused with the shard and offset; corrupt
members are counted and replaced like corrupt files; indexes are kept in
the index directory and rebuilt when a shard changes; mkshards writes the
same bytes for the same tree, within its limits, and webdataset reads them."""

import io
import os
import re
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import stoker
from stoker_testutil import REPO, expected_samples, read_epoch

MKSHARDS = REPO / "scripts" / "mkshards.py"
SMALL = dict(image_size=64, batch_size=8)


def mkshards(layout, src, out, *extra):
    r = subprocess.run([sys.executable, str(MKSHARDS), layout, str(src), str(out), *map(str, extra)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """(ImageFolder with 4 corrupt files, its shards' pattern, the corrupt paths)."""
    base = tmp_path_factory.mktemp("shards")
    src = base / "ds"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "mkdataset.py"), str(src), "--classes", "4",
                        "--per-class", "15", "--corrupt", "4", "--seed", "9"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pattern = mkshards("imagefolder", src, base / "sh", "--maxcount", "9")
    return src, pattern, r.stdout.split()


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """(ImageFolder of 64 good files, its shards' pattern: 9 shards of 7 and 1)."""
    base = tmp_path_factory.mktemp("clean")
    src = base / "ds"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "mkdataset.py"), str(src), "--classes", "4",
                        "--per-class", "16", "--seed", "4"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return src, mkshards("imagefolder", src, base / "sh", "--maxcount", "7")


def index_dir(tmp_path):
    d = tmp_path / "idx"
    d.mkdir(exist_ok=True)
    return d


def start(daemon, tmp_path, workers=2):
    return daemon(workers=workers, extra=["-o", f"shard_index_dir={index_dir(tmp_path)}"])


def epoch(d, dataset, keep_images=False, **kw):
    opts = dict(socket=d.socket, seed=7, **SMALL)
    opts.update(kw)
    with stoker.Loader(dataset, **opts) as ld:
        return read_epoch(ld, keep_images=keep_images)


def test_same_pixels_and_order_as_loose_files(daemon, tmp_path, tree):
    src, pattern, bad = tree
    d = start(daemon, tmp_path)
    assert pattern.endswith("sh/train-{000000..000007}.tar")   # 64 samples, 9 a shard
    for opts in (dict(), dict(transform="center_crop", shuffle=False), dict(rank=1, world_size=3)):
        loose = epoch(d, src, keep_images=True, **opts)
        shards = epoch(d, pattern, keep_images=True, **opts)
        assert shards["indices"] == loose["indices"]
        assert shards["labels"] == loose["labels"]
        assert shards["replaced"] == loose["replaced"]
        for a, b in zip(loose["images"], shards["images"]):
            assert np.array_equal(a, b), "a shard sample's pixels differ from its file's"
    # The corrupt files became corrupt members: counted and replaced alike.
    want = expected_samples(src)
    bad_idx = {i for i, (p, _) in enumerate(want) if p in set(bad)}
    r = epoch(d, pattern)
    assert r["replaced"] == len(bad_idx) == 4
    assert not set(r["indices"]) & bad_idx
    assert r["labels"] == [want[i][1] for i in r["indices"]]
    log = d.stderr()
    assert "64 samples in 8 tar shards" in log
    # Bad members are logged by shard and member name.
    assert len(set(re.findall(r"train-\d{6}\.tar:class_\d\d/corrupt_\d{3}\.jpg\): cannot decode", log))) == 4


def test_directory_and_list_of_shards(daemon, tmp_path, tree):
    src, pattern, _ = tree
    d = start(daemon, tmp_path)
    shard_dir = os.path.dirname(pattern)
    lst = tmp_path / "shards.txt"
    names = sorted(n for n in os.listdir(shard_dir) if n.endswith(".tar"))
    lst.write_text("# the shards\n" + "".join(f"{shard_dir}/{n}\n" for n in names))
    want = epoch(d, pattern, shuffle=False)
    for ds in (shard_dir, lst):
        r = epoch(d, ds, shuffle=False)
        assert r["indices"] == want["indices"] and r["labels"] == want["labels"]


def shard_runs(d, dataset, world, **kw):
    out = []
    for rank in range(world):
        r = epoch(d, dataset, rank=rank, world_size=world, order="shards", shuffle_buffer=5, **kw)
        out.append(r["indices"])
    return out


def test_shard_order_exactly_once_and_deterministic(daemon, tmp_path, clean):
    src, pattern = clean
    d1 = start(daemon, tmp_path, workers=1)
    d3 = start(daemon, tmp_path, workers=3)
    for world in (1, 2, 3):
        a = shard_runs(d1, pattern, world)
        b = shard_runs(d3, pattern, world)
        assert a == b, "shard order depends on the worker count"
        flat = [i for run in a for i in run]
        # 64 samples: 3 ranks pad to 66 by repeating the sequence's start.
        assert len(flat) == -(-64 // world) * world
        assert set(flat) == set(range(64))
        assert len(flat) - len(set(flat)) == len(flat) - 64
    # Shuffled: another epoch, another order; not the sample order's.
    e0 = shard_runs(d1, pattern, 1)[0]
    e1 = shard_runs(d1, pattern, 1, epoch=1)[0]
    assert e0 != e1 and sorted(e0) == sorted(e1) == list(range(64))
    assert e0 != epoch(d1, pattern)["indices"]
    # Unshuffled: each rank a contiguous run.
    runs = shard_runs(d1, pattern, 2, shuffle=False)
    assert runs == [list(range(32)), list(range(32, 64))]
    assert shard_runs(d1, pattern, 1, shuffle=False)[0] == list(range(64))


def test_shard_order_resume(daemon, tmp_path, clean):
    src, pattern = clean
    d = start(daemon, tmp_path)
    opts = dict(socket=d.socket, seed=3, rank=1, world_size=2, order="shards", shuffle_buffer=7, **SMALL)
    with stoker.Loader(pattern, **opts) as ld:
        full = [list(map(int, b.indices)) for b in ld]
    with stoker.Loader(pattern, **opts) as ld:
        it = iter(ld)
        first = [list(map(int, next(it).indices)) for _ in range(2)]
        state = ld.state_dict()
    assert "order=shards shuffle_buffer=7" in state["token"]
    with stoker.Loader(pattern, **opts) as ld:
        ld.load_state_dict(state)
        rest = [list(map(int, b.indices)) for b in ld]
    assert first + rest == full
    # Another order or buffer refuses the checkpoint: its batches would differ.
    for other in (dict(order="samples"), dict(shuffle_buffer=1000)):
        with stoker.Loader(pattern, **dict(opts, **other)) as ld:
            with pytest.raises(stoker.StokerError, match="order"):
                ld.load_state_dict(state)


def test_shard_order_needs_shards(daemon, tmp_path, tree):
    src, _, _ = tree
    d = start(daemon, tmp_path)
    with pytest.raises(stoker.StokerError, match="shard order needs a data set of tar shards"):
        stoker.Loader(src, socket=d.socket, order="shards", **SMALL)


def test_index_directory(daemon, tmp_path, tree):
    src, pattern, _ = tree
    shard_dir = tmp_path / "copy"
    shard_dir.mkdir()
    for n in sorted(os.listdir(os.path.dirname(pattern))):
        (shard_dir / n).write_bytes(open(os.path.join(os.path.dirname(pattern), n), "rb").read())
    d = start(daemon, tmp_path)
    first = epoch(d, shard_dir, shuffle=False)
    assert "8 tar shards (8 indexed now" in d.stderr()
    assert len(os.listdir(index_dir(tmp_path))) == 8
    # A second daemon (nothing shared in memory) takes the saved indexes.
    d2 = start(daemon, tmp_path)
    assert epoch(d2, shard_dir, shuffle=False) == first
    assert "8 tar shards (0 indexed now" in d2.stderr()
    # A shard rewritten: that one is indexed again.
    last = shard_dir / "train-000007.tar"
    data = last.read_bytes()
    last.write_bytes(data)
    os.utime(last, ns=(0, 10**18))
    d3 = start(daemon, tmp_path)
    assert epoch(d3, shard_dir, shuffle=False) == first
    assert "8 tar shards (1 indexed now" in d3.stderr()
    # A read-only data directory is fine: indexes never go beside the shards.
    os.chmod(shard_dir, 0o555)
    try:
        assert epoch(d3, shard_dir, shuffle=False, seed=1)["indices"] == first["indices"]
    finally:
        os.chmod(shard_dir, 0o755)


def _tar_bytes(members):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return b.getvalue()


def test_damaged_and_hostile_shards(daemon, tmp_path, tree):
    src, pattern, _ = tree
    d = start(daemon, tmp_path)
    good = open(pattern.replace("{000000..000007}", "000000"), "rb").read()
    cases = {
        # cut inside a member's data: refused, naming the shard and the header's offset
        "cut.tar": (good[:len(good) // 2 + 100], "offset"),
        # a header whose checksum does not match
        "checksum.tar": (good[:148] + b"9" + good[149:], "offset 0: bad header checksum"),
        # a size field of garbage
        "size.tar": (good[:124] + b"zzzzzzzzzzz" + good[135:], "offset 0:"),
        # a GNU long name of 1 MiB
        "longname.tar": (_tar_bytes([("k/" + "n" * 5000 + ".jpg", b"x")]), "long name too long"),
        # not a tar at all
        "text.tar": (b"hello, world\n" * 100, "bad header checksum"),
    }
    for name, (data, why) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(stoker.StokerError) as e:
            stoker.Loader(p, socket=d.socket, **SMALL)
        assert str(p) in str(e.value) and why in str(e.value), str(e.value)
    # A sample without a label, and a missing shard of a pattern.
    p = tmp_path / "nolabel.tar"
    p.write_bytes(_tar_bytes([("a.jpg", b"x")]))
    with pytest.raises(stoker.StokerError, match="'a' has no label"):
        stoker.Loader(p, socket=d.socket, **SMALL)
    for k in (1, 2):
        (tmp_path / f"missing-{k}.tar").write_bytes(good)
    with pytest.raises(stoker.StokerError, match="missing-3.tar: No such file"):
        stoker.Loader(str(tmp_path / "missing-{1..3}.tar"), socket=d.socket, **SMALL)
    # The daemon is unharmed.
    assert len(epoch(d, pattern)["indices"]) == 64


def test_detection_shards_same_as_loose(daemon, tmp_path, make_yolo):
    root, _, _ = make_yolo(kind="photos", images=20, classes=10, min_side=200, max_side=320, seed=11,
                           no_labels_for=2)
    images = root / "images" / "train"
    pattern = mkshards("yolo", images, tmp_path / "ysh", "--maxcount", "6")
    d = start(daemon, tmp_path)
    opts = dict(socket=d.socket, batch_size=4, image_size=160, task="detect", seed=2)
    out_letterbox = None
    for transform in ("letterbox", "mosaic"):
        out = []
        for ds in (images, pattern):
            with stoker.Loader(ds, transform=transform, **opts) as ld:
                assert ld.task == "detect"
                out.append([(np.asarray(b.images).copy(), np.asarray(b.boxes).copy(),
                             list(map(int, b.indices))) for b in ld])
        assert len(out[0]) == len(out[1]) == 5
        if transform == "letterbox":
            out_letterbox = [(x[0], x[1]) for x in out[1]]
        for (ia, ba, xa), (ib, bb, xb) in zip(*out):
            assert xa == xb
            assert np.array_equal(ia, ib)
            assert np.array_equal(ba, bb)
    # A data.yaml whose split names the shards: its names name the classes.
    yaml = tmp_path / "data.yaml"
    names = "".join(f"  {i}: thing{i}\n" for i in range(10))
    yaml.write_text(f"path: {tmp_path}\ntrain: ysh/{os.path.basename(pattern)}\nnames:\n{names}")
    with stoker.Loader(yaml, transform="letterbox", **opts) as ld:
        assert ld.class_names == [f"thing{i}" for i in range(10)]
        got = [(np.asarray(b.images).copy(), np.asarray(b.boxes).copy()) for b in ld]
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(got, out_letterbox))


def test_every_listed_format_in_shards(daemon, tmp_path, clean, make_yolo):
    """The loose-file loaders list .ppm and .pgm (ImageFolder) and .mpo
    (YOLO): mkshards writes them and the shards hold them, in order."""
    from PIL import Image
    import shutil

    src = tmp_path / "ds"
    shutil.copytree(clean[0], src)
    files = [p for p, _ in expected_samples(src)]
    for k, p in enumerate(files[::9]):
        im = Image.open(p)
        im.convert("RGB" if k % 2 else "L").save(os.path.splitext(p)[0] + (".ppm" if k % 2 else ".PGM"),
                                                 "PPM")
        os.unlink(p)
    assert sum(p.lower().endswith((".ppm", ".pgm")) for p, _ in expected_samples(src)) == 8
    pattern = mkshards("imagefolder", src, tmp_path / "sh", "--maxcount", "7")
    d = start(daemon, tmp_path)
    loose = epoch(d, src, keep_images=True, transform="center_crop", shuffle=False)
    shards = epoch(d, pattern, keep_images=True, transform="center_crop", shuffle=False)
    assert len(shards["indices"]) == 64 and shards["replaced"] == loose["replaced"] == 0
    assert shards["indices"] == loose["indices"] and shards["labels"] == loose["labels"]
    assert all(np.array_equal(a, b) for a, b in zip(loose["images"], shards["images"]))
    # A YOLO tree's .mpo (a JPEG by content).
    root, _, _ = make_yolo(kind="photos", images=6, classes=3, min_side=64, max_side=96, seed=5)
    images = tmp_path / "y" / "images"
    shutil.copytree(root / "images" / "train", images)
    shutil.copytree(root / "labels" / "train", tmp_path / "y" / "labels")
    first = sorted(images.iterdir())[0]
    first.rename(first.with_suffix(".mpo"))
    ypattern = mkshards("yolo", images, tmp_path / "ysh")
    with tarfile.open(ypattern.replace("{000000..000000}", "000000")) as t:
        assert sum(n.endswith(".mpo") for n in t.getnames()) == 1
    opts = dict(socket=d.socket, batch_size=2, image_size=64, task="detect", transform="letterbox", shuffle=False)
    out = []
    for ds in (images, ypattern):
        with stoker.Loader(ds, **opts) as ld:
            out.append([(np.asarray(b.images).copy(), np.asarray(b.boxes).copy()) for b in ld])
    assert len(out[0]) == len(out[1]) == 3
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(*out))


def test_mkshards_deterministic_and_bounded(tmp_path, tree):
    src, pattern, _ = tree
    a = mkshards("imagefolder", src, tmp_path / "a", "--maxsize", 300000)
    b = mkshards("imagefolder", src, tmp_path / "b", "--maxsize", 300000)
    na, nb = sorted(os.listdir(tmp_path / "a")), sorted(os.listdir(tmp_path / "b"))
    assert na == nb and len(na) > 2
    for n in na:
        assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes()
    want = expected_samples(src)
    got = []
    for n in na:
        size = os.path.getsize(tmp_path / "a" / n)
        with tarfile.open(tmp_path / "a" / n) as t:
            members = t.getmembers()
            assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" for m in members)
            names = [m.name for m in members]
        # Over --maxsize only when one sample alone is larger.
        assert size <= 300000 + 2 * 10240 or len(names) == 2
        got += names[::2]  # each sample: the image, then its .cls
    rel = [os.path.relpath(p, src) for p, _ in want]
    assert got == [os.path.splitext(p)[0] + os.path.splitext(p)[1].lower() for p in rel]
    assert a.endswith(f"train-{{000000..{len(na) - 1:06d}}}.tar")


def test_webdataset_reads_mkshards_output(tree):
    wds = pytest.importorskip("webdataset")
    src, pattern, _ = tree
    want = expected_samples(src)
    ds = wds.WebDataset(pattern, shardshuffle=False)
    got = [(s["__key__"], int(s["cls"])) for s in ds]
    assert [lab for _, lab in got] == [lab for _, lab in want]
    assert [k for k, _ in got] == [os.path.splitext(os.path.relpath(p, src))[0] for p, _ in want]
