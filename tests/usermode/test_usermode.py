"""User mode (README "Without root", docs/slurm.md): with no system daemon,
the first Loader of a user on a node starts that user's own stokerd from
the wheel, the others attach; one daemon per user per node, its directory
0700, only its own uid served, gone after idle_exit_s."""

import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD, SAMPLES, result, wait_for

SYSTEM_SOCKET = Path("/run/stoker/stoker.sock")


def assert_exact_cover(results, world):
    seen = sorted(i for r in results for i in r["indices"])
    assert seen == list(range(SAMPLES)), f"{world} ranks covered {len(seen)} samples, {len(set(seen))} distinct"


def log_lines(u, what, d=None):
    log = (d or u.tmp_dir) / "stokerd.log"
    return [ln for ln in log.read_text().splitlines() if what in ln]


def test_the_wheel_carries_what_the_daemon_needs(venv):
    """Installed: every library stokerd and stokerctl load is the wheel's own
    copy or the C library's (glibc, libgcc_s, libstdc++), and the wheel's
    tag names the highest glibc symbol version any of its files needs."""
    site = next(venv.glob("lib/python3*/site-packages"))
    system = re.compile(r"^(libc|libm|libdl|librt|libpthread|libresolv|libgcc_s|libstdc\+\+|ld-linux-x86-64|"
                        r"linux-vdso)\.so")
    for exe in ("stokerd", "stokerctl"):
        path = site / "stoker/bin" / exe
        assert os.access(path, os.X_OK), path
        out = subprocess.run(["ldd", path], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
        for line in out.splitlines():
            name, _, where = line.strip().partition(" => ")
            assert "not found" not in line, line
            if where and not system.match(name):
                assert where.startswith(str(site / "stoker.libs")) or where.startswith(str(site / "stoker/")), line
    elves = [p for p in (site / "stoker.libs").iterdir()] + list((site / "stoker/bin").iterdir())
    need = max(tuple(int(x) for x in v.split("."))
               for p in elves
               for v in re.findall(r"GLIBC_(\d+\.\d+)", subprocess.run(["objdump", "-T", p], capture_output=True,
                                                                      text=True).stdout))
    tag = next(site.glob("stoker-*.dist-info")).joinpath("WHEEL").read_text()
    assert f"-manylinux_{need[0]}_{need[1]}_" in tag, (need, tag)


def test_an_epoch_with_no_daemon_running(alice, client, venv):
    assert not alice.daemons() and not SYSTEM_SOCKET.exists()
    out = result(alice.run(client()))
    assert out["indices"] and sorted(out["indices"]) == list(range(SAMPLES)), out
    assert out["stoker"].startswith(str(venv / "lib")), out["stoker"]
    assert out["images_served"] >= SAMPLES
    pids = alice.daemons()
    assert len(pids) == 1, pids
    # The daemon runs as the user, from the wheel, with user_mode set.
    exe = os.readlink(f"/proc/{pids[0]}/exe")
    assert exe.startswith(str(venv / "lib")) and exe.endswith("/stoker/bin/stokerd"), exe
    assert os.stat(f"/proc/{pids[0]}").st_uid == alice.uid
    # Its directory and everything in it: the user's, nothing group/world-writable.
    d = alice.tmp_dir
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == alice.uid and stat.S_IMODE(st.st_mode) == 0o700
    names = sorted(p.name for p in d.iterdir())
    assert names == ["lock", "stoker.sock", "stokerd.log"], names
    for p in d.iterdir():
        m = os.lstat(p)
        assert m.st_uid == alice.uid and not (m.st_mode & 0o022), (p, oct(m.st_mode))
    assert log_lines(alice, "user mode: serving uid %d only" % alice.uid)
    # stoker.stats() (in the client) and the wheel's stokerctl find it the same way.
    r = alice.run([venv / "bin/stokerctl", "stats", "--json"])
    assert r.returncode == 0 and '"images_served"' in r.stdout, r.stdout + r.stderr
    # So does the C stokerctl of a source build or the .deb, with nothing to
    # name it: no system socket here, so it falls back to the user's.
    if (BUILD / "stokerctl").exists():
        r = alice.run([BUILD / "stokerctl", "stats", "--json"])
        assert r.returncode == 0 and '"images_served"' in r.stdout, r.stdout + r.stderr
    # A second run attaches to the same daemon.
    out = result(alice.run(client()))
    assert sorted(out["indices"]) == list(range(SAMPLES))
    assert alice.daemons() == pids


def test_workers_follow_the_cpus_the_job_may_use(alice, client):
    """The daemon inherits the first rank's CPU affinity (as it would a
    Slurm allocation's) and sizes its pool to it."""
    out = result(alice.run(["taskset", "-c", "0"] + client()))
    assert out["workers"] == 1, out


def test_four_ranks_at_once_make_one_daemon(alice, client, shared):
    alice.set_config("idle_exit_s = 600\n")
    go = shared / "go-four"
    procs = [alice.popen(client(), RANK=r, WORLD_SIZE=4, START_AT=go) for r in range(4)]
    go.touch()
    try:
        results = [result(p) for p in procs]
    finally:
        go.unlink()
    for r in results:
        assert "error" not in r, r
        assert len(r["indices"]) == SAMPLES // 4, r
    assert_exact_cover(results, 4)
    assert len(alice.daemons()) == 1, alice.daemons()
    # One daemon was ever started: one start in its log.
    assert len(log_lines(alice, "listening on")) == 1, (alice.tmp_dir / "stokerd.log").read_text()


def test_the_daemon_leaves_after_the_idle_time(alice, client):
    alice.set_config("idle_exit_s = 2\n")
    out = result(alice.run(client()))
    assert sorted(out["indices"]) == list(range(SAMPLES))
    pids = alice.daemons()
    assert len(pids) == 1
    wait_for(lambda: not alice.daemons(), 120, "the idle daemon to exit")
    assert not (alice.tmp_dir / "stoker.sock").exists()
    assert log_lines(alice, "idle: no client for 2 s")
    # The next Loader starts a new one.
    out = result(alice.run(client()))
    assert sorted(out["indices"]) == list(range(SAMPLES)) and len(alice.daemons()) == 1


def test_another_user_cannot_attach(alice, bob, client, venv):
    result(alice.run(client()))
    sock = alice.tmp_dir / "stoker.sock"
    # The directory keeps other users out...
    out = result(bob.run(client(), STOKER_SOCKET=sock))
    assert out["errno"] == 13 and "Permission denied" in out["error"], out
    # ...and the daemon refuses any other uid that reaches it (root here).
    r = subprocess.run([venv / "bin/python", "-c", "import stoker; stoker.stats()"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "STOKER_SOCKET": str(sock)})
    assert r.returncode != 0 and "serves that user only; uid 0 may not use it" in r.stderr, r.stderr
    assert log_lines(alice, "permission denied: this user-mode daemon serves uid %d only" % alice.uid)
    # Bob's own Loader gets Bob's own daemon.
    out = result(bob.run(client()))
    assert sorted(out["indices"]) == list(range(SAMPLES))
    assert len(bob.daemons()) == 1 and len(alice.daemons()) == 1


def start_system_daemon(sock, log):
    """A daemon as root would run it: the Makefile's stokerd, a socket users may use."""
    p = subprocess.Popen([BUILD / "stokerd", "--config", os.devnull, "--socket", sock, "--workers", "2",
                          "--set", "socket_mode=0666"], stdout=log, stderr=subprocess.STDOUT)
    wait_for(lambda: Path(sock).exists() or p.poll() is not None, 60, "the system daemon to listen")
    assert p.poll() is None, "the system daemon did not start"
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0


def test_a_system_daemon_is_used_when_there_is_one(alice, client, shared, venv):
    # Named by STOKER_SOCKET.
    sock = shared / "system.sock"
    with open(shared / "system.log", "w") as log:
        p = start_system_daemon(sock, log)
    try:
        out = result(alice.run(client(), STOKER_SOCKET=sock))
        assert sorted(out["indices"]) == list(range(SAMPLES))
        assert not alice.daemons() and not alice.tmp_dir.exists()
    finally:
        stop(p)
    # At the default path (where no real one is installed).
    if SYSTEM_SOCKET.parent.exists():
        pytest.skip(f"{SYSTEM_SOCKET.parent} exists on this machine: not replacing a real system daemon")
    SYSTEM_SOCKET.parent.mkdir(mode=0o755)
    try:
        with open(shared / "system-default.log", "w") as log:
            p = start_system_daemon(SYSTEM_SOCKET, log)
        try:
            out = result(alice.run(client()))
            assert sorted(out["indices"]) == list(range(SAMPLES))
            assert not alice.daemons() and not alice.tmp_dir.exists()
            r = subprocess.run([venv / "bin/python", "-c", "import stoker; print(stoker.stats()['images_served'])"],
                               capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
            assert r.returncode == 0 and int(r.stdout) >= SAMPLES, r.stdout + r.stderr
        finally:
            stop(p)
    finally:
        SYSTEM_SOCKET.unlink(missing_ok=True)
        SYSTEM_SOCKET.parent.rmdir()


def test_two_nodes_two_ranks_each(alice, client, shared):
    """Two simulated nodes (a runtime directory each), torchrun's
    environment for 2 nodes x 2 ranks: one daemon per node, the epoch
    covered exactly once."""
    alice.set_config("idle_exit_s = 600\n")
    nodes = []
    for n in range(2):
        d = shared / f"node{n}-run"
        d.mkdir(mode=0o700)
        os.chown(d, alice.uid, alice.uid)
        nodes.append(d)
    go = shared / "go-nodes"
    procs = []
    try:
        for node, d in enumerate(nodes):
            for local in range(2):
                procs.append(alice.popen(client(), XDG_RUNTIME_DIR=d, START_AT=go, RANK=node * 2 + local,
                                         WORLD_SIZE=4, LOCAL_RANK=local, LOCAL_WORLD_SIZE=2, GROUP_RANK=node,
                                         NODE_RANK=node, MASTER_ADDR="127.0.0.1", MASTER_PORT=29500))
        go.touch()
        results = [result(p) for p in procs]
        assert_exact_cover(results, 4)
        daemons = alice.daemons()
        assert len(daemons) == 2, daemons
        for d in nodes:
            assert (d / "stoker" / "stoker.sock").exists()
            assert len(log_lines(alice, "listening on", d / "stoker")) == 1
        assert not alice.tmp_dir.exists()
    finally:
        go.unlink(missing_ok=True)
        alice.stop_daemons()
        for d in nodes:
            subprocess.run(["rm", "-rf", d])


def test_a_stale_socket_from_a_killed_daemon(alice, client):
    alice.set_config("idle_exit_s = 600\n")
    result(alice.run(client()))
    (old,) = alice.daemons()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not alice.daemons(), 60, "the daemon to die")
    assert (alice.tmp_dir / "stoker.sock").exists()  # left behind
    out = result(alice.run(client()))
    assert sorted(out["indices"]) == list(range(SAMPLES)), out
    (new,) = alice.daemons()
    assert new != old
    assert log_lines(alice, "replacing stale socket")


@pytest.mark.parametrize("case", ["mode", "owner"])
def test_a_runtime_directory_that_is_not_safe_is_refused(alice, client, case):
    d = alice.tmp_dir
    d.mkdir(mode=0o700)
    if case == "mode":
        os.chown(d, alice.uid, alice.uid)
        os.chmod(d, 0o755)
        want = "group or others may enter it (mode 0755)"
    else:  # another user's (root's) directory at the user's path
        want = f"owned by uid 0, not by you (uid {alice.uid})"
    out = result(alice.run(client()))
    assert out["errno"] == 1 and f"refusing the user-mode directory {d}: {want}" in out["error"], out
    assert not alice.daemons() and sorted(p.name for p in d.iterdir()) == []


def test_a_daemon_that_fails_to_start_names_its_log(alice, client):
    alice.set_config("workers = many\n")
    out = result(alice.run(client()))
    log = alice.tmp_dir / "stokerd.log"
    assert out["errno"] == 5, out
    assert "exited before listening" in out["error"] and f"its log {log} ends:" in out["error"], out
    assert "workers" in out["error"], out  # the log's own words: the bad line
    assert not alice.daemons()


def test_auto_start_off(alice, client):
    out = result(alice.run(client(), STOKER_AUTOSTART=0))
    assert out["errno"] == 2 and "auto-start is off" in out["error"], out
    assert not alice.daemons() and not alice.tmp_dir.exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
