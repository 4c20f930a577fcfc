#!/bin/sh
# Build Debian's own libjpeg-turbo source (the version installed) with symbols
# into bench/out/jpeg-symbols/lib, so the callgrind profile in `make bench`
# can name libjpeg's internal functions (IDCT, Huffman decode, colour
# conversion); Debian's libjpeg.so.62 is stripped and its -dbgsym package
# lives in a separate archive. Used only for the profile, through
# LD_LIBRARY_PATH; nothing is installed. Needs deb.debian.org, cmake, nasm.
#
#   bench/build-jpeg-symbols.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$here/out/jpeg-symbols
ver=$(dpkg-query -W -f '${source:Version}' libjpeg62-turbo 2>/dev/null || true)
[ -n "$ver" ] || { echo "build-jpeg-symbols: libjpeg62-turbo is not installed" >&2; exit 1; }
command -v nasm >/dev/null || { echo "build-jpeg-symbols: needs nasm (apt-get install nasm)" >&2; exit 1; }
command -v cmake >/dev/null || { echo "build-jpeg-symbols: needs cmake" >&2; exit 1; }

# A private apt state with one deb-src line: the system's sources are untouched.
apt=$out/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$out/src"
. /etc/os-release
echo "deb-src http://deb.debian.org/debian $VERSION_CODENAME main" > "$apt/sources.list"
set -- -o Dir::Etc::sourcelist="$apt/sources.list" -o Dir::Etc::sourceparts=- \
       -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache"
apt-get -q "$@" update
cd "$out/src"
apt-get -q "$@" source --download-only "libjpeg-turbo=$ver"
rm -rf tree && dpkg-source -x ./*.dsc tree

# Release optimisation plus debug info; SIMD on, as in Debian's build.
cmake -S tree -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g" \
      -DWITH_SIMD=1 -DENABLE_STATIC=0 -DWITH_TURBOJPEG=1 >/dev/null
cmake --build build -j"$(nproc)" --target jpeg turbojpeg
mkdir -p "$out/lib"
cp -P build/libjpeg.so* build/libturbojpeg.so* "$out/lib/"
echo "build-jpeg-symbols: libjpeg-turbo $ver with symbols in $out/lib"
