"""The Python binding against a real stokerd: order, sharding, epochs, views."""

import errno
import math

import numpy as np
import pytest

import stoker
from stoker_testutil import expected_samples, finish_client, list_samples, read_epoch, spawn_client

SMALL = dict(image_size=64, batch_size=8)


def test_two_ranks_cover_every_index_once(daemon, dataset):
    d = daemon(workers=2)
    want = expected_samples(dataset)
    procs = [spawn_client(d.socket, dataset, rank=r, world_size=2, seed=3, **SMALL) for r in range(2)]
    res = [finish_client(p) for p in procs]
    assert res[0]["pid"] != res[1]["pid"]
    for r in res:
        assert r["dataset_samples"] == len(want)
        assert r["samples_per_epoch"] == len(want) // 2
        assert len(r["indices"]) == len(want) // 2
        assert r["shape"] == [64, 64, 3]
    got = sorted(res[0]["indices"] + res[1]["indices"])
    assert got == list(range(len(want))), "ranks did not partition the epoch"
    for r in res:
        for i, lab in zip(r["indices"], r["labels"]):
            assert lab == want[i][1], f"index {i} ({want[i][0]}): label {lab}, want {want[i][1]}"


def test_shuffle_false_is_in_order(daemon, dataset):
    d = daemon()
    want = expected_samples(dataset)
    with stoker.Loader(dataset, socket=d.socket, shuffle=False, **SMALL) as ld:
        r = read_epoch(ld)
        assert ld.num_classes == 4
    assert r["indices"] == list(range(len(want)))
    assert r["labels"] == [lab for _, lab in want]


def test_list_file_layout(daemon, make_dataset):
    root, _ = make_dataset(classes=4, per_class=8, layout="list", seed=5)
    want = list_samples(root / "list.txt")
    d = daemon()
    with stoker.Loader(root / "list.txt", socket=d.socket, shuffle=False, **SMALL) as ld:
        assert ld.dataset_samples == len(want) == 32
        assert ld.num_classes == 4
        r = read_epoch(ld)
    assert r["indices"] == list(range(32))
    assert r["labels"] == [lab for _, lab in want]


def test_epochs_restart_and_reshuffle(daemon, dataset):
    n = len(expected_samples(dataset))
    d = daemon()
    ld = stoker.Loader(dataset, socket=d.socket, seed=11, **SMALL)
    assert len(ld) == math.ceil(n / 8)
    e0 = read_epoch(ld)
    assert sorted(e0["indices"]) == list(range(n))
    assert e0["batch_index"] == list(range(len(ld)))
    assert set(e0["epochs"]) == {0}
    # A second pass without set_epoch replays epoch 0 exactly.
    again = read_epoch(ld)
    assert again["indices"] == e0["indices"] and again["hashes"] == e0["hashes"]
    # Breaking off mid-epoch, then iterating again, restarts at batch 0.
    for k, b in enumerate(ld):
        if k == 2:
            break
    restarted = read_epoch(ld)
    assert restarted["batch_index"] == list(range(len(ld)))
    assert restarted["indices"] == e0["indices"]
    # set_epoch: a new order and new augmentations, same coverage.
    ld.set_epoch(1)
    assert ld.epoch == 1
    e1 = read_epoch(ld)
    assert set(e1["epochs"]) == {1}
    assert sorted(e1["indices"]) == list(range(n))
    assert e1["indices"] != e0["indices"], "epoch 1 has epoch 0's order"
    ld.close()
    ld.close()  # idempotent
    with pytest.raises(stoker.StokerError):
        len(ld)


def test_first_epoch_option(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, seed=11, epoch=1, **SMALL) as ld:
        a = read_epoch(ld)
    with stoker.Loader(dataset, socket=d.socket, seed=11, **SMALL) as ld:
        ld.set_epoch(1)
        b = read_epoch(ld)
    assert set(a["epochs"]) == {1}
    assert a["indices"] == b["indices"] and a["hashes"] == b["hashes"]


def test_random_resized_crop_views(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, seed=2, **SMALL) as ld:
        stds = []
        for b in ld:
            images, labels = b
            assert isinstance(b, stoker.Batch)
            assert images.dtype == np.uint8 and images.shape == (len(labels), 64, 64, 3)
            assert labels.dtype == np.int64 and b.indices.dtype == np.int64
            assert b.indices.shape == labels.shape
            for a in (images, labels, b.indices):
                assert not a.flags.writeable
            stds += [float(im.std()) for im in images]
    assert np.mean(stds) > 10, "images look blank"


