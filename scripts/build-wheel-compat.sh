#!/usr/bin/env bash
# `make wheel-compat`: the wheel with the daemon for older distributions
# (docs/slurm.md). `make wheel` on Debian 12 gives manylinux_2_34 (glibc
# 2.34+); this runs the same `make wheel` inside a Debian 11 root made by
# mmdebstrap (glibc 2.31), which gives manylinux_2_30: Debian 11, Ubuntu
# 20.04 and newer. Three libraries stoker needs are newer than Debian 11's
# and are built there from Debian 12's sources into /opt: libtiff 4.5
# (TIFFOpenOptions), libcurl 7.88 (CURLOPT_PROTOCOLS_STR, CURLOPT_AWS_SIGV4)
# and libspng (not in Debian 11); the rest are Debian 11's. The TIFF build
# has its JPEG, deflate, LZW and PackBits codecs, not JBIG, LERC, WebP,
# ZSTD or LZMA; libcurl speaks HTTP and HTTPS (OpenSSL) only. Root, network
# to Debian's mirrors and PyPI; about 11 minutes on 2 cores.
#   scripts/build-wheel-compat.sh OUTDIR [ROOTDIR]    (ROOTDIR is kept for reuse)
set -euo pipefail

OUT=$(realpath -m "${1:?usage: build-wheel-compat.sh OUTDIR [ROOTDIR]}")
ROOT=$(realpath -m "${2:-${OUT}-bullseye}")
REPO=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEPS=build-essential,pkg-config,cmake,ca-certificates,dpkg-dev,python3-venv,python3-pip,patchelf,binutils
DEPS=$DEPS,libuv1-dev,libturbojpeg0-dev,libjpeg62-turbo-dev,libprotobuf-c-dev,protobuf-c-compiler
DEPS=$DEPS,libsystemd-dev,libinih-dev,libcmocka-dev,libwebp-dev,libssl-dev,zlib1g-dev

if [ ! -x "$ROOT/usr/bin/cmake" ]; then
	rm -rf "$ROOT"
	mmdebstrap --variant=minbase --include="$DEPS" bullseye "$ROOT" "$MIRROR"
fi
# DNS and this machine's certificate authorities (PyPI behind a proxy).
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
echo "deb-src $MIRROR bookworm main" > "$ROOT/etc/apt/sources.list.d/bookworm-src.list"
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$m" || true; done; }
trap cleanup EXIT
for m in proc dev/shm; do
	mkdir -p "$ROOT/$m"
	if ! mountpoint -q "$ROOT/$m"; then
		if [ "$m" = proc ]; then mount -t proc proc "$ROOT/proc"; else mount -t tmpfs -o mode=1777 tmpfs "$ROOT/$m"; fi
		mounted=("$ROOT/$m" "${mounted[@]}")
	fi
done
# CUDA's headers and nvcc, where this machine has them (as `make` uses them).
if [ -d /usr/local/cuda ] && [ ! -d "$ROOT/usr/local/cuda/include" ]; then
	mkdir -p "$ROOT/usr/local/cuda"
	mount --bind -o ro "$(realpath /usr/local/cuda)" "$ROOT/usr/local/cuda"
	mounted=("$ROOT/usr/local/cuda" "${mounted[@]}")
fi

inside() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
	PKG_CONFIG_PATH=/opt/tiff/lib/pkgconfig:/opt/curl/lib/pkgconfig:/opt/spng/lib/pkgconfig \
	LD_LIBRARY_PATH=/opt/tiff/lib:/opt/curl/lib:/opt/spng/lib /bin/sh -ec "$1"; }

inside 'apt-get update -q >/dev/null; mkdir -p /srcpkg; cd /srcpkg
for p in tiff curl libspng; do ls -d ${p}-[0-9]*/ >/dev/null 2>&1 || apt-get source -q ${p}/bookworm >/dev/null 2>&1; done
ls -d tiff-[0-9]*/ curl-[0-9]*/ libspng-[0-9]*/'
inside 'cd /srcpkg/tiff-[0-9]*/ && [ -e /opt/tiff/lib/libtiff.so.6 ] || { mkdir -p b && cd b &&
cmake .. -DCMAKE_INSTALL_PREFIX=/opt/tiff -DCMAKE_BUILD_TYPE=Release -Dtiff-tools=OFF -Dtiff-tests=OFF \
  -Dtiff-contrib=OFF -Dtiff-docs=OFF -Djbig=OFF -Dlerc=OFF -Dwebp=OFF -Dzstd=OFF -Dlzma=OFF -Dlibdeflate=OFF >/dev/null &&
make -j"$(nproc)" >/dev/null && make install >/dev/null; }'
inside 'cd /srcpkg/curl-[0-9]*/ && [ -e /opt/curl/lib/libcurl.so.4 ] || { mkdir -p b && cd b &&
cmake .. -DCMAKE_INSTALL_PREFIX=/opt/curl -DCMAKE_BUILD_TYPE=Release -DBUILD_CURL_EXE=OFF -DBUILD_TESTING=OFF \
  -DCURL_USE_OPENSSL=ON -DCURL_DISABLE_LDAP=ON -DCURL_DISABLE_LDAPS=ON -DUSE_LIBIDN2=OFF -DCURL_USE_LIBSSH2=OFF \
  -DCURL_USE_LIBPSL=OFF -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DUSE_NGHTTP2=OFF -DENABLE_MANUAL=OFF \
  -DCURL_DISABLE_RTSP=ON -DCURL_DISABLE_DICT=ON -DCURL_DISABLE_TELNET=ON -DCURL_DISABLE_TFTP=ON \
  -DCURL_DISABLE_POP3=ON -DCURL_DISABLE_IMAP=ON -DCURL_DISABLE_SMTP=ON -DCURL_DISABLE_GOPHER=ON \
  -DCURL_DISABLE_MQTT=ON -DCURL_DISABLE_SMB=ON >/dev/null && make -j"$(nproc)" >/dev/null && make install >/dev/null; }'
inside 'cd /srcpkg/libspng-[0-9]*/ && [ -e /opt/spng/lib/libspng.so.0 ] || { mkdir -p b && cd b &&
cmake .. -DCMAKE_INSTALL_PREFIX=/opt/spng -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_BUILD_TYPE=Release \
  -DSPNG_STATIC=OFF -DBUILD_EXAMPLES=OFF >/dev/null && make -j"$(nproc)" >/dev/null && make install >/dev/null; }
cd /opt/spng/lib/pkgconfig && { [ -e spng.pc ] || ln -s libspng.pc spng.pc; }'

# The checkout's tracked files, built from scratch there.
rm -rf "$ROOT/src" && mkdir -p "$ROOT/src"
git -C "$REPO" ls-files -z | (cd "$REPO" && xargs -0 tar cf -) | tar xf - -C "$ROOT/src"
inside 'python3 -m pip install -q build && cd /src && make -j"$(nproc)" build/stokerd build/stokerctl && make wheel'
mkdir -p "$OUT"
cp "$ROOT"/src/build/wheel/stoker-*-manylinux_*.whl "$OUT/"
ls "$OUT"/stoker-*-manylinux_*.whl
