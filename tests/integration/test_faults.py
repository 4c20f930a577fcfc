"""Crashes and stops, with real processes and real signals (issue 7).

Clients die by SIGKILL at random points, reconnect before the daemon has
cleaned up, stop (SIGSTOP) past their lease; the daemon itself dies by
SIGKILL; resources fail on purpose (tests/fault/inject.c). Each test says
what it promises, and records its figures in build/reports/reliability.jsonl
for docs/reliability.md.
"""

import errno
import os
import random
import signal
import subprocess
import time

import pytest

import stoker
from faultutil import (FaultClient, epoch_lines, fds, native_memory, preload_env, report, rss,
                       under_asan, wait_until)
from stoker_fixtures import Daemon
from stoker_testutil import STOKERD, read_epoch

ITERATIONS = int(os.environ.get("STOKER_FAULT_ITERATIONS", "1000"))
SEED = int(os.environ.get("STOKER_FAULT_SEED", "7"))
SMALL = dict(batch_size=4, image_size=32)


def settled(d, clients, ring_bytes=None):
    """Wait (bounded) until the daemon lists `clients` clients (and, if
    given, holds exactly ring_bytes of rings); return its stats."""
    def ok():
        st = d.stats()
        # connections: the clients, and the stokerctl asking.
        if len(st["clients"]) != clients or st["connections"] != clients + 1:
            return None
        if ring_bytes is not None and st["ring_bytes"] != ring_bytes:
            return None
        return st
    return wait_until(ok, attempts=600, step=0.05, what=f"daemon back to {clients} clients")


def quiet_fds(pid, target=None):
    """The daemon's descriptors without transients (a stats connection
    closing, a worker's file): the least of a few looks, or, given a
    target, the first look at or under it (bounded)."""
    seen = []
    for _ in range(20 if target is None else 200):
        seen.append(fds(pid))
        if target is not None and seen[-1] <= target:
            break
        time.sleep(0.025)
    return min(seen)


def reference(d, dataset, epochs, **opts):
    """The epochs a quiet daemon gives these options: {epoch: E tuple}."""
    ref = FaultClient(d.socket, dataset, mode="epochs", epochs=epochs, **opts)
    return epoch_lines(ref.finish())


