"""The transform pipeline through a real stokerd: Attach.transforms from
the Python binding's list, run by the workers (the same pixels as the
pipeline run alone, tests/tools/tpipe, from the same Philox streams),
refused at attach with the op and parameter named, shown in the stats; the
fixed transforms keep working beside it."""

import numpy as np
import pytest

import stoker
from stoker_testutil import expected_samples, read_epoch
from tpipe_util import run

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TRAIN = [("RandomResizedCrop", {"size": 96, "scale": (0.25, 1.0), "interpolation": "bicubic"}),
         ("RandomHorizontalFlip", {"p": 0.5}),
         ("ToDtype", {"dtype": "float32", "scale": True}),
         ("Normalize", {"mean": MEAN, "std": STD}),
         ("RandomErasing", {"p": 0.5, "value": 0})]


@pytest.fixture(scope="module")
def small(make_dataset):
    root, _ = make_dataset(classes=3, per_class=4, min_side=120, max_side=300, seed=5)
    return root


def epoch_images(d, root, **kw):
    with stoker.Loader(root, socket=d.socket, batch_size=4, shuffle=False, seed=7, **kw) as ld:
        r = read_epoch(ld, keep_images=True)
    return r, np.concatenate(r["images"])


def test_pipeline_runs_in_the_workers(daemon, small):
    """Float output with erasing after Normalize: the daemon's batches are
    the pipeline's own output on each file, from stream (seed, 0, index)."""
    want = expected_samples(small)
    d = daemon(workers=2)
    r, got = epoch_images(d, small, transforms=TRAIN, dct_scaling=False)
    assert got.shape == (len(want), 3, 96, 96) and got.dtype == np.float32
    assert r["indices"] == list(range(len(want)))
    text = stoker.transforms_text(TRAIN)
    ref = run(text, [p for p, _ in want], seed=7)
    erased = 0
    for i, (draws, img) in enumerate(ref):
        assert isinstance(img, np.ndarray), img
        np.testing.assert_array_equal(got[i], img, err_msg=f"sample {i} differs from the pipeline's own run")
        erased += any(k == "erase" for _, k, _ in draws)
    assert 0 < erased < len(want), "erasing at p=0.5 never or always drew"


def test_uint8_pipeline_and_the_fixed_transform(daemon, small):
    """Resize(256) + CenterCrop(224) as a pipeline is center_crop's output (within 1)."""
    d = daemon()
    _, a = epoch_images(d, small, transforms=[("Resize", {"size": 256}), ("CenterCrop", {"size": 224})])
    _, b = epoch_images(d, small, transform="center_crop", image_size=224)
    assert a.shape == b.shape == (12, 224, 224, 3) and a.dtype == np.uint8
    assert np.abs(a.astype(int) - b.astype(int)).max() <= 1


def test_text_form_and_stats(daemon, small):
    d = daemon()
    text = "RandomResizedCrop(size=64); RandomVerticalFlip(p=0.3)"
    with stoker.Loader(small, socket=d.socket, batch_size=4, transforms=text) as ld:
        b = next(iter(ld))
        assert b.images.shape == (4, 64, 64, 3)
        st = stoker.stats(socket=d.socket)
        shown = [c.get("transforms") for c in st["clients"]]
        assert text.replace("=", "=") in shown, shown


@pytest.mark.parametrize("ops,words", [
    ([("RandomHorizontalFlip", {"p": -0.5}), ("CenterCrop", {"size": 8})], ["RandomHorizontalFlip", "p", "-0.5"]),
    ([("RandomResizedCrop", {"size": 64, "scale": (0.9, 0.2)})], ["RandomResizedCrop", "scale", "min 0.9 > max 0.2"]),
    ([("CenterCrop", {"size": 0})], ["CenterCrop", "size", "0"]),
    ([("RandomResizedCrop", {"size": 64, "interpolation": "lanczos"})], ["interpolation", "lanczos"]),
    ([("RandomResizedCrop", {"size": 64, "ratio": (0, 1)})], ["ratio"]),
    ([("Lambda", {}), ("CenterCrop", {"size": 8})], ["Lambda", "unknown transform"]),
    ([("CenterCrop", {"size": 8, "fill": 3})], ["CenterCrop", "fill", "unknown parameter"]),
    ([("Resize", {"size": 64})], ["output size depends on the image"]),
    ([("CenterCrop", {"size": 8}), ("Normalize", {"mean": MEAN, "std": STD})], ["Normalize", "ToTensor"]),
    ([("CenterCrop", {"size": 8}), ("RandomErasing", {"value": "random"})], ["RandomErasing", "value"]),
    ([("CenterCrop", {"size": 8}), ("ToTensor", {}), ("Normalize", {"mean": MEAN, "std": (1, 0, 1)})],
     ["Normalize", "std", "0"]),
    ([("CenterCrop", {"size": 8}), ("RandomErasing", {"p": 1.5})], ["RandomErasing", "p", "1.5"]),
    ([("Resize", {"size": 64, "max_size": 32}), ("CenterCrop", {"size": 8})], ["Resize", "max_size"]),
])
def test_bad_pipeline_refused_at_attach(daemon, small, ops, words):
    d = daemon()
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(small, socket=d.socket, batch_size=4, transforms=ops)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    # the daemon is still serving
    with stoker.Loader(small, socket=d.socket, batch_size=4, transforms=[("CenterCrop", {"size": 8})]) as ld:
        assert next(iter(ld)).images.shape == (4, 8, 8, 3)


