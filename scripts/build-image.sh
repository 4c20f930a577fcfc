#!/usr/bin/env bash
# `make image`: the container image the DaemonSet names
# (deploy/kubernetes/stoker-daemonset.yaml), built without a registry: a
# Debian 12 root file system made by mmdebstrap from Debian's mirrors with
# stoker's own .debs installed, written as an OCI image archive
# (scripts/oci-image.py) that `docker load`, `podman load` and
# `skopeo copy` accept. Where a registry is reachable, deploy/Containerfile
# builds the same image with docker/podman/buildah.
#   scripts/build-image.sh DEB_DIR OUT_DIR
# Leaves OUT_DIR/rootfs.tar and OUT_DIR/stoker-VERSION.oci.tar.
# MIRROR (default http://deb.debian.org) picks the Debian mirror.
set -euo pipefail

debs=$(cd "${1:?usage: build-image.sh DEB_DIR OUT_DIR}" && pwd)
out=${2:?usage: build-image.sh DEB_DIR OUT_DIR}
cd "$(dirname "$0")/.."
version=$(cat VERSION)
mirror=${MIRROR:-http://deb.debian.org}

# The image's name is the one the DaemonSet pulls; its tag is this version.
ref=$(sed -n 's/^ *image: *\([^ ]*\/stoker:[^ ]*\) *$/\1/p' deploy/kubernetes/stoker-daemonset.yaml | sort -u)
if [ "$(printf '%s\n' "$ref" | wc -l)" -ne 1 ] || [ "${ref##*:}" != "$version" ]; then
	echo "build-image: the DaemonSet names '$ref'; want one image tagged $version (VERSION)" >&2
	exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

# minbase as debian:12-slim: no documentation, manual pages or locales
# (copyright files stay). The stoker user gets the uid and gid the
# DaemonSet runs as (2000), through a sysusers.d entry in /etc that
# overrides the package's before its postinst runs systemd-sysusers.
# systemd-standalone-sysusers provides systemd-sysusers without systemd.
mmdebstrap --variant=minbase --format=tar \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--essential-hook='mkdir -p "$1/etc/sysusers.d" && echo "u stoker 2000 \"stoker data-feeding daemon\" / -" > "$1/etc/sysusers.d/stoker.conf"' \
	--hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount \
	--customize-hook='rm -f "$1'"$debs"'"/*.deb; d="$1'"$debs"'"; while [ "$d" != "$1" ] && rmdir "$d"; do d=${d%/*}; done' \
	--include=systemd-standalone-sysusers \
	--include="$debs/libstoker0_${version}_amd64.deb" --include="$debs/stoker_${version}_amd64.deb" \
	bookworm "$out/rootfs.tar" \
	"deb $mirror/debian bookworm main" \
	"deb $mirror/debian bookworm-updates main" \
	"deb $mirror/debian-security bookworm-security main"

python3 scripts/oci-image.py --rootfs "$out/rootfs.tar" --ref "$ref" --user stoker \
	--entrypoint /usr/sbin/stokerd --label "org.opencontainers.image.title=stoker" \
	--label "org.opencontainers.image.description=stokerd, the per-node data-feeding daemon" \
	--out "$out/stoker-$version.oci.tar"
