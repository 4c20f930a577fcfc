#!/usr/bin/env bash
# `make deb`: the Debian packages stoker, libstoker0, libstoker-dev and
# python3-stoker, built with debhelper (dpkg-buildpackage) from a copy of
# this tree with deploy/debian as its debian/ directory, so the checkout's
# top level stays as it is. Usage: scripts/build-deb.sh OUTDIR
# The .deb files, .buildinfo and .changes land in OUTDIR. DEB_BUILD_OPTIONS
# passes through (nocheck skips the unit tests, parallel=N).
set -euo pipefail

out=${1:?usage: build-deb.sh OUTDIR}
cd "$(dirname "$0")/.."
version=$(cat VERSION)
src=$out/stoker-$version

rm -rf "$out"
mkdir -p "$src"
out=$(cd "$out" && pwd)
src=$out/stoker-$version

# The sources: what git tracks plus new files it does not ignore (never the
# build trees); outside a git checkout, the tree without build outputs.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - -cf - | tar -xf - -C "$src"
else
	tar --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C "$src"
fi

cp -r deploy/debian "$src/debian"
cp deploy/stoker.sysusers "$src/debian/stoker.sysusers"
maint=$(sed -n 's/^Maintainer: //p' deploy/debian/control)
when=$(git log -1 --format=%cD 2>/dev/null || date -R)
cat > "$src/debian/changelog" <<END
stoker ($version) bookworm; urgency=medium

  * Release $version: see the project's version history.

 -- $maint  $when
END

cd "$src"
dpkg-buildpackage --build=binary --no-sign
ls -1 "$out"/*.deb
