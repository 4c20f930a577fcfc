"""One node, many trainers: exact resume, coordinated jobs, the node cache
and its memory budget. Real daemons, real client processes, real kills."""

import json
import os
import select
import signal
import threading

import pytest

import stoker
from stoker_fixtures import Daemon
from stoker_testutil import STOKERD, finish_client, read_epoch, spawn_client

OPTS = dict(batch_size=4, image_size=48, seed=11, epoch=3)


def reference_epoch(d, dataset, **opts):
    with stoker.Loader(dataset, socket=d.socket, **opts) as loader:
        return read_epoch(loader)


def read_lines(proc, n, attempts=600, step=0.1):
    """n lines of proc's stdout, read from the fd itself (a bounded wait)."""
    fd, data = proc.stdout.fileno(), b""
    for _ in range(attempts):
        if data.count(b"\n") >= n:
            return data.decode().splitlines()[:n]
        if select.select([fd], [], [], step)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
    raise AssertionError(f"client printed {data!r} (rc={proc.poll()})")


def kill_after_checkpoints(d, dataset, batches, **opts):
    """A client process takes `batches` batches, checkpointing after each,
    and is then killed with SIGKILL. Returns what it took and its last state."""
    proc = spawn_client(d.socket, dataset, mode="checkpoint", batches=batches, **opts)
    lines = read_lines(proc, batches + 1)
    assert lines[-1].startswith("READY")
    taken = [json.loads(line) for line in lines[:-1]]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return taken


def rest_of_epoch(socket, dataset, state, **opts):
    with stoker.Loader(dataset, socket=socket, **opts) as loader:
        loader.load_state_dict(state)
        return read_epoch(loader)


@pytest.mark.parametrize("world_size", [1, 2])
def test_resume_after_client_sigkill(daemon, dataset, world_size):
    d = daemon(workers=2)
    opts = dict(OPTS, world_size=world_size, rank=world_size - 1)
    ref = reference_epoch(d, dataset, **opts)
    taken = kill_after_checkpoints(d, dataset, 5, **opts)
    rest = rest_of_epoch(d.socket, dataset, taken[-1]["state"], **opts)
    indices = sum((t["indices"] for t in taken), []) + rest["indices"]
    hashes = sum((t["hashes"] for t in taken), []) + rest["hashes"]
    # Exactly the epoch: none repeated, none skipped, same pixels.
    assert indices == ref["indices"]
    assert hashes == ref["hashes"]
    assert taken[-1]["state"]["batches_taken"] == 5


def test_resume_after_daemon_restart(build_dir, dataset, tmp_path):
    sock = tmp_path / "restart.sock"
    first = Daemon(sock, tmp_path / "first.err", [str(STOKERD), "--socket", str(sock), "--workers", "2"])
    second = None
    try:
        first.wait_ready()
        ref = reference_epoch(first, dataset, **OPTS)
        taken = kill_after_checkpoints(first, dataset, 3, **OPTS)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=30)
        assert os.path.exists(sock)  # a killed daemon leaves its socket behind
        # A different worker count: the rest must not depend on it.
        second = Daemon(sock, tmp_path / "second.err", [str(STOKERD), "--socket", str(sock), "--workers", "1"])
        second.wait_ready()
        rest = rest_of_epoch(str(sock), dataset, taken[-1]["state"], **OPTS)
        assert sum((t["indices"] for t in taken), []) + rest["indices"] == ref["indices"]
        assert sum((t["hashes"] for t in taken), []) + rest["hashes"] == ref["hashes"]
        assert second.stop() == 0
    finally:
        first.stop()
        if second:
            second.stop()


def test_resume_refuses_a_different_plan(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, **OPTS) as a:
        next(iter(a))
        state = a.state_dict()
    with stoker.Loader(dataset, socket=d.socket, **dict(OPTS, seed=12)) as b:
        with pytest.raises(stoker.StokerError) as e:
            b.load_state_dict(state)
        assert "seed" in str(e.value)


def test_resume_at_epoch_end(daemon, dataset):
    d = daemon()
    with stoker.Loader(dataset, socket=d.socket, **OPTS) as a:
        read_epoch(a)
        state, batches = a.state_dict(), len(a)
    assert state["batches_taken"] == batches
    rest = rest_of_epoch(d.socket, dataset, state, **OPTS)
    assert rest["indices"] == []


