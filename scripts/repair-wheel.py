#!/usr/bin/env python3
"""Repair a stoker wheel the way auditwheel does, for the executables it
carries (`make wheel`):

  - every shared library the ELF files under stoker/ need, found by the
    dynamic loader on this machine, that is not part of the C library or
    the compiler's runtime (glibc's libraries, libgcc_s and libstdc++: the
    system's, as manylinux's policy has it) is copied into
    stoker.libs/ beside the package, with RUNPATH $ORIGIN so the copies find
    each other; stoker/bin/* get RUNPATH $ORIGIN/../../stoker.libs:$ORIGIN/..
    (libstoker.so.0 is the package's own);
  - debug sections are stripped (as dh_strip does), code is not touched;
  - the platform tag says which glibc it needs: the highest GLIBC_x.y symbol
    version any ELF file in the wheel references gives manylinux_x_y_<arch>
    (PEP 600), so pip installs it only where that glibc or a newer one is.

Usage: repair-wheel.py IN.whl OUTDIR      (prints the repaired wheel's path)
Needs patchelf, ldd, strip and objdump.
"""

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

# The C library's own parts and the compiler runtime: present on every
# glibc system, versioned by symbol, never bundled (manylinux's policy).
SYSTEM = re.compile(r"^(libc|libm|libdl|librt|libpthread|libresolv|libutil|libnsl|libanl|libmvec|"
                    r"libgcc_s|libstdc\+\+|ld-linux(-x86-64|-aarch64)?|linux-vdso|ld64)\.so")
LIBS_DIR = "stoker.libs"


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def needed_paths(path):
    """What the loader resolves for path, direct and indirect: {soname: file}."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)\s+\(", line)
        if m:
            found[m.group(1)] = m.group(2)
        elif "not found" in line:
            raise SystemExit(f"repair-wheel: {path}: {line.strip()}")
    return found


def versions_needed(path, prefix):
    """The highest PREFIX_x.y[.z] symbol version path references, as a
    tuple, or None (GLIBC_ for the C library, GLIBCXX_ for libstdc++)."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    found = [tuple(int(p) for p in v.split(".")) for v in re.findall(r"\b%s(\d+(?:\.\d+)+)" % prefix, out)]
    return max(found) if found else None


def record_row(root, rel):
    with open(os.path.join(root, rel), "rb") as f:
        data = f.read()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [rel, f"sha256={digest}", str(len(data))]


def repair(wheel, outdir):
    tmp = tempfile.mkdtemp(prefix="repair-wheel-")
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
            modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        for name, mode in modes.items():
            if mode:
                os.chmod(os.path.join(tmp, name), mode)
        pkg = os.path.join(tmp, "stoker")
        own = set(os.listdir(pkg))  # libstoker.so.0 is the package's own
        bins = sorted(os.path.join(pkg, "bin", n) for n in os.listdir(os.path.join(pkg, "bin")))
        lib_elves = sorted(os.path.join(pkg, n) for n in own if ".so" in n and is_elf(os.path.join(pkg, n)))
        # The executables look in stoker.libs, then beside the package's
        # own library; set first, so that ldd finds libstoker.so.0 there.
        for b in bins:
            subprocess.run(["strip", "--strip-debug", b], check=True)
            subprocess.run(["patchelf", "--set-rpath", f"$ORIGIN/../../{LIBS_DIR}:$ORIGIN/..", b], check=True)
        bundle = {}
        for e in bins + lib_elves:
            wants = {s: p for s, p in needed_paths(e).items() if not SYSTEM.match(s) and s not in own}
            if wants and e in lib_elves:
                subprocess.run(["patchelf", "--set-rpath", f"$ORIGIN/../{LIBS_DIR}", e], check=True)
            bundle.update((s, os.path.realpath(p)) for s, p in wants.items())
        libs = os.path.join(tmp, LIBS_DIR)
        os.makedirs(libs, exist_ok=True)
        for soname, src in sorted(bundle.items()):
            dst = os.path.join(libs, soname)
            shutil.copy2(src, dst)
            os.chmod(dst, 0o755)
            subprocess.run(["strip", "--strip-debug", dst], check=True)
            subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", dst], check=True)
        # Every ELF file now in the wheel, bundled or built: the glibc it needs.
        elves = [os.path.join(d, n) for d, _, ns in os.walk(tmp) for n in ns if is_elf(os.path.join(d, n))]
        need = max(v for v in (versions_needed(e, "GLIBC_") for e in elves) if v)[:2]
        cxx = [v for v in (versions_needed(e, "GLIBCXX_") for e in elves) if v]
        arch = os.uname().machine
        tag = f"manylinux_{need[0]}_{need[1]}_{arch}"
        # The metadata: WHEEL's tag, RECORD's hashes, the file's name.
        distinfo = next(n for n in os.listdir(tmp) if n.endswith(".dist-info"))
        wheel_meta = os.path.join(tmp, distinfo, "WHEEL")
        with open(wheel_meta) as f:
            lines = [ln for ln in f.read().splitlines() if not ln.startswith("Tag:")]
        name = os.path.basename(wheel)
        dist, version, py, abi, _ = name[:-4].split("-")
        lines.append(f"Tag: {py}-{abi}-{tag}")
        with open(wheel_meta, "w") as f:
            f.write("\n".join(lines) + "\n")
        files = sorted(os.path.relpath(os.path.join(d, n), tmp) for d, _, ns in os.walk(tmp) for n in ns)
        record = os.path.join(distinfo, "RECORD")
        rows = [record_row(tmp, f) for f in files if f != record] + [[record, "", ""]]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        with open(os.path.join(tmp, record), "w") as f:
            f.write(buf.getvalue())
        os.makedirs(outdir, exist_ok=True)
        out = os.path.join(outdir, f"{dist}-{version}-{py}-{abi}-{tag}.whl")
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            # dist-info last, as wheel tools write it.
            for f in sorted(files, key=lambda f: (f.startswith(distinfo), f)):
                info = zipfile.ZipInfo(f, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (os.stat(os.path.join(tmp, f)).st_mode & 0o777 | 0o100000) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(os.path.join(tmp, f), "rb") as src:
                    z.writestr(info, src.read())
        return out, tag, sorted(bundle), max(cxx) if cxx else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    out, tag, bundled, cxx = repair(sys.argv[1], sys.argv[2])
    print(f"repair-wheel: {len(bundled)} libraries bundled into {LIBS_DIR}/; needs glibc "
          f"{tag.split('_')[1]}.{tag.split('_')[2]} ({tag})"
          + (f" and the system's libstdc++ with GLIBCXX_{'.'.join(map(str, cxx))}" if cxx else ""), file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
