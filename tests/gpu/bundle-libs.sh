#!/usr/bin/env bash
# tests/gpu/bundle-libs.sh: copies the shared libraries that the GPU run's
# programs need, beside the C and C++ runtimes, into $B/runtime-libs, so that
# a build made here can be carried to a GPU machine that lacks the Debian
# packages (tests/gpu/run.sh puts the ones that machine lacks on the path).
#
#   tests/gpu/bundle-libs.sh     builds what run.sh runs, then carry build/
#                                (B: the build directory, default build)
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${B:-build}
DEST=$B/runtime-libs
BENCH=("$B/bench/jpeg_limit" "$B/bench/stoker_rtt" "$B/bench/profile_pipeline")
BINS=("$B/stokerd" "$B/stokerctl" "$B/libstoker.so" "$B/tests/gpu_check" "$B/tests/gpu_copybench" "$B/tests/mkjpeg"
	"${BENCH[@]}")

make -j"$(nproc)" B="$B" all "${BENCH[@]}"

deps=$(ldd "${BINS[@]}")
if grep -q "not found" <<<"$deps"; then
	echo "bundle-libs.sh: unresolved libraries:" >&2
	grep "not found" <<<"$deps" >&2
	exit 1
fi
rm -rf "$DEST"
mkdir -p "$DEST"
# "name => /path (address)": every library found on a path, once.
awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$deps" | sort -u |
	while read -r name path; do
		case $name in
		# The C and C++ runtimes: the GPU machine's own (its Python needs them).
		libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
			libstdc++.so.* | libgcc_s.so.* | ld-linux*) continue ;;
		# Ours: found in $B by its runpath, rebuilt there when make can run.
		libstoker.so.*) continue ;;
		esac
		cp -L "$path" "$DEST/$name"
	done
du -sh "$DEST"
