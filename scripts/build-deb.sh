#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the Debian package from the current working tree and puts the .deb files (and the
# .changes/.buildinfo, for lintian) into OUTDIR, with meson-install.tar.gz (the build's
# `meson install --destdir` tree); prints the path of the main .deb.
#   scripts/build-deb.sh OUTDIR
# The tree is copied as git sees it: tracked files and untracked files that are not ignored
# (so it works before a commit and never picks up build directories), into a temporary
# directory; the repository is left untouched. DEB_BUILD_OPTIONS (e.g. nocheck) is honoured.
# Needs the Build-Depends of debian/control (scripts/setup.sh --test-deps installs them and
# the packaging tools).
set -euo pipefail

if [ $# -ne 1 ]; then
        echo "usage: $0 OUTDIR" >&2
        exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

for tool in git dpkg-buildpackage dh; do
        command -v "$tool" >/dev/null || {
                echo "build-deb.sh: '$tool' is missing (scripts/setup.sh --test-deps installs it)" >&2
                exit 1
        }
done

work=$(mktemp -d /tmp/ebpf-profiler-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT

package=$(sed -n 's/^Source: *//p' "$root/debian/control")
version=$(dpkg-parsechangelog -l "$root/debian/changelog" -S Version)
src="$work/$package-$version"
mkdir "$src"

# Every file git would commit, as it is now in the working tree (deleted files are skipped).
(cd "$root" && git ls-files -z --cached --others --exclude-standard) |
        (cd "$root" && while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done) |
        tar -C "$root" --null --no-recursion -T - -cf - | tar -C "$src" -xf -

start=$(date +%s)
echo "build-deb.sh: building $package $version in $src" >&2
(cd "$src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1 || {
        tail -n 100 "$work/build.log" >&2
        echo "build-deb.sh: dpkg-buildpackage failed (the last 100 lines are above)" >&2
        exit 1
}
echo "build-deb.sh: built in $(($(date +%s) - start)) s" >&2

# The same build as `meson install --destdir` leaves it (prefix /usr, what debhelper
# configured), without the package's maintainer scripts: the container test installs it by hand
# as docs/systemd.md says, after the package is purged.
destdir="$work/meson-destdir"
builddir=$(ls -d "$src"/obj-* | head -1)
meson install -C "$builddir" --no-rebuild --quiet --destdir "$destdir" >>"$work/build.log" 2>&1 || {
        tail -n 30 "$work/build.log" >&2
        echo "build-deb.sh: meson install --destdir failed" >&2
        exit 1
}
tar -C "$destdir" -czf "$out/meson-install.tar.gz" .

arch=$(dpkg-architecture -qDEB_HOST_ARCH)
shopt -s nullglob
artifacts=("$work"/*.deb "$work"/*.ddeb "$work"/*.changes "$work"/*.buildinfo)
[ ${#artifacts[@]} -gt 0 ] || { echo "build-deb.sh: no packages were produced" >&2; exit 1; }
cp "$work/build.log" "$out/${package}_${version}_${arch}.build"
mv -f "${artifacts[@]}" "$out/"

deb="$out/${package}_${version}_${arch}.deb"
[ -f "$deb" ] || { echo "build-deb.sh: $deb is missing" >&2; exit 1; }
echo "$deb"
