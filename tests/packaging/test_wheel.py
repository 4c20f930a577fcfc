"""The Python client as a trainer installs it: `python -m build` makes a
wheel and an sdist, and in a fresh virtual environment (no system site
packages, no PYTHONPATH, no library path) both `pip install` of the wheel
and `pip install ./client/python` give an `import stoker` that attaches to
a real daemon and reads batches."""

import json
import os
import subprocess
import sys
import tarfile
import zipfile

from stoker_testutil import REPO, VERSION

CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "STOKER_BUILD", "STOKER_LIB", "LD_LIBRARY_PATH", "LD_PRELOAD",
                          "VIRTUAL_ENV", "PYTHONHOME")}

READ = """
import json, stoker, sys
from importlib.metadata import version
ld = stoker.Loader(dataset=sys.argv[2], socket=sys.argv[1], batch_size=8, image_size=48, rank=0, world_size=1)
seen = []
for images, labels in ld:
    seen.append([list(images.shape), [int(x) for x in labels]])
lib = [l.split()[-1] for l in open('/proc/self/maps') if 'libstoker' in l][0]
print(json.dumps({"file": stoker.__file__, "version": version("stoker"), "lib": lib,
                  "library_version": stoker.library_version(), "batches": seen}))
ld.close()
"""


def run(args, **kw):
    kw.setdefault("env", CLEAN_ENV)
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def read_from_venv(venv, d, dataset, cwd):
    out = json.loads(run([venv / "bin/python", "-c", READ, d.socket, dataset], cwd=cwd).stdout)
    site = str(venv / "lib")
    assert out["file"].startswith(site), out["file"]
    assert out["lib"] == os.path.join(os.path.dirname(out["file"]), "libstoker.so.0"), out["lib"]
    assert out["version"] == VERSION and out["library_version"] == VERSION, out
    shapes = {tuple(s) for s, _ in out["batches"]}
    labels = [x for _, ls in out["batches"] for x in ls]
    assert shapes == {(8, 48, 48, 3)} and len(labels) == 64 and set(labels) == {0, 1, 2, 3}, out["batches"]


def test_wheel_and_sdist_in_a_fresh_venv(daemon, dataset, tmp_path):
    dist = tmp_path / "dist"
    # Not from the repository root: its build/ would shadow the `build` module.
    run([sys.executable, "-m", "build", "--outdir", dist, REPO / "client/python"], cwd=tmp_path)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [f"stoker-{VERSION}-py3-none-linux_{os.uname().machine}.whl"], wheels
    assert [s.name for s in sdists] == [f"stoker-{VERSION}.tar.gz"], sdists
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
    assert "stoker/libstoker.so.0" in names and "stoker/__init__.py" in names, names
    # The sdist builds without the repository (python -m build made the
    # wheel from it): it carries the C sources, generated code and VERSION.
    with tarfile.open(sdists[0]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for f in ("VERSION", "setup.py", "pyproject.toml", "csrc/client/libstoker.c", "csrc/client/libstoker.map",
              "csrc/client/include/stoker.h", "csrc/proto/stoker.pb-c.c", "csrc/proto/frame.c"):
        assert f in names, f"sdist lacks {f}"

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    run([venv / "bin/pip", "install", "-q", wheels[0]])
    d = daemon()
    read_from_venv(venv, d, dataset, tmp_path)
    # The library carries protobuf-c: it needs nothing past the C library.
    lib = next(venv.glob("lib/python*/site-packages/stoker/libstoker.so.0"))
    needed = run(["readelf", "-d", lib]).stdout
    assert "libprotobuf-c" not in needed, needed

    # The README's route: pip install straight from the checkout.
    run([venv / "bin/pip", "install", "-q", "--force-reinstall", "--no-deps", REPO / "client/python"])
    read_from_venv(venv, d, dataset, tmp_path)
