"""The daemon's layering is a build fact (docs/ARCHITECTURE.md).

Each folder under daemon/ is compiled with the include paths of the parts
it may use and nothing else (the Makefile's LAYER_USES_x). These tests ask
the Makefile for each part's compiler line and show that an include across
a forbidden edge fails to build while every allowed one builds, and that
client/ cannot reach daemon/ at all.
"""
import os
import pathlib
import re
import shlex
import subprocess

import functools

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = os.environ.get("STOKER_BUILD", str(ROOT / "build"))
B = os.path.relpath(BUILD, ROOT)


@functools.lru_cache(maxsize=None)
def make_var(*args):
    out = subprocess.run(["make", "--no-print-directory", "-s", "-C", str(ROOT), "B=" + B, *args],
                         check=True, capture_output=True, text=True).stdout
    return out.strip()


def layer_table():
    text = (ROOT / "Makefile").read_text()
    layers = re.search(r"^DAEMON_LAYERS\s*:=\s*(.+)$", text, re.M).group(1).split()
    uses = {}
    for name in layers:
        uses[name] = re.search(r"^LAYER_USES_%s\s*:=\s*(.+)$" % name, text, re.M).group(1).split()
    return layers, uses


LAYERS, USES = layer_table()


def headers_of(layer):
    return sorted(p.name for p in (ROOT / "daemon" / layer).glob("*.h"))


@functools.lru_cache(maxsize=None)
def system_header(h):
    """True when the compiler finds a header of that name without any -I
    (glibc's tar.h): such a name proves nothing about the layering."""
    cmd = shlex.split(make_var("print-layer-flags", "LAYER=none"))
    r = subprocess.run(cmd + ["-fsyntax-only", "-x", "c", "-"], input='#include "%s"\n' % h,
                       cwd="/", capture_output=True, text=True)
    return r.returncode == 0


def compile_probe(layer, source, tmp_path):
    """Compile `source` as if it were a file of daemon/<layer>/."""
    cmd = shlex.split(make_var("print-layer-flags", "LAYER=" + layer))
    probe = ROOT / "daemon" / layer / (".layering_probe_%d.c" % os.getpid())
    probe.write_text(source)
    try:
        return subprocess.run(cmd + ["-fsyntax-only", str(probe)], cwd=ROOT, capture_output=True, text=True)
    finally:
        probe.unlink()


def test_every_daemon_folder_is_a_layer():
    folders = sorted(p.name for p in (ROOT / "daemon").iterdir() if p.is_dir())
    assert folders == sorted(LAYERS)
    loose = sorted(p.name for p in (ROOT / "daemon").iterdir() if p.is_file())
    assert loose == ["main.c"], "every daemon file but main.c lives in a part's folder"


def test_no_header_name_is_used_twice():
    # Flat include names (#include "x.h") stay unambiguous.
    seen = {}
    for layer in LAYERS:
        for h in headers_of(layer):
            assert h not in seen, "%s in both %s and %s" % (h, seen[h], layer)
            seen[h] = layer


@pytest.mark.parametrize("layer", LAYERS)
def test_forbidden_includes_fail_to_build(layer, tmp_path):
    forbidden = [other for other in LAYERS if other not in USES[layer]]
    for other in forbidden:
        for h in headers_of(other):
            if system_header(h):
                continue
            r = compile_probe(layer, '#include "%s"\n' % h, tmp_path)
            assert r.returncode != 0, "daemon/%s may not include %s/%s, yet it built" % (layer, other, h)
            assert "No such file" in r.stderr, r.stderr
    if "proto" not in USES[layer]:
        r = compile_probe(layer, '#include "frame.h"\n', tmp_path)
        assert r.returncode != 0 and "No such file" in r.stderr


@pytest.mark.parametrize("layer", LAYERS)
def test_allowed_includes_build(layer, tmp_path):
    for other in USES[layer]:
        if other == "proto":
            continue
        for h in headers_of(other):
            r = compile_probe(layer, '#include "%s"\n' % h, tmp_path)
            assert r.returncode == 0, "daemon/%s including %s/%s: %s" % (layer, other, h, r.stderr)


def test_a_real_file_with_a_forbidden_include_fails(tmp_path):
    # A worker-level include in the base layer: what a review would have to
    # catch by eye is a compile error.
    src = (ROOT / "daemon" / "base" / "log.c").read_text() + '\n#include "session.h"\n'
    r = compile_probe("base", src, tmp_path)
    assert r.returncode != 0 and "session.h" in r.stderr
    # And the same file as it is builds.
    r = compile_probe("base", (ROOT / "daemon" / "base" / "log.c").read_text(), tmp_path)
    assert r.returncode == 0, r.stderr


def test_client_cannot_include_the_daemon(tmp_path):
    cmd = shlex.split(make_var("print-layer-flags", "LAYER=client"))
    assert not any("daemon" in arg for arg in cmd)
    for layer in LAYERS:
        for h in headers_of(layer):
            if (ROOT / "client" / h).exists() or system_header(h):
                continue  # the client's own header of that name (client/gpu.h), or glibc's
            probe = tmp_path / "probe.c"
            probe.write_text('#include "%s"\n' % h)
            r = subprocess.run(cmd + ["-fsyntax-only", str(probe)], cwd=ROOT, capture_output=True, text=True)
            assert r.returncode != 0 and "No such file" in r.stderr, "client/ reached daemon/%s/%s" % (layer, h)


def test_private_headers_stay_in_their_folder():
    # x_priv.h holds what the files of one part share (data/dataset_priv.h
    # for the data-set files): no file of another folder includes it.
    privs = {h: layer for layer in LAYERS for h in headers_of(layer) if h.endswith("_priv.h")}
    assert "dataset_priv.h" in privs
    sources = [p for top in ("daemon", "client", "tests", "bench") for p in (ROOT / top).rglob("*.[ch]")]
    for path in sources:
        text = path.read_text(errors="replace")
        for h, layer in privs.items():
            if '#include "%s"' % h in text:
                assert path.parent == ROOT / "daemon" / layer, "%s includes %s/%s" % (path, layer, h)


def test_architecture_table_is_the_makefile():
    """docs/ARCHITECTURE.md's "may use" table says what the build enforces."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = {}
    for m in re.finditer(r"^\| `(\w+)/` \| ([^|]+) \|$", doc, re.M):
        uses = [] if m.group(2).strip() == "—" else [u.strip() for u in m.group(2).split(",")]
        table[m.group(1)] = sorted(uses)
    assert table == {layer: sorted(u for u in USES[layer] if u != layer) for layer in LAYERS}
