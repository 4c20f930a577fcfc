"""Build of the stoker wheel: the Python package plus its own libstoker.

The wheel carries libstoker.so.0, compiled here from the repository's C
sources (the Makefile's list and flags: `make print-libstoker`; with CUDA's
headers where the Makefile finds them, libcuda being loaded at run time
only when a client asks for a GPU) with protobuf-c linked
in statically when its archive is present, so an installed wheel needs no
PYTHONPATH, no library path and no Debian package. An sdist carries copies
of those sources (csrc/) with the protocol code already generated, and
VERSION, so it builds without the repository or protoc-c.

`make wheel` builds the wheel that also carries the daemon: with
STOKER_WHEEL_BIN set to a build directory, its stokerd and stokerctl (the
Makefile's, from the same sources and flags) go into stoker/bin/, and
scripts/repair-wheel.py then bundles their shared libraries into
stoker.libs/ and tags the wheel manylinux_x_y for the glibc it needs. The
Python package starts that stokerd for its user where a node has no system
daemon (stoker/_userd.py).
"""

import os
import shlex
import shutil
import subprocess
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
CSRC = os.path.join(HERE, "csrc")  # in an sdist
PROTO_C = "proto/stoker.pb-c.c"  # generated from proto/stoker.proto
LIBNAME = "libstoker.so.0"
C_LIBRARY = ("c", "dl", "m", "pthread", "rt")  # never linked statically
BINARIES = ("stokerd", "stokerctl")  # with STOKER_WHEEL_BIN (make wheel)


def in_checkout():
    return not os.path.isdir(CSRC) and os.path.isfile(os.path.join(REPO, "proto", "stoker.proto"))


def read_version():
    for path in (os.path.join(HERE, "VERSION"), os.path.join(REPO, "VERSION")):
        if os.path.isfile(path):
            with open(path) as f:
                return f.read().strip()
    raise RuntimeError("VERSION not found: build from the stoker repository or its sdist")


def checkout_build():
    """libstoker's sources, libraries and flags (CUDA's, where the toolkit
    is found) as the Makefile builds them."""
    out = subprocess.run(["make", "--no-print-directory", "-s", "-C", REPO, "print-libstoker"],
                         check=True, capture_output=True, text=True).stdout
    return parse_build_list(out)


def parse_build_list(text):
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return fields["sources"].split(), shlex.split(fields["libs"]), shlex.split(fields.get("cflags", ""))


def generate_proto(outdir):
    os.makedirs(os.path.join(outdir, "proto"), exist_ok=True)
    subprocess.run(["protoc-c", "--proto_path", os.path.join(REPO, "proto"), "--c_out",
                    os.path.join(outdir, "proto"), os.path.join(REPO, "proto", "stoker.proto")], check=True)


def copy_tree_for_build(dest):
    """Lay out what libstoker needs under dest (relative paths kept):
    the sources, every header beside them, the public header, the symbol
    map and the generated protocol code."""
    sources, libs, cflags = checkout_build()
    generate_proto(dest)
    dirs = {os.path.dirname(s) for s in sources} | {"client/include"}
    for d in sorted(dirs):
        src_dir = os.path.join(REPO, d)
        if not os.path.isdir(src_dir):
            continue
        for name in os.listdir(src_dir):
            if name.endswith(".h") or os.path.join(d, name) in sources or name == "libstoker.map":
                os.makedirs(os.path.join(dest, d), exist_ok=True)
                shutil.copy2(os.path.join(src_dir, name), os.path.join(dest, d, name))
    with open(os.path.join(dest, "BUILD"), "w") as f:
        f.write("sources: %s\nlibs: %s\ncflags: %s\n" % (" ".join(sources), " ".join(libs),
                                                        " ".join(shlex.quote(c) for c in cflags)))


def read_build_list(root):
    with open(os.path.join(root, "BUILD")) as f:
        sources, libs, cflags = parse_build_list(f.read())
    # CUDA's declarations (the driver is loaded at run time): kept where
    # this machine has the headers the sdist was made with, else CPU only.
    dirs = [cflags[i + 1] for i, c in enumerate(cflags[:-1]) if c == "-isystem"]
    if not all(os.path.isfile(os.path.join(d, "cuda.h")) for d in dirs):
        cflags = []
    return sources, libs, cflags


def static_archive(cc, lib):
    """The full path of lib's static archive if the compiler finds one."""
    out = subprocess.run(cc + ["-print-file-name=lib%s.a" % lib], capture_output=True, text=True).stdout.strip()
    return out if os.path.isabs(out) and os.path.isfile(out) else None


def build_library(root, out_path, version):
    """Compile and link libstoker from the tree at root into out_path."""
    sources, libs, extra = read_build_list(root)
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[:1]
    cflags = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-fPIC", "-fvisibility=hidden", "-pthread", "-Wall",
              "-DSTOKER_VERSION=\"%s\"" % version, "-I" + os.path.join(root, "proto"),
              "-I" + os.path.join(root, "client", "include")]
    cflags += extra + shlex.split(os.environ.get("CFLAGS", ""))
    objdir = os.path.join(root, "obj")
    os.makedirs(objdir, exist_ok=True)
    objs = []
    for s in sources:
        obj = os.path.join(objdir, s.replace("/", "_")[:-2] + ".o")
        subprocess.run(cc + cflags + ["-c", os.path.join(root, s), "-o", obj], check=True)
        objs.append(obj)
    link = []
    for flag in libs:
        # The C library's parts (-ldl before glibc 2.34) stay shared.
        archive = static_archive(cc, flag[2:]) if flag.startswith("-l") and flag[2:] not in C_LIBRARY else None
        link.append(archive or flag)  # protobuf-c goes inside, when Debian's archive is there
    subprocess.run(cc + ["-shared", "-pthread", "-Wl,-soname," + LIBNAME,
                         "-Wl,--version-script=" + os.path.join(root, "client", "libstoker.map"),
                         "-Wl,--no-undefined", "-o", out_path] + objs + link + ["-lm"] +
                   shlex.split(os.environ.get("LDFLAGS", "")), check=True)


class BuildPy(build_py):
    def run(self):
        super().run()
        tree = os.path.join(os.path.abspath(self.build_lib), "..", "libstoker-src")
        tree = os.path.normpath(tree)
        shutil.rmtree(tree, ignore_errors=True)
        if in_checkout():
            copy_tree_for_build(tree)
        else:
            shutil.copytree(CSRC, tree)
        build_library(tree, os.path.join(self.build_lib, "stoker", LIBNAME), read_version())
        bindir = os.environ.get("STOKER_WHEEL_BIN")
        if bindir:
            os.makedirs(os.path.join(self.build_lib, "stoker", "bin"), exist_ok=True)
            for name in BINARIES:
                dst = os.path.join(self.build_lib, "stoker", "bin", name)
                shutil.copy2(os.path.join(bindir, name), dst)
                os.chmod(dst, 0o755)


class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        if in_checkout():
            copy_tree_for_build(os.path.join(base_dir, "csrc"))
            shutil.copy2(os.path.join(REPO, "VERSION"), os.path.join(base_dir, "VERSION"))


class BdistWheel(bdist_wheel):
    def get_tag(self):
        # libstoker is loaded through ctypes: any Python 3, this platform.
        return ("py3", "none", super().get_tag()[2])


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(version=read_version(), distclass=BinaryDistribution,
      cmdclass={"build_py": BuildPy, "sdist": Sdist, "bdist_wheel": BdistWheel})