def test_coordinated_jobs_get_identical_batches_made_once(daemon, dataset):
    d = daemon(workers=2, prefetch=8)
    opts = dict(OPTS, coordinated=True)
    # Both jobs attach before either reads: the first one's ring then holds
    # batches the second can take instead of decoding them.
    loaders = [stoker.Loader(dataset, socket=d.socket, **opts) for _ in range(2)]
    results = [None, None]
    barrier = threading.Barrier(2)

    def run(i):
        barrier.wait()
        results[i] = read_epoch(loaders[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for loader in loaders:
        loader.close()
    a, b = results
    assert a["indices"] == b["indices"] and a["hashes"] == b["hashes"]
    st = d.stats()
    # Every batch either decoded once and copied to the other job, or (if one
    # job fell a whole ring behind) decoded twice; never more.
    n = len(a["indices"])
    assert st["samples_decoded"] + st["samples_copied"] == 2 * n
    assert st["samples_copied"] >= OPTS["batch_size"]
    # Not coordinated: each job decodes for itself, with its own pixels.
    c = reference_epoch(d, dataset, **dict(OPTS, seed=99))
    assert c["hashes"] != a["hashes"]


def test_independent_jobs_share_the_cache(daemon, dataset):
    d = daemon(workers=2, extra=["--set", "cache_bytes=64M"])
    reference_epoch(d, dataset, **OPTS)
    first = d.stats()["cache"]["encoded"]
    assert first["misses"] > 0 and first["entries"] > 0
    # Another job, another seed: its own order and crops, the same files.
    other = reference_epoch(d, dataset, **dict(OPTS, seed=5))
    second = d.stats()["cache"]["encoded"]
    assert second["hits"] - first["hits"] >= len(other["indices"]) - 4  # corrupt files aside
    assert second["entries"] == first["entries"]


def daemon_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_cache_budget_never_exceeded(daemon, make_dataset):
    ds = make_dataset(classes=4, per_class=24)[0]
    budget = 1 << 20  # well under the data set's size
    d = daemon(workers=2, extra=["--set", f"cache_bytes={budget}"])
    base_rss = daemon_rss(d.proc.pid)
    peak = 0
    with stoker.Loader(ds, socket=d.socket, batch_size=8, image_size=32) as loader:
        for epoch in range(3):
            loader.set_epoch(epoch)
            for _ in loader:
                st = d.stats()
                assert st["cache"]["bytes"] <= budget
                peak = max(peak, daemon_rss(d.proc.pid))
    enc = d.stats()["cache"]["encoded"]
    assert enc["rejected"] > 0 and enc["hits"] > 0
    # RSS grows by the cache and the ring, not by the data set (files are
    # ~4x the budget): allow the budget plus workers' buffers.
    assert peak - base_rss <= budget + (24 << 20)


def test_memory_budget_refuses_a_ring_that_does_not_fit(daemon, dataset):
    d = daemon(extra=["--set", "memory_budget=64M", "--set", "cache_bytes=32M"])
    with stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=64):
        pass
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(dataset, socket=d.socket, batch_size=256, image_size=224)
    assert "memory_budget" in str(e.value)


def test_lru_policy_evicts_minio_does_not(daemon, make_dataset):
    ds = make_dataset(classes=4, per_class=24)[0]
    for policy in ("minio", "lru"):
        d = daemon(workers=2, extra=["--set", "cache_bytes=1M", "--set", f"cache_policy={policy}"])
        with stoker.Loader(ds, socket=d.socket, batch_size=8, image_size=32) as loader:
            for epoch in range(2):
                loader.set_epoch(epoch)
                read_epoch(loader)
        st = d.stats()["cache"]
        assert st["policy"] == policy
        if policy == "minio":
            assert st["encoded"]["evictions"] == 0 and st["encoded"]["rejected"] > 0
        else:
            assert st["encoded"]["evictions"] > 0


def test_decoded_tier_same_pixels_hit_or_miss(daemon, dataset):
    extra = ["--set", "cache_bytes=128M", "--set", "cache_decoded_side=128"]
    d = daemon(workers=2, extra=extra)
    with stoker.Loader(dataset, socket=d.socket, **OPTS) as loader:
        cold = read_epoch(loader)             # every sample decoded and cached
        loader.set_epoch(OPTS["epoch"])
        warm = read_epoch(loader)             # every sample from the decoded tier
    st = d.stats()["cache"]["decoded"]
    assert st["misses"] >= len(cold["indices"]) and st["hits"] >= len(warm["indices"])
    assert warm["hashes"] == cold["hashes"]
    # With no cache at all, the decoded path gives the same bytes: pixels
    # never depend on what happened to be cached.
    d2 = daemon(workers=1, extra=["--set", "cache_bytes=0", "--set", "cache_decoded_side=128"])
    assert reference_epoch(d2, dataset, **OPTS)["hashes"] == cold["hashes"]
