#!/usr/bin/env bash
# The documentation pages the learned labeller trains on beside the human-labelled files,
# labelled by their own markup (dripstream.processors.training.distant): rebuilds the
# shipped processors/training/distant_documentation.jsonl.xz from Debian's HTML
# documentation packages.
#
#   bash scripts/distant-docs.sh [DIR]      DIR: where the packages unpack (out/distant)
#
# `apt-get download` and `dpkg-deb -x` (no root, nothing installed); the versions unpacked
# are recorded in each page's meta.source. Needs Debian's package archive and .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-out/distant}
PYTHON=.venv/bin/python
mkdir -p "$DIR"
PACKAGES=$("$PYTHON" -c 'from dripstream.processors.training.distant import DISTANT_SITES; print(*DISTANT_SITES)')
for package in $PACKAGES; do
    [[ -f "$DIR/$package/VERSION" ]] && continue
    (cd "$DIR" && apt-get download "$package")
    deb=$(ls "$DIR/${package}"_*.deb)
    dpkg-deb -x "$deb" "$DIR/$package"
    dpkg-deb -f "$deb" Version > "$DIR/$package/VERSION"
done
"$PYTHON" -m dripstream.processors.training.distant "$DIR" processors/training/distant_documentation.jsonl.xz
