#!/usr/bin/env bash
# GNU wget, for the tests that crawl a loopback server with it into a WARC
# (tests/processors/test_warc_writers.py): prints the path of a wget that runs.
#
#   bash scripts/wget.sh      the wget on PATH; else Debian's package, installed
#
# Debian's package: as root (CI, the images' build), `apt-get install wget` (after
# `apt-get update` when the package lists lack it); otherwise `apt-get download` of wget and
# of those of its libraries that are not installed, unpacked with `dpkg -x` into
# <repo>/.cache/wget, behind a wrapper that sets LD_LIBRARY_PATH. Needs only Debian's
# package archive.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT_DIR=.cache/wget/root
WRAPPER=.cache/wget/bin/wget

runs() { "$1" --version >/dev/null 2>&1; }

if command -v wget >/dev/null && runs "$(command -v wget)"; then
    command -v wget
    exit 0
fi
if [[ -x "$WRAPPER" ]] && runs "$WRAPPER"; then
    realpath "$WRAPPER"
    exit 0
fi
command -v apt-get >/dev/null || {
    echo "wget.sh: no wget on PATH and no apt-get to install Debian's package" >&2
    exit 2
}
if [[ "$(id -u)" == 0 ]]; then
    if ! apt-get install -y -qq --no-install-recommends wget >&2; then
        apt-get update -qq >&2
        apt-get install -y -qq --no-install-recommends wget >&2
    fi
    command -v wget
    exit 0
fi
# Not root: unpack the packages into the project's cache.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
packages=(wget)
for dependency in $(apt-cache depends --no-recommends --no-suggests wget |
    awk '/Depends:/ {print $2}' | tr -d '<>'); do
    if ! dpkg -s "$dependency" >/dev/null 2>&1; then
        packages+=("$dependency")
    fi
done
(cd "$tmp" && apt-get download "${packages[@]}" >&2)
rm -rf .cache/wget
mkdir -p "$ROOT_DIR" "$(dirname "$WRAPPER")"
for deb in "$tmp"/*.deb; do
    dpkg -x "$deb" "$ROOT_DIR"
done
root="$(cd "$ROOT_DIR" && pwd)"
cat >"$WRAPPER" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$root/usr/bin/wget" "\$@"
EOF
chmod +x "$WRAPPER"
runs "$WRAPPER" || {
    echo "wget.sh: the unpacked wget does not run" >&2
    exit 2
}
realpath "$WRAPPER"