def test_non_square_output(daemon, small):
    """A (h, w) output through the workers: uint8 HWC and float CHW batches
    of that shape, the pipeline's own pixels; MixUp / CutMix on them; an
    image_size that is not both sides, or a device, refused."""
    want = expected_samples(small)
    d = daemon(workers=2)
    ops = [("RandomResizedCrop", {"size": (48, 80)}), ("RandomHorizontalFlip", {"p": 0.5})]
    _, got = epoch_images(d, small, transforms=ops, dct_scaling=False)
    assert got.shape == (len(want), 48, 80, 3) and got.dtype == np.uint8
    ref = run(stoker.transforms_text(ops), [p for p, _ in want], seed=7)
    for i, (_, img) in enumerate(ref):
        np.testing.assert_array_equal(got[i], img, err_msg=f"sample {i}")
    fops = [("Resize", {"size": 100}), ("CenterCrop", {"size": (64, 40)}), ("ToTensor", {}),
            ("Normalize", {"mean": MEAN, "std": STD}), ("RandomErasing", {"p": 0.5})]
    _, got = epoch_images(d, small, transforms=fops)
    assert got.shape == (len(want), 3, 64, 40) and got.dtype == np.float32
    ref = run(stoker.transforms_text(fops), [p for p, _ in want], seed=7)
    for i, (_, img) in enumerate(ref):
        np.testing.assert_array_equal(got[i], img, err_msg=f"sample {i}")
    with stoker.Loader(small, socket=d.socket, batch_size=4, shuffle=False, seed=7, transforms=fops,
                       batch_transform=("CutMix", {"alpha": 1.0})) as ld:
        b = next(iter(ld))
        assert b.images.shape == (4, 3, 64, 40) and b.soft_labels.shape == (4, 3)
    for kw, word in [({"image_size": 64}, "image_size 64 differs"), ({"device": "cuda:0"}, "not square")]:
        with pytest.raises(stoker.StokerError) as e:
            stoker.Loader(small, socket=d.socket, batch_size=4, transforms=fops, **kw)
        assert word in str(e.value)


def test_conflicting_options_refused(daemon, small):
    d = daemon()
    for kw, word in [({"image_size": 100}, "image_size"), ({"dtype": "float16"}, "dtype")]:
        with pytest.raises(stoker.StokerError) as e:
            stoker.Loader(small, socket=d.socket, batch_size=4, transforms=TRAIN, **kw)
        assert word in str(e.value)
    with pytest.raises(TypeError):
        stoker.Loader(small, socket=d.socket, transform="center_crop", transforms=TRAIN)


def test_pixel_ops_in_the_pipeline(daemon, small):
    """pixelops' colour and policy ops between the crop and the tensor steps:
    the workers hand them the materialised crop; the same pixels as the
    pipeline alone."""
    ops = [("RandomResizedCrop", {"size": 80}), ("ColorJitter", {"brightness": 0.4, "saturation": 0.4}),
           ("RandomGrayscale", {"p": 0.3}), ("TrivialAugmentWide", {}), ("ToTensor", {}),
           ("Normalize", {"mean": MEAN, "std": STD})]
    want = expected_samples(small)
    d = daemon(workers=2)
    _, got = epoch_images(d, small, transforms=ops, dct_scaling=False)
    ref = run(stoker.transforms_text(ops), [p for p, _ in want], seed=7)
    for i, (_, img) in enumerate(ref):
        assert isinstance(img, np.ndarray), img
        np.testing.assert_array_equal(got[i], img, err_msg=f"sample {i}")


def test_intermediate_images_are_bounded(daemon, small):
    """A pipeline asking for a huge intermediate image (padding to 16000 px)
    gets its samples refused (counted as decode errors), not a worker's memory."""
    d = daemon()
    ops = [("RandomCrop", {"size": 16000, "pad_if_needed": True}), ("Resize", {"size": (8, 8)})]
    with stoker.Loader(small, socket=d.socket, batch_size=4, transforms=ops) as ld:
        for _ in ld:
            pass
    assert stoker.stats(socket=d.socket)["decode_errors"] >= 12
    with stoker.Loader(small, socket=d.socket, batch_size=4, transforms=[("CenterCrop", {"size": 8})]) as ld:
        assert next(iter(ld)).images.shape == (4, 8, 8, 3)


def test_decoded_cache_tier(daemon, small):
    """With the decoded tier on: a RandomResizedCrop-first pipeline with DCT
    scaling reads the tier's images (the same pixels cold and warm); one that
    needs PIL's pixels (dct_scaling off, or a CenterCrop first) reads the
    files, as center_crop does: equal to a daemon without the cache."""
    c = daemon(extra=["--set", "cache_bytes=64M", "--set", "cache_decoded_side=64"])
    plain = daemon()
    rrc = [("RandomResizedCrop", {"size": 48}), ("RandomHorizontalFlip", {})]
    cold, warm = (epoch_images(c, small, transforms=rrc)[1] for _ in range(2))
    np.testing.assert_array_equal(cold, warm)
    for ops, kw in [(rrc, {"dct_scaling": False}), ([("Resize", {"size": 64}), ("CenterCrop", {"size": 56})], {})]:
        for _ in range(2):
            got = epoch_images(c, small, transforms=ops, **kw)[1]
            np.testing.assert_array_equal(got, epoch_images(plain, small, transforms=ops, **kw)[1])
