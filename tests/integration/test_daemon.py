"""stokerd as a service: CLI, stats, dead clients, corrupt files, hostile peers."""

import errno
import json
import os
import signal
import socket as pysocket
import struct
import subprocess
import time

import pytest

import stoker
from stoker_testutil import (CLIENT_KEYS, STATS_KEYS, STOKERD, expected_samples, read_epoch,
                             read_line, spawn_client)

SMALL = dict(image_size=64, batch_size=8)


def client_pids(d):
    return [c["pid"] for c in d.stats()["clients"]]


def test_cli_flags(build_dir):
    r = subprocess.run([str(STOKERD), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "--socket" in r.stdout + r.stderr
    r = subprocess.run([str(STOKERD), "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert stoker.library_version() in r.stdout, f"--version printed {r.stdout!r}"
    r = subprocess.run([str(STOKERD), "--no-such-flag"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert r.stderr.strip(), "unknown flag: no message"


def test_stats_json_and_text(daemon, dataset):
    d = daemon(workers=2)
    with stoker.Loader(dataset, socket=d.socket, rank=1, world_size=2, **SMALL) as ld:
        it = iter(ld)
        next(it)
        next(it)
        s = d.stats()
        assert STATS_KEYS <= s.keys(), f"missing {STATS_KEYS - s.keys()}"
        assert s["workers"] == 2
        assert 0.0 <= s["worker_busy"] <= 1.0
        assert s["images_per_second"] >= 0
        assert isinstance(s["clients"], list)
        for c in s["clients"]:
            assert CLIENT_KEYS <= c.keys(), f"client missing {CLIENT_KEYS - c.keys()}"
        mine = [c for c in s["clients"] if c["pid"] == os.getpid()]
        assert len(mine) == 1, f"pid {os.getpid()} not in {s['clients']}"
        assert mine[0]["rank"] == 1
        assert mine[0]["batches"] >= 1
        assert mine[0]["wait_seconds"] >= 0
        assert s["images_served"] >= 8 and s["batches_served"] >= 1
        text = d.ctl("stats").stdout
        assert text.strip()
        with pytest.raises(ValueError):
            json.loads(text)


def test_killed_client_does_not_stop_others(daemon, dataset):
    d = daemon(workers=2)
    survivor = stoker.Loader(dataset, socket=d.socket, seed=4, batch_size=4, image_size=64)
    it = iter(survivor)
    got = [next(it)]
    first = list(got[0].indices)
    victim = spawn_client(d.socket, dataset, mode="hold", batch_size=4, image_size=64, seed=5)
    try:
        line = read_line(victim)
        assert line.startswith("READY"), line
        vpid = int(line.split()[1])
        assert vpid in client_pids(d)
        os.kill(vpid, signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    indices = first + [int(i) for b in it for i in b.indices]
    assert sorted(indices) == list(range(len(expected_samples(dataset)))), "survivor's epoch incomplete"
    for _ in range(200):  # the daemon notices the hang-up asynchronously
        pids = client_pids(d)
        if vpid not in pids:
            break
        time.sleep(0.05)
    assert vpid not in pids, f"killed client {vpid} still listed"
    assert os.getpid() in pids
    survivor.close()


def test_corrupt_files_are_replaced(daemon, make_dataset):
    root, bad = make_dataset(classes=4, per_class=15, corrupt=4, seed=9)
    assert len(bad) == 4
    want = expected_samples(root)
    n = len(want)
    assert n == 64
    bad_idx = {i for i, (p, _) in enumerate(want) if p in set(bad)}
    assert len(bad_idx) == 4
    d = daemon(workers=2)
    with stoker.Loader(root, socket=d.socket, batch_size=8, image_size=64, seed=1) as ld:
        r = read_epoch(ld)
    assert r["counts"] == [8] * (n // 8), "batches not full-size"
    assert r["replaced"] == len(bad_idx)
    assert not (set(r["indices"]) & bad_idx), "a corrupt sample was delivered"
    for i, lab in zip(r["indices"], r["labels"]):
        assert lab == want[i][1]
    s = d.stats()
    assert s["decode_errors"] >= len(bad_idx)


def test_decode_error_files_counts_each_bad_file_once(daemon, make_dataset):
    """decode_errors counts failed attempts (a run of adjacent bad files is
    tried again for each sample it stands in for, and again every epoch);
    decode_error_files counts the files: 3 here, in the stats, the
    metrics, `stokerctl top` and the loader."""
    root, bad = make_dataset(classes=1, per_class=9, corrupt=3, seed=14)
    want = expected_samples(root)
    bad_idx = sorted(i for i, (p, _) in enumerate(want) if p in set(bad))
    assert len(bad_idx) == 3 and bad_idx == list(range(bad_idx[0], bad_idx[0] + 3)), "want a run of 3"
    d = daemon(workers=2)
    with stoker.Loader(root, socket=d.socket, batch_size=4, image_size=32, shuffle=False) as ld:
        assert ld.decode_error_files == 0
        for epoch in range(2):
            ld.set_epoch(epoch)
            r = read_epoch(ld)
            assert r["replaced"] == 3 and not set(r["indices"]) & set(bad_idx)
        assert ld.decode_error_files == 3
        s = d.stats()
        assert s["decode_error_files"] == 3
        assert s["decode_errors"] > 6, s["decode_errors"]  # attempts: the run, twice over
        assert [c["decode_error_files"] for c in s["clients"]] == [3]
        metrics = stoker.metrics(socket=d.socket)
        assert "\nstoker_decode_error_files_total 3\n" in metrics, metrics
        top = d.ctl("top", "-n", "1").stdout
        assert f"{s['decode_errors']} decode errors (3 bad files)" in top, top
        assert "(3 distinct files)" in d.ctl("stats").stdout
    # Another data set's bad files add to the daemon's count, not to its own.
    root2, bad2 = make_dataset(classes=1, per_class=4, corrupt=1, seed=15)
    with stoker.Loader(root2, socket=d.socket, batch_size=4, image_size=32, shuffle=False) as ld:
        read_epoch(ld)
        assert ld.decode_error_files == 1
    assert d.stats()["decode_error_files"] == 4


def _drain(sock):
    """Read until the daemon closes; True if it did (EOF or reset)."""
    sock.settimeout(30)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except OSError as e:
        if e.errno in (errno.ECONNRESET, errno.EPIPE):
            return True
        raise


@pytest.mark.parametrize("payload", [
    struct.pack("<I", 0xFFFFFFF0) + b"\x00" * 64,      # over-size length prefix
    struct.pack("<I", 16) + b"\xff" * 16,              # a frame that is not protobuf
    b"GET / HTTP/1.1\r\nHost: stoker\r\n\r\n",         # plain garbage
], ids=["oversize", "not-protobuf", "garbage"])
def test_hostile_peer_is_dropped(daemon, dataset, payload):
    d = daemon()
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    s.connect(d.socket)
    try:
        s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert _drain(s)
    s.close()
    # A half-sent frame, then hang up.
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    s.connect(d.socket)
    s.sendall(struct.pack("<I", 100) + b"\x0a\x02")
    s.close()
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as ld:
        r = read_epoch(ld)
    assert sorted(r["indices"]) == list(range(len(expected_samples(dataset))))
    st = d.stats()
    if "protocol_errors" in st:
        assert st["protocol_errors"] >= 1


def test_replacement_rule(daemon, make_dataset):
    """An unreadable sample is replaced by the next index, in data-set order, that decodes."""
    root, bad = make_dataset(classes=4, per_class=15, corrupt=4, seed=9)
    want = expected_samples(root)
    bad_idx = {i for i, (p, _) in enumerate(want) if p in set(bad)}
    d = daemon(workers=1)
    with stoker.Loader(root, socket=d.socket, batch_size=8, image_size=32, shuffle=False) as ld:
        r = read_epoch(ld)
    expect = []
    for pos in range(len(want)):
        j = pos
        while j in bad_idx:
            j = (j + 1) % len(want)
        expect.append(j)
    assert r["indices"] == expect
    assert r["labels"] == [want[j][1] for j in expect]
    assert r["replaced"] == len(bad_idx)


def test_all_samples_unreadable(daemon, make_dataset):
    """Nothing decodes: batches still come, black with label -1."""
    root, bad = make_dataset(classes=1, per_class=0, corrupt=6, seed=2)
    d = daemon()
    with stoker.Loader(root, socket=d.socket, batch_size=4, image_size=32) as ld:
        n = 0
        for b in ld:
            images, labels = b
            assert (labels == -1).all(), labels
            assert not images.any(), "not black"
            assert b.replaced == len(labels)
            n += len(labels)
    assert n == 6
    assert d.stats()["decode_errors"] >= 6


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_shutdown_with_client_attached(daemon, dataset, sig):
    d = daemon()
    ld = stoker.Loader(dataset, socket=d.socket, batch_size=4, image_size=32, timeout=60)
    it = iter(ld)
    next(it)
    d.proc.send_signal(sig)
    d.proc.wait(timeout=30)
    assert d.proc.returncode == 0, d.stderr()
    # Batches already announced may still be read; then the loss must show
    # as an error, never as a normal end of epoch: the daemon's Shutdown
    # message, surfaced as ESHUTDOWN with its reason.
    with pytest.raises(stoker.StokerError) as ei:
        for _ in range(len(ld) + 1):
            next(it)
    assert ei.value.errno == errno.ESHUTDOWN, ei.value
    assert "shutting down" in str(ei.value), ei.value
    ld.close()


def test_config_file(daemon, dataset, tmp_path):
    conf = tmp_path / "stoker.conf"
    conf.write_text("[stokerd]\nworkers = 1\nmax_batch_size = 16\nmax_ring_bytes = 1M\n")
    d = daemon(workers=None, config=conf)
    assert d.stats()["workers"] == 1
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Loader(dataset, socket=d.socket, batch_size=32, image_size=32)
    assert ei.value.errno == errno.EINVAL, ei.value
    with pytest.raises(stoker.StokerError) as ei:  # 5 slots x 16 x 224^2 x 3 > 1 MiB
        stoker.Loader(dataset, socket=d.socket, batch_size=16, image_size=224)
    assert ei.value.errno == errno.ENOMEM, ei.value
    with stoker.Loader(dataset, socket=d.socket, batch_size=16, image_size=32) as ld:
        assert sorted(read_epoch(ld)["indices"]) == list(range(64))


def test_bad_config_file(build_dir, tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[stokerd]\nworkers = 1\nno_such_key = 3\n")
    r = subprocess.run([str(STOKERD), "--config", str(conf), "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "3" in r.stderr or "no_such_key" in r.stderr, r.stderr  # names the line or key


HELLO = struct.pack("<I", 4) + b"\x0a\x02\x08\x01"       # Message{hello{protocol_version: 1}}
STATS_REQ = struct.pack("<I", 2) + b"\x4a\x00"            # Message{stats_request{}}


def test_hello_with_fd_is_dropped(daemon, dataset):
    d = daemon()
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    s.connect(d.socket)
    s.sendall(HELLO)  # a well-formed hello is answered
    s.settimeout(30)
    assert s.recv(4096)
    s.close()
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    s.connect(d.socket)
    with open(os.devnull) as f:
        s.sendmsg([HELLO], [(pysocket.SOL_SOCKET, pysocket.SCM_RIGHTS, struct.pack("i", f.fileno()))])
    assert _drain(s)
    s.close()
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as ld:
        assert len(read_epoch(ld)["indices"]) == 64


def test_client_that_never_reads_is_dropped(daemon, dataset):
    """Flooding stats requests without reading replies ends in a disconnect:
    the daemon must close the socket (our send fails), not linger on it."""
    d = daemon()
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    s.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_RCVBUF, 4096)
    s.connect(d.socket)
    s.settimeout(10)
    outcome = "daemon kept reading"
    try:
        s.sendall(HELLO)
        for _ in range(400):
            s.sendall(STATS_REQ * 500)
    except (BrokenPipeError, ConnectionResetError):
        outcome = "dropped"
    except TimeoutError:
        outcome = "daemon stopped reading but kept the connection open"
    finally:
        s.close()
    assert outcome == "dropped", outcome
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as ld:
        assert len(read_epoch(ld)["indices"]) == 64
