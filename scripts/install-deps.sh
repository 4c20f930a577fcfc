#!/usr/bin/env bash
# Install what stoker needs on Debian 12: build tools and libraries from Debian,
# Python test tools from PyPI. Idempotent; as non-root it prints the command to run.
set -euo pipefail

DEB_PACKAGES=(
	build-essential pkg-config clang libclang-rt-14-dev valgrind
	# make format-check: the C style in .clang-format
	clang-format
	libuv1-dev
	libturbojpeg0-dev libjpeg62-turbo-dev
	libprotobuf-c-dev protobuf-c-compiler
	libsystemd-dev systemd
	util-linux passwd groff-base strace
	# setfacl: test_permissions.py grants a user read access by POSIX ACL
	acl
	libinih-dev
	libcmocka-dev
	# image formats beside JPEG (daemon/formats/image.h): PNG, WebP, TIFF
	libspng-dev libwebp-dev libtiff-dev
	# tiffcp writes the TIFF layouts Pillow cannot, for the format tests
	libtiff-tools
	# HTTP/S3 data sets: libcurl for stokerd; nginx and iproute2 (netns, tc netem) for tests and bench
	libcurl4-openssl-dev nginx-light iproute2
	python3 python3-pip python3-numpy python3-pytest python3-pil python3-prometheus-client
	# Packaging (make deb, check-packaging, image): debhelper, lintian, the
	# system Python's venv, and mmdebstrap + skopeo + umoci for the OCI image.
	debhelper dh-python dpkg-dev lintian python3-venv mmdebstrap skopeo umoci
	# make wheel: patchelf sets the bundled libraries' RUNPATH (scripts/repair-wheel.py)
	patchelf
	# check-image: podman loads the OCI archive as a cluster node would.
	podman
)
PY_PACKAGES=(numpy pytest pillow prometheus-client)
# tar shards: tests/integration/test_shards.py reads mkshards' output with webdataset's own reader
PY_PACKAGES+=(webdataset)
# check-packaging: `python -m build` makes the wheel and sdist
PY_PACKAGES+=(build)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "stoker: run as root:  apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	# Other helpers may hold apt's locks: wait for them rather than fail.
	apt-get -o DPkg::Lock::Timeout=900 update -q
	apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
fi

# Python tools for the python3 on PATH: Debian's packages serve the system
# interpreter; another one (pyenv, a venv) gets them from PyPI.
PY=${PYTHON:-python3}
need_py=()
for m in "${PY_PACKAGES[@]}"; do
	mod=${m/pillow/PIL}
	# Not from the current directory: a checkout's build/ passes for `build`.
	"$PY" -c "import sys; del sys.path[0]; import ${mod//-/_}" 2>/dev/null || need_py+=("$m")
done
if [ "${#need_py[@]}" -gt 0 ]; then
	"$PY" -m pip install -q "${need_py[@]}" 2>/dev/null ||
		"$PY" -m pip install -q --break-system-packages "${need_py[@]}"
fi
echo "stoker: dependencies present"
