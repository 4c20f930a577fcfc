"""The Debian packages as an administrator meets them (make check-packaging):
lintian, `dpkg -i` into this machine, the daemon, stokerctl, pkg-config, a C
program and Python against the installed files, a conffile kept across an
upgrade, then remove and purge, after which the file system is as before."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from stoker_fixtures import Daemon
from stoker_testutil import REPO, VERSION

PACKAGES = ["stoker", "libstoker0", "libstoker-dev", "python3-stoker"]
# Where a package's files, state and configuration can land.
SCAN = ["/etc", "/usr", "/var/lib", "/opt", "/srv"]
# dpkg's and apt's own books change with every package operation.
SCAN_SKIP = ("/var/lib/dpkg", "/var/lib/apt", "/var/cache", "/var/log")
# lintian warnings left, each with its reason (an unexplained one fails).
LINTIAN_EXPLAINED = {}
# A file an administrator adds: purge must leave it.
ADMIN_FILE = Path("/etc/stoker/stoker.conf.d/10-admin.conf")
MULTIARCH = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], capture_output=True, text=True,
                           check=True).stdout.strip()
LIBDIR = Path("/usr/lib") / MULTIARCH
# What the user's programs run with: no checkout, no build tree.
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "STOKER_BUILD", "STOKER_LIB", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH",
                          "STOKER_CONFIG_ROOT", "LD_PRELOAD")}


def run(args, check=True, **kw):
    kw.setdefault("env", CLEAN_ENV)
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)
    if check:
        assert r.returncode == 0, f"{' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def dpkg(*args):
    """dpkg, waiting while another package operation holds its lock."""
    deadline = time.monotonic() + 900
    while True:
        r = run(["dpkg", *args], check=False)
        if r.returncode == 0 or "lock" not in r.stderr or time.monotonic() > deadline:
            assert r.returncode == 0, f"dpkg {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
            return r
        time.sleep(2)


def status(pkg):
    r = run(["dpkg-query", "-W", "-f=${Status}", pkg], check=False)
    words = r.stdout.split() if r.returncode == 0 else []
    return " ".join(words) if words and words[-1] != "not-installed" else "not-installed"


def snapshot():
    paths = set()
    for top in SCAN:
        for dirpath, dirnames, files in os.walk(top):
            dirnames[:] = [d for d in dirnames if not os.path.join(dirpath, d).startswith(SCAN_SKIP)]
            paths.update(os.path.join(dirpath, n) for n in dirnames + files)
    return paths


def owner(path):
    """The installed package that owns path (another one than ours), if any."""
    r = run(["dpkg-query", "-S", path], check=False)
    return r.stdout.split(":")[0] if r.returncode == 0 else None


def debs(deb_dir, *names):
    return [next(deb_dir.glob(f"{n}_{VERSION}_*.deb")) for n in names]


@pytest.fixture(scope="module")
def installed(deb_dir):
    """The four packages installed with dpkg -i; the file list from before."""
    present = [p for p in PACKAGES if status(p) != "not-installed"]
    if present:
        pytest.fail(f"{present} already on this machine: the check installs and purges its own")
    state = {"before": snapshot(), "user_before": run(["getent", "passwd", "stoker"], check=False).returncode == 0}
    dpkg("-i", *debs(deb_dir, *PACKAGES))
    yield state
    left = [p for p in PACKAGES if status(p) != "not-installed"]
    if left:  # a test failed before the purge test: leave the machine clean
        dpkg("--purge", *left)
    if ADMIN_FILE.exists():
        ADMIN_FILE.unlink()
        for d in (ADMIN_FILE.parent, ADMIN_FILE.parent.parent):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()


def test_lintian(deb_dir):
    changes = next(deb_dir.glob(f"stoker_{VERSION}_*.changes"))
    r = run(["lintian", "--fail-on", "error", "--display-info", "--pedantic", changes], check=False)
    (deb_dir / "lintian.txt").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    tags = {line.split(": ")[2].split()[0] for line in r.stdout.splitlines() if line[:2] in ("E:", "W:")}
    assert tags <= set(LINTIAN_EXPLAINED), f"lintian: {sorted(tags - set(LINTIAN_EXPLAINED))}\n{r.stdout}"


def test_build_depends_cover_the_build():
    """Every pkg-config module the Makefile builds with, and protoc-c, come
    from a package deploy/debian/control names (a new dependency added to
    the Makefile without one fails here, not on a clean builder)."""
    control = (REPO / "deploy/debian/control").read_text()
    build_deps = re.search(r"^Build-Depends:(.*?)^\S", control, re.M | re.S).group(1)
    names = {re.split(r"[\s(:]", d.strip())[0] for d in build_deps.replace("|", ",").split(",") if d.strip()}
    modules = run(["make", "--no-print-directory", "-s", "-C", REPO, "print-pkg-config-modules"]).stdout.split()
    assert "libprotobuf-c" in modules and "libuv" in modules, modules
    files = [run(["sh", "-c", f'echo "$(pkg-config --variable=pcfiledir {m})/{m}.pc"']).stdout.strip()
             for m in modules] + [run(["sh", "-c", "command -v protoc-c"]).stdout.strip()]
    for f in files:
        pkg = owner(os.path.realpath(f)) or owner(f)
        assert pkg and pkg.split(":")[0] in names, f"{f} comes from {pkg}, not in Build-Depends"


def test_package_contents(deb_dir):
    """Each package holds what it should, all made by `make install`."""
    contents = {p: run(["dpkg-deb", "-c", d]).stdout for p, d in zip(PACKAGES, debs(deb_dir, *PACKAGES))}
    for pkg, paths in {
        "stoker": ["./usr/sbin/stokerd", "./usr/bin/stokerctl", "./lib/systemd/system/stoker.service",
                   "./lib/systemd/system/stoker.socket", "./usr/lib/sysusers.d/stoker.conf",
                   "./usr/lib/stoker/stoker.conf", "./etc/stoker/stoker.conf", "./etc/stoker/stoker.conf.d/",
                   "./usr/share/man/man8/stokerd.8.gz", "./usr/share/man/man1/stokerctl.1.gz",
                   "./usr/share/man/man5/stoker.conf.5.gz"],
        "libstoker0": [f".{LIBDIR}/libstoker.so.0"],
        "libstoker-dev": ["./usr/include/stoker.h", f".{LIBDIR}/libstoker.so", f".{LIBDIR}/libstoker.a",
                          f".{LIBDIR}/pkgconfig/stoker.pc", "./usr/share/man/man3/libstoker.3.gz"],
        "python3-stoker": ["./usr/lib/python3/dist-packages/stoker/__init__.py"],
    }.items():
        listed = {line.split()[5] for line in contents[pkg].splitlines()}
        missing = [p for p in paths if p not in listed]
        assert not missing, f"{pkg} lacks {missing}"
    # Maintainer scripts: users made, the socket enabled and started, the
    # service never started or restarted by the package.
    ctl = {}
    for script in ("postinst", "prerm"):
        ctl[script] = run(["sh", "-c", f"dpkg-deb --ctrl-tarfile {debs(deb_dir, 'stoker')[0]} | tar -xOf - ./{script}"
                           ]).stdout
    assert "systemd-sysusers" in ctl["postinst"] and "stoker.conf" in ctl["postinst"]
    assert "deb-systemd-helper enable 'stoker.socket'" in ctl["postinst"]
    assert "deb-systemd-invoke start 'stoker.socket'" in ctl["postinst"]
    assert not re.search(r"deb-systemd-invoke \S+ '?stoker\.service", ctl["postinst"]), ctl["postinst"]
    # Removal stops the socket, and the service with it (Requires=stoker.socket).
    assert re.search(r'"\$1" = remove.*\n\s*deb-systemd-invoke stop .stoker\.socket', ctl["prerm"]), ctl["prerm"]
    assert "Requires=stoker.socket" in (REPO / "deploy/stoker.service").read_text()
    # Every module of the Python package ships.
    listed = contents["python3-stoker"]
    for f in (REPO / "client/python/stoker").glob("*.py"):
        assert f"/dist-packages/stoker/{f.name}" in listed, f.name


def test_installed_daemon_and_cli(installed, dataset, tmp_path):
    r = run(["/usr/sbin/stokerd", "--version"])
    assert VERSION in r.stdout + r.stderr
    assert run(["/usr/bin/stokerctl", "--version"]).stdout.strip().endswith(VERSION)
    # The installed daemon reads the installed configuration layers.
    sock = tmp_path / "s.sock"
    d = Daemon(sock, tmp_path / "stokerd.err", ["/usr/sbin/stokerd", "--socket", sock, "--workers", "2"],
               env=CLEAN_ENV)
    try:
        d.wait_ready()
        config = run(["/usr/bin/stokerctl", "--socket", sock, "config"]).stdout
        assert "/usr/lib/stoker/stoker.conf" in config and "/etc/stoker/stoker.conf" in config, config
        stats = run(["/usr/bin/stokerctl", "--socket", sock, "stats"]).stdout
        assert "images" in stats, stats
    finally:
        assert d.stop() == 0, d.stderr()


def loaded_from(ldd):
    m = re.search(r"libstoker\.so\.0 => (\S+)", ldd)
    assert m, ldd
    return Path(m.group(1)).resolve()


def attach_and_read(exe, sock, dataset, env=CLEAN_ENV):
    """Run a fault_client build over one whole epoch: no sample lost or repeated."""
    r = run([exe, sock, dataset, "mode=epochs", "epochs=1", "batch_size=8", "image_size=64"], input="", env=env)
    line = [x for x in r.stdout.splitlines() if x.startswith("E ")]
    assert line, r.stdout + r.stderr
    _, epoch, batches, samples, lost, repeated, _ = line[0].split()
    assert (int(samples), int(lost), int(repeated)) == (64, 0, 0), line[0]


def test_c_program_against_installed_library(installed, dataset, tmp_path):
    """pkg-config, the header and both libraries, with a real client and daemon."""
    flags = run(["pkg-config", "--cflags", "--libs", "stoker"]).stdout.split()
    assert "-lstoker" in flags, flags
    assert run(["pkg-config", "--modversion", "stoker"]).stdout.strip() == VERSION
    src = REPO / "tests/fault/client.c"
    shared, static = tmp_path / "client", tmp_path / "client-static"
    run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", src, "-o", shared, *flags])
    assert loaded_from(run(["ldd", shared]).stdout) == LIBDIR / "libstoker.so.0"
    sflags = run(["pkg-config", "--static", "--cflags", "--libs", "stoker"]).stdout.split()
    sflags = [str(LIBDIR / "libstoker.a") if f == "-lstoker" else f for f in sflags]
    run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", src, "-o", static, *sflags])
    assert "libstoker" not in run(["ldd", static]).stdout

    sock = tmp_path / "s.sock"
    d = Daemon(sock, tmp_path / "stokerd.err", ["/usr/sbin/stokerd", "--socket", sock, "--workers", "2"],
               env=CLEAN_ENV)
    try:
        d.wait_ready()
        attach_and_read(shared, sock, dataset)
        attach_and_read(static, sock, dataset)
        # The system's Python, no PYTHONPATH: python3-stoker with libstoker0.
        code = ("import json, stoker, sys\n"
                "ld = stoker.Loader(dataset=sys.argv[2], socket=sys.argv[1], batch_size=8, image_size=64)\n"
                "images, labels = next(iter(ld))\n"
                "lib = [l.split()[-1] for l in open('/proc/self/maps') if 'libstoker' in l]\n"
                "print(json.dumps([stoker.__file__, images.shape, len(labels), lib[0]]))\n"
                "ld.close()\n")
        out = json.loads(run(["/usr/bin/python3", "-c", code, sock, dataset], cwd=tmp_path).stdout)
        assert out[:3] == ["/usr/lib/python3/dist-packages/stoker/__init__.py", [8, 64, 64, 3], 8], out
        assert Path(out[3]).resolve() == LIBDIR / "libstoker.so.0", out
    finally:
        assert d.stop() == 0, d.stderr()


def test_units_user_and_conffile(installed, deb_dir):
    # systemd-sysusers ran; the socket is enabled, the service is not.
    assert run(["getent", "passwd", "stoker"], check=False).returncode == 0
    assert run(["getent", "group", "stoker"], check=False).returncode == 0
    wants = Path("/etc/systemd/system/sockets.target.wants/stoker.socket")
    assert wants.is_symlink() and os.readlink(wants).endswith("/systemd/system/stoker.socket")
    assert not list(Path("/etc/systemd/system").rglob("stoker.service")), "the service must not be enabled"
    assert "ExecStart=/usr/sbin/stokerd" in Path("/lib/systemd/system/stoker.service").read_text()

    # The conffile: an administrator's edit survives an upgrade.
    assert "/etc/stoker/stoker.conf " in run(["dpkg-query", "-W", "-f=${Conffiles}", "stoker"]).stdout
    conf = Path("/etc/stoker/stoker.conf")
    conf.write_text(conf.read_text() + "workers = 3\n")
    dpkg("-i", *debs(deb_dir, "stoker"))
    assert conf.read_text().endswith("workers = 3\n")
    # A file the administrator made: no package's to remove.
    ADMIN_FILE.write_text("[stokerd]\nprefetch = 4\n")


def test_remove_and_purge(installed):
    dpkg("--remove", *PACKAGES)
    for p in PACKAGES:
        assert status(p) in ("not-installed", "deinstall ok config-files"), (p, status(p))
    for gone in ("/usr/sbin/stokerd", "/usr/bin/stokerctl", f"{LIBDIR}/libstoker.so.0",
                 "/usr/lib/python3/dist-packages/stoker"):
        assert not os.path.lexists(gone), gone
    assert Path("/etc/stoker/stoker.conf").read_text().endswith("workers = 3\n"), "remove keeps conffiles"

    dpkg("--purge", *PACKAGES)
    assert all(status(p) == "not-installed" for p in PACKAGES)
    assert not os.path.exists("/etc/stoker/stoker.conf")
    assert ADMIN_FILE.read_text() == "[stokerd]\nprefetch = 4\n", "purge removed the administrator's file"
    ADMIN_FILE.unlink()
    for d in (ADMIN_FILE.parent, ADMIN_FILE.parent.parent):
        d.rmdir()  # empty now: dpkg left them only for the administrator's file

    # Nothing else is left, and nothing went missing; paths another package
    # installed meanwhile (other work on this machine) are not ours.
    after = snapshot()
    changed = sorted((after - installed["before"]) | (installed["before"] - after))
    ours = [p for p in changed if not owner(p)]
    assert not ours, f"left behind or removed by the packages: {ours}"
    # The system user stays, as Debian's packages leave theirs: files it
    # owns elsewhere must not pass to a later user given the same uid.
    assert run(["getent", "passwd", "stoker"], check=False).returncode == 0
