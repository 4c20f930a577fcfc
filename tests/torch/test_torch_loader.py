"""stoker.torch against a real stokerd: tensors, layouts, no warnings,
launcher defaults, resume."""

import math
import os
import resource
import signal
import socket as pysocket
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from stoker_testutil import PYDIR, child_env, expected_samples  # noqa: E402

SMALL = dict(image_size=64, batch_size=8)
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for k in LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)


def test_uint8_batches_are_channels_last_views_without_warnings(daemon, dataset):
    n = len(expected_samples(dataset))
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, seed=5, **SMALL) as ref:
        want = [(b.images.copy(), b.labels.copy(), b.indices.copy()) for b in ref]
    with stoker.torch.Loader(dataset, socket=d.socket, seed=5, **SMALL) as ld:
        assert len(ld) == math.ceil(n / 8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any warning, on any batch, fails
            got = []
            for batch in ld:
                images, labels = batch  # as the default collate's [images, labels]
                assert len(batch) == 2 and batch[0] is images and batch[1] is labels
                assert batch.images is images and batch.labels is labels and batch.boxes is None
                assert images.dtype == torch.uint8 and tuple(images.shape) == (len(labels), 3, 64, 64)
                assert images.is_contiguous(memory_format=torch.channels_last)
                assert labels.dtype == torch.int64 and batch.indices.dtype == torch.int64
                # zero-copy: the tensors' storage is the ring's memory
                hwc = images.permute(0, 2, 3, 1)
                assert hwc.is_contiguous()
                got.append((hwc.numpy().copy(), labels.numpy().copy(), batch.indices.numpy().copy()))
                assert batch.epoch == 0 and batch.replaced == 0
    assert len(got) == len(want)
    for (gi, gl, gx), (wi, wl, wx) in zip(got, want):
        assert np.array_equal(gi, wi) and np.array_equal(gl, wl) and np.array_equal(gx, wx)


def ring_mapping(addr):
    """The /proc/self/maps line whose range holds addr."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return line
    return None


def test_tensors_are_views_of_the_ring_and_clone_keeps_one(daemon, dataset):
    d = daemon()
    with stoker.torch.Loader(dataset, socket=d.socket, seed=2, prefetch=1, **SMALL) as ld:
        it = iter(ld)
        b0 = next(it)
        for t in (b0.images, b0.labels, b0.indices):
            line = ring_mapping(t.data_ptr())
            assert line and "stoker-ring" in line and line.split()[1].startswith("r--"), line
        kept = b0.images.clone()
        assert kept.is_contiguous(memory_format=torch.channels_last)  # clone keeps the layout
        assert ring_mapping(kept.data_ptr()) is None or "stoker-ring" not in ring_mapping(kept.data_ptr())
        again = kept.clone()
        for _ in it:  # the ring's slots are refilled while kept lives on
            pass
        assert torch.equal(kept, again), "a clone changed when the ring moved on"


def test_float_output_is_nchw(daemon, dataset):
    d = daemon()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    with stoker.Loader(dataset, socket=d.socket, seed=1, **SMALL) as ref:
        b = next(iter(ref))
        u8 = torch.from_numpy(b.images.copy()).permute(0, 3, 1, 2).float()
    with stoker.torch.Loader(dataset, socket=d.socket, seed=1, dtype="float32", mean=mean, std=std,
                             **SMALL) as ld:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            images, labels = next(iter(ld))
        assert images.dtype == torch.float32 and images.is_contiguous()
        assert tuple(images.shape) == (8, 3, 64, 64)
        want = (u8 / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
        assert torch.allclose(images, want, atol=1e-5)
    with stoker.torch.Loader(dataset, socket=d.socket, seed=1, dtype="float16", **SMALL) as ld:
        images, _ = next(iter(ld))
        assert images.dtype == torch.float16 and images.is_contiguous()


def test_detection_boxes_are_float32(daemon, make_yolo):
    root, _, _ = make_yolo(kind="photos", images=8, classes=4, min_side=128, max_side=200, seed=9)
    d = daemon()
    with stoker.torch.Loader(root, socket=d.socket, task="detect", transform="letterbox", image_size=128,
                             batch_size=4, shuffle=False) as ld:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            batch = next(iter(ld))
        images, boxes = batch
        assert images.dtype == torch.uint8 and tuple(images.shape) == (4, 3, 128, 128)
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert boxes is batch.boxes and boxes.dtype == torch.float32 and boxes.shape[1] == 6
        assert batch.labels.dtype == torch.int64 and int(batch.labels.sum()) == boxes.shape[0]
        assert boxes.shape[0] > 0
        if boxes.shape[0]:
            assert set(boxes[:, 0].long().tolist()) <= set(range(4))


def test_writing_into_a_batch_faults(daemon, dataset):
    """The documented rule: the ring is mapped read-only, a write is SIGSEGV
    (not silently corrupting another batch)."""
    d = daemon()
    code = ("import stoker.torch, sys\n"
            f"ld = stoker.torch.Loader({str(dataset)!r}, socket={d.socket!r}, image_size=64, batch_size=8)\n"
            "images, labels = next(iter(ld))\n"
            "print('taken', flush=True)\n"
            "labels[0] = 7\n"
            "print('wrote', flush=True)\n")
    r = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))  # no core file
    assert r.returncode == -signal.SIGSEGV, f"exit {r.returncode}: {r.stdout} {r.stderr}"
    assert r.stdout.split() == ["taken"]


def test_state_dict_resumes_exactly(daemon, dataset):
    d = daemon()
    with stoker.torch.Loader(dataset, socket=d.socket, seed=4, **SMALL) as ld:
        ld.set_epoch(1)
        full = [b.indices.tolist() for b in ld]
        ld.set_epoch(1)
        it = iter(ld)
        head = [next(it).indices.tolist() for _ in range(3)]
        state = ld.state_dict()
    assert head == full[:3] and state["epoch"] == 1 and state["batches_taken"] == 3
    with stoker.torch.Loader(dataset, socket=d.socket, seed=4, **SMALL) as ld:
        ld.load_state_dict(state)
        rest = [b.indices.tolist() for b in ld]
    assert rest == full[3:]


def test_rank_from_torch_distributed_over_environment(daemon, dataset, monkeypatch):
    """An initialised process group wins over RANK/WORLD_SIZE; explicit
    arguments win over both. (A one-rank gloo group on loopback.)"""
    import torch.distributed as dist
    s = pysocket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    d = daemon()
    with stoker.torch.Loader(dataset, socket=d.socket, **SMALL) as ld:
        assert "rank=1 world_size=3" in ld.state_dict()["token"]  # no group: the environment
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        assert stoker.torch.distributed_rank() == (0, 1)
        with stoker.torch.Loader(dataset, socket=d.socket, **SMALL) as ld:
            assert "rank=0 world_size=1" in ld.state_dict()["token"]
            assert ld.samples_per_epoch == len(expected_samples(dataset))
        with stoker.torch.Loader(dataset, socket=d.socket, rank=1, world_size=2, **SMALL) as ld:
            assert "rank=1 world_size=2" in ld.state_dict()["token"]
    finally:
        dist.destroy_process_group()


def test_core_package_does_not_import_torch():
    code = "import sys, stoker; assert 'torch' not in sys.modules, 'stoker imported torch'"
    env = dict(child_env(), PYTHONPATH=str(PYDIR))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(PYDIR, "stoker", "torch.py"))