def test_ring_mapping_is_read_only(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as ld:
        images, labels = next(iter(ld))
        with pytest.raises(ValueError):
            images[0, 0, 0, 0] = 1
        with pytest.raises(ValueError):
            labels[0] = 7
        with pytest.raises(ValueError):
            images.flags.writeable = True
        copy = images.copy()  # copies are ordinary arrays
        copy[0, 0, 0, 0] ^= 1


def test_torch_from_numpy_is_zero_copy(daemon, dataset):
    torch = pytest.importorskip("torch")
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as ld:
        images, _ = next(iter(ld))
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # non-writable tensor warning
            t = torch.from_numpy(images)
        assert t.data_ptr() == images.ctypes.data
        assert tuple(t.shape) == images.shape


def test_drop_last_and_padding(daemon, dataset):
    n = len(expected_samples(dataset))  # 64
    d = daemon()
    b = 10
    with stoker.Loader(dataset, socket=d.socket, batch_size=b, image_size=32, drop_last=True) as ld:
        r = read_epoch(ld)
        assert len(ld) == n // b
        assert r["counts"] == [b] * (n // b)
    with stoker.Loader(dataset, socket=d.socket, batch_size=b, image_size=32, drop_last=False) as ld:
        r = read_epoch(ld)
        assert len(ld) == math.ceil(n / b)
        assert r["counts"] == [b] * (n // b) + [n % b]
        assert sorted(r["indices"]) == list(range(n))
    # world_size 3 without drop_last pads like DistributedSampler.
    W = 3
    total = math.ceil(n / W) * W
    padded = list(range(n)) + list(range(total - n))
    seen = []
    for rank in range(W):
        with stoker.Loader(dataset, socket=d.socket, batch_size=b, image_size=32, shuffle=False,
                           rank=rank, world_size=W) as ld:
            assert ld.samples_per_epoch == total // W
            assert len(ld) == math.ceil(total // W / b)
            r = read_epoch(ld)
        assert r["indices"] == padded[rank::W], f"rank {rank}"
        seen += r["indices"]
    assert sorted(seen) == sorted(padded)


def test_stats_from_binding(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as ld:
        read_epoch(ld)
        s = stoker.stats(d.socket)
    assert {"images_served", "batches_served", "clients"} <= s.keys()
    assert s["images_served"] >= len(expected_samples(dataset))
    assert s["batches_served"] >= 8


def test_bad_dataset_path(daemon, tmp_path):
    d = daemon()
    missing = tmp_path / "no" / "such-dataset"
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(missing, socket=d.socket, **SMALL)
    assert ei.value.errno == errno.ENOENT
    assert str(missing) in str(ei.value)


@pytest.mark.parametrize("opts", [
    dict(image_size=0),
    dict(batch_size=0),
    dict(world_size=0),
    dict(rank=2, world_size=2),
    dict(transform="bogus"),
    dict(shuffle="maybe"),
    dict(seed=-1),
])
def test_bad_options(daemon, dataset, opts):
    d = daemon()
    kw = dict(SMALL, **opts)
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(dataset, socket=d.socket, **kw)
    assert ei.value.errno == errno.EINVAL, ei.value
    assert str(ei.value)
    # The daemon is unharmed.
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as ld:
        assert len(ld) > 0


def test_no_daemon(build_dir, tmp_path):
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(tmp_path / "d", socket=tmp_path / "none.sock")
    assert ei.value.errno in (errno.ENOENT, errno.ECONNREFUSED)
    assert "none.sock" in str(ei.value)


def test_batch_larger_than_data_set_and_world_larger(daemon, dataset):
    n = len(expected_samples(dataset))
    d = daemon()
    # drop_last with fewer samples than a batch: the daemon refuses (an
    # epoch without batches is a mistake), naming the cause.
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(dataset, socket=d.socket, batch_size=100, image_size=16, drop_last=True)
    assert ei.value.errno == errno.EINVAL and "batch_size" in str(ei.value)
    with stoker.Loader(dataset, socket=d.socket, batch_size=100, image_size=16) as ld:
        assert [len(b) for b in ld] == [n]
    W = n + 36
    padded = list(range(n)) + list(range(W - n))
    for rank in (0, W - 1):
        with stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=16, shuffle=False,
                           rank=rank, world_size=W) as ld:
            assert ld.samples_per_epoch == 1
            assert read_epoch(ld)["indices"] == [padded[rank]]


def test_iterator_continues_and_stale_iterator_stops(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, seed=1, **SMALL) as ld:
        it = iter(ld)
        first = next(it).index
        rest = [b.index for b in it]  # iter(it) continues, does not restart
        assert [first] + rest == list(range(len(ld)))
        old = iter(ld)
        next(old)
        new = iter(ld)  # a new pass restarts the epoch; the old iterator ends
        assert next(new).index == 0
        assert list(old) == []
        assert [b.index for b in new] == list(range(1, len(ld)))


def token_fields(ld):
    return dict(kv.split("=", 1) for kv in ld.state_dict()["token"].split()[1:])


@pytest.mark.parametrize("env,want", [
    ({}, ("0", "1")),
    ({"RANK": "1", "WORLD_SIZE": "2"}, ("1", "2")),                                # torchrun
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "3"}, ("2", "3")),                      # srun
    ({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "3", "SLURM_NTASKS": "4"}, ("0", "2")),  # torchrun in srun
], ids=["none", "torchrun", "slurm", "torchrun-over-slurm"])
def test_rank_and_world_size_follow_the_launcher(daemon, dataset, monkeypatch, env, want):
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    n = len(expected_samples(dataset))
    d = daemon()
    monkeypatch.setenv("STOKER_SOCKET", d.socket)  # the socket from the environment, too
    with stoker.Loader(dataset, **SMALL) as ld:
        f = token_fields(ld)
        assert (f["rank"], f["world_size"]) == want
        assert ld.samples_per_epoch == math.ceil(n / int(want[1]))
    assert stoker.launcher_rank() == (None if not env else tuple(map(int, want)))


def test_explicit_rank_wins_over_the_launcher(daemon, dataset, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, rank=0, world_size=2, **SMALL) as ld:
        assert (token_fields(ld)["rank"], token_fields(ld)["world_size"]) == ("0", "2")
    with stoker.Loader(dataset, socket=d.socket, rank=3, **SMALL) as ld:  # world_size from RANK/WORLD_SIZE
        assert (token_fields(ld)["rank"], token_fields(ld)["world_size"]) == ("3", "4")


@pytest.mark.parametrize("env,what", [
    ({"RANK": "1"}, "WORLD_SIZE is not"),
    ({"SLURM_NTASKS": "2"}, "SLURM_PROCID is not"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "not integers"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "not a rank"),
])
def test_bad_launcher_environment(monkeypatch, env, what):
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=what):
        stoker.launcher_rank()