def test_thousand_sigkills(daemon, dataset):
    """1. Clients SIGKILLed at random points (before attach, after it, holding
    slots, mid-read; some in a coordinated group whose survivor waits on
    their jobs): slots, descriptors and memory return to baseline, and the
    survivors read every epoch whole, byte for byte as a quiet daemon
    gives it."""
    d = daemon(workers=2, prefetch=2)
    pid = d.proc.pid
    rng = random.Random(SEED)
    solo = dict(SMALL, seed=1)
    group = dict(SMALL, seed=2, coordinated="true", prefetch=4)
    survivors = [FaultClient(d.socket, dataset, mode="epochs", **solo),
                 FaultClient(d.socket, dataset, mode="epochs", **group)]
    for s in survivors:
        s.until("S attached")
    base = settled(d, 2)
    base_rings, base_fds = base["ring_bytes"], None
    warmup = max(1, ITERATIONS // 20)
    kinds = {}
    group_epoch, group_seen = 0, []
    rss_warm = None
    for i in range(ITERATIONS):
        if i == warmup:
            rss_warm = rss(pid)
            base_fds = quiet_fds(pid)
        line = survivors[1].try_line("E ")
        while line:
            group_seen.append(line)
            group_epoch = int(line.split()[1]) + 1
            line = survivors[1].try_line("E ")
        kind = rng.choice(["time", "connected", "attached", "holding", "reading"])
        kinds[kind] = kinds.get(kind, 0) + 1
        if rng.random() < 0.3:  # in the survivor's group: it may be waiting on this one
            opts = dict(group, epoch=group_epoch)
        else:
            opts = dict(batch_size=rng.choice([2, 4, 8]), image_size=rng.choice([32, 48]),
                        prefetch=rng.choice([1, 2, 4]), seed=rng.randrange(1 << 32))
        if kind in ("holding", "reading"):
            opts["take"] = rng.randint(1, 3) if kind == "holding" else rng.randint(2, 6)
        v = FaultClient(d.socket, dataset, **opts)
        try:
            if kind == "time":
                time.sleep(rng.uniform(0, 0.02))
            elif kind == "connected":
                v.until("S connected")
            elif kind == "attached":
                v.until("S attached")
            elif kind == "holding":
                v.until("S ready")
            else:
                v.until("S batch 1")
                time.sleep(rng.uniform(0, 0.005))
        finally:
            v.kill(signal.SIGKILL)
            v.reap()
    st = settled(d, 2, base_rings)
    end_fds, end_rss = quiet_fds(pid, base_fds), rss(pid)
    # Survivors finish the epoch they are in and report every epoch.
    results = [epoch_lines(survivors[0].finish()), epoch_lines(group_seen + survivors[1].finish())]
    problems = []
    for name, res, opts in (("solo", results[0], solo), ("group", results[1], group)):
        assert len(res) >= 2, f"{name} survivor read only {len(res)} epochs during the kills"
        ref = reference(d, dataset, max(res) + 1, **opts)
        for e, got in res.items():
            if got[2] or got[3]:
                problems.append(f"{name} epoch {e}: {got[2]} lost, {got[3]} repeated")
            if got != ref[e]:
                problems.append(f"{name} epoch {e}: {got} != quiet daemon's {ref[e]}")
    report("thousand_sigkills", iterations=ITERATIONS, seed=SEED, kill_points=kinds,
           survivor_epochs=[len(r) for r in results], samples_lost=sum(r[2] for x in results for r in x.values()),
           samples_repeated=sum(r[3] for x in results for r in x.values()), ring_bytes_before=base_rings,
           ring_bytes_after=st["ring_bytes"], fds_before=base_fds, fds_after=end_fds, rss_after_warmup=rss_warm,
           rss_after=end_rss, rss_delta=end_rss - (rss_warm or end_rss), protocol_errors=st["protocol_errors"])
    assert not problems, "\n".join(problems[:20])
    assert end_fds == base_fds, f"daemon holds {end_fds} fds, {base_fds} before the kills"
    assert st["ring_bytes"] == base_rings
    # Flat: allocator noise only, nothing per killed client (a leak of one
    # ring or session per kill would be megabytes).
    if native_memory():
        assert end_rss - (rss_warm or end_rss) < (4 << 20), f"RSS grew {end_rss - rss_warm} bytes"
    settled(d, 0, 0)


def batch_lines(lines):
    """[(epoch, index, indices, hash)] of the B lines, and the last C token."""
    out, token = [], None
    for line in lines:
        if line.startswith("B "):
            _, e, i, _n, idx, h = line.split()
            out.append((int(e), int(i), idx, h))
        elif line.startswith("C "):
            token = line[2:]
    return out, token


def test_kill_and_reconnect_before_cleanup(daemon, dataset):
    """2. A rank is SIGKILLed and its replacement connects with the same rank
    while the daemon is frozen (SIGSTOP), so the daemon sees the death and
    the new attach in one loop turn, before any cleanup: the old slots are
    reclaimed exactly once (ring bytes never go below one ring, nor stay
    above), and the new session resumes with exactly the batches not taken."""
    d = daemon(workers=2, prefetch=3)
    pid = d.proc.pid
    rng = random.Random(SEED)
    opts = dict(SMALL, seed=5, rank=1, world_size=2)
    ref, _ = batch_lines(FaultClient(d.socket, dataset, mode="epochs", epochs=1, trace=1, **opts).finish())
    one_ring = None
    rounds = max(5, ITERATIONS // 50)
    for r in range(rounds):
        take = rng.randint(1, len(ref) - 1)
        old = FaultClient(d.socket, dataset, take=take, trace=1, **opts)
        old.until("S ready")
        taken, token = batch_lines(old.history)
        if one_ring is None:
            one_ring = d.stats()["ring_bytes"]
        os.kill(pid, signal.SIGSTOP)
        try:
            old.kill(signal.SIGKILL)
            old.reap()
            # Connects into the backlog; its Hello waits for the daemon.
            fresh = r % 2 == 1
            new = FaultClient(d.socket, dataset, mode="epochs", epochs=1, trace=1,
                              **(opts if fresh else dict(opts, resume=token)))
        finally:
            os.kill(pid, signal.SIGCONT)
        out = new.finish()
        got, _ = batch_lines(out)
        want = ref if fresh else ref[len(taken):]
        assert taken == ref[:len(taken)], f"round {r}: the killed rank's batches differ"
        assert got == want, f"round {r} ({'fresh' if fresh else 'resumed'} after {take}): wrong batches: {out} {token}"
        st = settled(d, 0, 0)
    report("kill_and_reconnect", rounds=rounds, ring_bytes_of_one_client=one_ring, ring_bytes_after=st["ring_bytes"],
           protocol_errors=st["protocol_errors"])


def test_checkpoint_with_the_epoch_end_announced(daemon, dataset):
    """2b. (A bug the reconnect test found.) Once the daemon has announced
    every batch and the end of the epoch, a checkpoint still counts only the
    batches taken: resuming from it yields the ones not taken, not nothing."""
    d = daemon(workers=2)
    opts = dict(batch_size=16, image_size=32, seed=8, prefetch=8)  # 4 batches, 9 slots
    with stoker.Loader(dataset, socket=d.socket, **opts) as ld:
        ref = read_epoch(ld)
    with stoker.Loader(dataset, socket=d.socket, **opts) as ld:
        it = iter(ld)
        taken = [int(i) for i in next(it).indices]
        # Everything announced (and so the end of the epoch sent) before the
        # next call reads it all.
        wait_until(lambda: any(c["pid"] == os.getpid() and c["batches"] == 4 for c in d.stats()["clients"]),
                   what="the whole epoch announced")
        taken += [int(i) for i in next(it).indices]
        state = ld.state_dict()
    assert state["batches_taken"] == 2, state
    with stoker.Loader(dataset, socket=d.socket, **opts) as ld:
        ld.load_state_dict(state)
        rest = read_epoch(ld)
    assert taken + rest["indices"] == ref["indices"]


def test_stopped_client_loses_its_lease(daemon, dataset):
    """3a. A SIGSTOPped client keeps its slots until stopped_lease_ms has
    passed, then loses them; when it wakes its next call fails with
    ECONNABORTED saying why, and the batch it held is still intact."""
    lease_ms = 1500
    d = daemon(workers=2, extra=["--set", f"stopped_lease_ms={lease_ms}"])
    c = FaultClient(d.socket, dataset, take=2, **SMALL)
    c.until("S ready")
    held = c.cmd("hash").split()[3]
    ring = settled(d, 1)["ring_bytes"]
    assert ring > 0
    t0 = time.monotonic()
    os.kill(c.pid, signal.SIGSTOP)
    seen_attached = 0
    try:
        def evicted():
            nonlocal seen_attached
            st = d.stats()
            t = time.monotonic()
            if st["clients"]:
                seen_attached += 1
                return None
            return (t, st)
        t1, st = wait_until(evicted, attempts=600, step=0.05, what="the stopped client's eviction")
        # Never early: at least the lease passed between the stop and the moment it was seen gone.
        assert t1 - t0 >= lease_ms / 1000, f"evicted {t1 - t0:.3f} s after SIGSTOP, lease {lease_ms} ms"
        assert st["ring_bytes"] == 0, "the stopped client's slots were not reclaimed"
    finally:
        os.kill(c.pid, signal.SIGCONT)
    assert c.cmd("hash").split()[3] == held, "the held batch changed after the eviction"
    r = c.cmd("next 5000")
    assert r.split()[2] == "ECONNABORTED", r
    assert "stopped_lease_ms" in r, r
    c.finish()
    assert "longer than stopped_lease_ms" in d.stderr()
    report("stopped_lease", lease_ms=lease_ms, seconds_to_eviction=round(t1 - t0, 2), checks_while_kept=seen_attached,
           ring_bytes_reclaimed=ring, error="ECONNABORTED")


def test_slow_client_is_never_evicted(daemon, dataset):
    """3b. A client that holds its batch far longer than the lease, asleep or
    starved of CPU by a full load (niced to 19 under twice as many busy
    processes as CPUs), is never declared dead: it reads its epoch whole."""
    lease_ms = 400
    d = daemon(workers=2, extra=["--set", f"stopped_lease_ms={lease_ms}"])
    c = FaultClient(d.socket, dataset, take=1, trace=1, **SMALL)
    c.until("S ready")
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        os.setpriority(os.PRIO_PROCESS, c.pid, 19)
        time.sleep(6 * lease_ms / 1000)  # holding, asleep, for six leases
        assert len(d.stats()["clients"]) == 1, "a sleeping client was evicted"
        for i in range(15):
            r = c.cmd("next 60000")
            assert r.split()[1] == "0", f"batch {i + 1}: {r}"
            if i % 5 == 0:
                time.sleep(2 * lease_ms / 1000)
        got = batch_lines(c.history)[0]
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    indices = sorted(int(x) for b in got for x in b[2].split(","))
    assert indices == list(range(64))
    assert c.cmd("next 60000").split()[2] == "ENODATA"
    c.finish()
    assert "stopped_lease_ms" not in d.stderr()
    report("slow_client_kept", lease_ms=lease_ms, held_for_leases=6, cpu_hogs=len(hogs), batches=len(got),
           evicted=0)


def test_daemon_sigkill_with_clients_attached(build_dir, dataset, tmp_path):
    """4. stokerd SIGKILLed with clients attached: each client's next call
    fails with ECONNRESET inside its 1 s timeout (never ETIMEDOUT), batches
    they hold stay readable, a new stokerd starts on the leftover socket
    path, and the clients resume exactly where they were."""
    sock = tmp_path / "k.sock"
    args = [str(STOKERD), "--socket", str(sock), "--workers", "2", "--prefetch", "3"]
    opts = dict(SMALL, seed=3, epoch=2)
    first = Daemon(sock, tmp_path / "first.err", args)
    second = None
    try:
        first.wait_ready()
        with stoker.Loader(dataset, socket=str(sock), **opts) as ld:
            ref = read_epoch(ld)
        c_ref, _ = batch_lines(FaultClient(sock, dataset, mode="epochs", epochs=1, trace=1,
                                           **dict(opts, seed=4)).finish())
        ld = stoker.Loader(dataset, socket=str(sock), timeout=1.0, **opts)
        it = iter(ld)
        indices = []
        for _ in range(3):  # copied as taken: a released batch's slot is reused
            held = next(it)
            indices += [int(i) for i in held.indices]
        held_digest = [x.tobytes() for x in (held.images, held.labels, held.indices)]
        state = ld.state_dict()
        c = FaultClient(sock, dataset, take=2, trace=1, **dict(opts, seed=4))
        c.until("S ready")
        c_taken, c_token = batch_lines(c.history)
        c_hash = c.cmd("hash").split()[3]
        first.proc.kill()
        first.proc.wait(timeout=30)
        assert sock.exists()  # left behind
        # What the clients hold is still theirs to read.
        assert [x.tobytes() for x in (held.images, held.labels, held.indices)] == held_digest
        assert c.cmd("hash").split()[3] == c_hash
        # Batches announced before the death come first; then the error,
        # inside each call's 1 s timeout.
        with pytest.raises(stoker.StokerError) as e:
            for b in it:
                indices += [int(i) for i in b.indices]
        assert e.value.errno == errno.ECONNRESET, e.value
        for _ in range(10):
            r = c.cmd("next 1000")
            if r.split()[1] != "0":
                break
        assert r.split()[2] == "ECONNRESET", r
        c.finish()
        ld.close()
        second = Daemon(sock, tmp_path / "second.err", args)
        second.wait_ready()
        assert "replacing stale socket" in second.stderr()
        with stoker.Loader(dataset, socket=str(sock), **opts) as ld2:
            ld2.load_state_dict(state)
            rest = read_epoch(ld2)
        assert indices[:3 * SMALL["batch_size"]] == ref["indices"][:3 * SMALL["batch_size"]]
        assert indices == ref["indices"][:len(indices)], "batches read after the death differ"
        assert ref["indices"][:state["batches_taken"] * 4] + rest["indices"] == ref["indices"]
        assert rest["hashes"] == ref["hashes"][state["batches_taken"] * 4:]
        resumed, _ = batch_lines(FaultClient(sock, dataset, mode="epochs", epochs=1, trace=1,
                                             **dict(opts, seed=4, resume=c_token)).finish())
        assert c_taken + resumed == c_ref
        assert second.stop() == 0
    finally:
        first.stop()
        if second:
            second.stop()
    report("daemon_sigkill", clients=2, error="ECONNRESET", timeout_ms=1000, held_batches_readable=2,
           resumed_batches=len(resumed) + len(rest["counts"]), samples_lost=0, samples_repeated=0)


def inject_daemon(daemon, tmp_path, workers=2, extra=(), **inject):
    log = tmp_path / "inject.log"
    env = preload_env(log=log, **inject)
    return daemon(workers=workers, extra=list(extra), env=env), log


def injected(log):
    return log.read_text().split("\n")[:-1] if log.exists() else []


def full_epoch(d, dataset, **opts):
    with stoker.Loader(dataset, socket=d.socket, **dict(SMALL, **opts)) as ld:
        r = read_epoch(ld)
    assert sorted(r["indices"]) == list(range(64)) and r["replaced"] == 0
    return r


def test_memfd_create_failure(daemon, dataset, tmp_path):
    """7a. memfd_create fails (ENOMEM) for one attach: that client gets a
    clear error; the attached one and the next ones are served."""
    d, log = inject_daemon(daemon, tmp_path, memfd=2)
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as first:
        it = iter(first)
        got = [int(i) for i in next(it).indices]
        with pytest.raises(stoker.StokerError) as e:
            stoker.Loader(dataset, socket=d.socket, **SMALL)
        assert e.value.errno == errno.ENOMEM and "ring" in str(e.value), e.value
        got += [int(i) for b in it for i in b.indices]
    assert sorted(got) == list(range(64))
    full_epoch(d, dataset)
    assert injected(log) == ["memfd_create 2"]
    assert "cannot create a" in d.stderr()
    st = settled(d, 0, 0)
    report("inject_memfd_create", injected=1, error="ENOMEM", ring_bytes_after=st["ring_bytes"])


def test_ring_reopen_emfile(daemon, dataset, tmp_path):
    """7b. Reopening the ring read-only fails with EMFILE: a clear error for
    that client, nothing held afterwards, the next client served."""
    d, log = inject_daemon(daemon, tmp_path, proc_fd_open=1)
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(dataset, socket=d.socket, **SMALL)
    assert e.value.errno == errno.ENOMEM and "Too many open files" in str(e.value), e.value
    assert settled(d, 0)["ring_bytes"] == 0
    full_epoch(d, dataset)
    assert injected(log) == ["proc_fd_open 1"]
    report("inject_ring_reopen_emfile", injected=1, error="ENOMEM (EMFILE in the message)")


@pytest.mark.skipif(under_asan() or bool(os.environ.get("STOKER_DAEMON_WRAPPER")),
                    reason="AddressSanitizer's or valgrind's allocator takes malloc before the shim")
def test_session_malloc_failure(daemon, dataset, tmp_path):
    """7c. The session's allocation fails (ENOMEM): a clear error, the ring
    taken for it returned, the same attach succeeding once memory is back."""
    # batch 1237, prefetch 2: the session's order table is 3 x 1237 x 8 bytes.
    opts = dict(batch_size=1237, image_size=16, prefetch=2)
    d, log = inject_daemon(daemon, tmp_path, malloc_size=3 * 1237 * 8, malloc=1)
    with pytest.raises(stoker.StokerError) as e:
        stoker.Loader(dataset, socket=d.socket, **opts)
    assert e.value.errno == errno.ENOMEM and "out of memory" in str(e.value), e.value
    assert settled(d, 0)["ring_bytes"] == 0
    with stoker.Loader(dataset, socket=d.socket, **opts) as ld:
        r = read_epoch(ld)
    assert sorted(r["indices"]) == list(range(64))
    assert injected(log) == ["malloc 1"]
    report("inject_malloc", injected=1, error="ENOMEM")


@pytest.mark.parametrize("spare", [True, False], ids=["spare-fd", "no-spare-fd"])
def test_accept_emfile(daemon, dataset, tmp_path, spare):
    """7d. accept4 fails with EMFILE. With a spare descriptor the waiting
    client is refused with a clear error at once; when even the retry fails
    the daemon pauses accepting for a tick (it does not spin on the
    listening socket) and then serves the client. The attached client and
    later connections are served; the condition is logged once."""
    # Counting starts once the first client is served (the arm file), so the
    # spec names the next connection whatever came before it (the fixture's
    # readiness probe): 1 fails, and with no-spare-fd the daemon's retry (2) too.
    arm = tmp_path / "armed"
    d, log = inject_daemon(daemon, tmp_path, accept4="1" if spare else "1,2", armed_by=arm)
    with stoker.Loader(dataset, socket=d.socket, **SMALL) as first:
        it = iter(first)
        got = [int(i) for i in next(it).indices]
        arm.touch()
        if spare:
            with pytest.raises(stoker.StokerError) as e:
                stoker.Loader(dataset, socket=d.socket, **SMALL)
            assert e.value.errno == errno.ENOMEM and "out of file descriptors" in str(e.value), e.value
        else:
            full_epoch(d, dataset)
        got += [int(i) for b in it for i in b.indices]
    assert sorted(got) == list(range(64))
    full_epoch(d, dataset)
    assert injected(log) == (["accept4 1"] if spare else ["accept4 1", "accept4 2"])
    err = d.stderr()
    assert err.count("cannot accept clients") == 1, err  # logged once, not once per loop turn
    report(f"inject_accept4_emfile_{'spare' if spare else 'nospare'}", injected=len(injected(log)),
           outcome="refused with ENOMEM, out of file descriptors" if spare else "served after a pause")


@pytest.mark.parametrize("mode", ["short", "eagain", "fail", "client"])
def test_sendmsg_faults(daemon, dataset, tmp_path, mode):
    """7e. The daemon's sendmsg writes at most 7 bytes a call, or fails with
    EAGAIN every third call: every frame (the ring fd included) still arrives
    whole and the epoch is exact. A sendmsg that fails outright (ENOBUFS)
    costs that client its connection with ECONNRESET, not the daemon. The
    library copes with the same short writes and EAGAINs (client)."""
    if mode == "client":
        d = daemon(workers=2)
        opts = dict(SMALL, seed=9)
        ref = reference(d, dataset, 2, **opts)
        c = FaultClient(d.socket, dataset, mode="epochs", epochs=2,
                        env=preload_env(sendmsg_max=3, sendmsg_eagain=2), **opts)
        assert epoch_lines(c.finish()) == ref
        report("inject_sendmsg_client", epochs=2, samples_lost=0)
        return
    inject = {"short": dict(sendmsg_max=7), "eagain": dict(sendmsg_eagain=3),
              "fail": dict(sendmsg=4)}[mode]
    d, log = inject_daemon(daemon, tmp_path, **inject)
    if mode != "fail":
        ref = None
        for _ in range(2):
            r = full_epoch(d, dataset, seed=9)
            assert ref is None or r["hashes"] == ref["hashes"]
            ref = r
        report(f"inject_sendmsg_{mode}", epochs=2, samples_lost=0)
        return
    # Connection 1: the probe (no replies). Sends: Welcome (1), Attached (2),
    # BatchReady... the fourth fails.
    c = FaultClient(d.socket, dataset, mode="epochs", epochs=1, **SMALL)
    lines = c.proc.communicate(timeout=60)[0].decode().splitlines()
    assert c.proc.returncode == 1 and any("ECONNRESET" in x for x in lines), lines
    full_epoch(d, dataset)
    assert injected(log) == ["sendmsg 4"]
    report("inject_sendmsg_fail", injected=1, error="ECONNRESET")


def test_real_fd_exhaustion(daemon, dataset, tmp_path):
    """7f. A real RLIMIT_NOFILE of 128 and a flood of 300 connections that
    attach: the daemon keeps descriptors for its workers and rings, refuses
    the excess with a clear error, and the attached trainer loses no
    sample (none replaced, none marked bad)."""
    import resource
    import socket as pysocket
    from faultutil import attach, hello, parse_frames, ERROR, error_code

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    sock = tmp_path / "f.sock"
    dm = Daemon(sock, tmp_path / "f.err", [str(STOKERD), "--socket", str(sock), "--workers", "2"],
                preexec_fn=limit)
    try:
        dm.wait_ready()
        trainer = FaultClient(sock, dataset, mode="epochs", **dict(SMALL, seed=1))
        trainer.until("S attached")
        socks, attached, refused = [], 0, 0
        for _ in range(300):
            s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
            s.connect(str(sock))
            try:
                s.sendall(hello() + attach(dataset))
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused already: its Error is waiting to be read
            socks.append(s)
        for s in socks:
            s.settimeout(30)
            data = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    break
                data += chunk
                kinds = [k for k, _ in parse_frames(data)]
                if 4 in kinds or ERROR in kinds:  # Attached or Error
                    break
            frames = parse_frames(data)
            kinds = [k for k, _ in frames]
            if 4 in kinds:
                attached += 1
            else:
                errs = [error_code(b) for k, b in frames if k == ERROR]
                assert errs == [5], f"refused without RESOURCE_EXHAUSTED: {frames}"
                refused += 1
        for s in socks:
            s.close()
        assert attached > 0 and refused > 0
        lines = trainer.finish()
        res = epoch_lines(lines)
        assert res and all(v[2] == 0 and v[3] == 0 for v in res.values()), res
        err = dm.stderr()
        assert "replaced" not in err, err
        assert "refusing clients" in err
        full_epoch(dm, dataset)
    finally:
        dm.stop()
    assert dm.returncode == 0, dm.stderr()
    report("real_fd_exhaustion", rlimit_nofile=128, connections=300, attached=attached, refused=refused,
           trainer_epochs=len(res), samples_lost=0, samples_replaced=0)
