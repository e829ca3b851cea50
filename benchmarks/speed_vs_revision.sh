#!/usr/bin/env bash
# Before / after on one host: the whole CPU path's speed (benchmarks/learned_labeller.py
# speed) of another revision, installed compiled in its own venv, and of this working tree
# (make compile first), run alternately so that the machine's drift falls on both.
#
#   benchmarks/speed_vs_revision.sh REV [REPEAT] [ROUNDS] [-- speed options...]
#   benchmarks/speed_vs_revision.sh HEAD~1 3 3
#   benchmarks/speed_vs_revision.sh HEAD~1 2 1 -- --file wcxb_dev.jsonl.xz --every 5
set -euo pipefail
rev=${1:?a git revision to compare with}
repeat=${2:-3}
rounds=${3:-2}
shift $(($# < 3 ? $# : 3))
[[ ${1:-} == "--" ]] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
data=$(cd "$root/../shared/data" && pwd)
work=${SPEED_WORK:-/tmp/dripstream-speed-$(git -C "$root" rev-parse --short "$rev")}
if [[ ! -x $work/venv/bin/python ]]; then
  rm -rf "$work" && mkdir -p "$work"
  git -C "$root" archive "$rev" | tar -x -C "$work" --one-top-level=tree
  "$root/.venv/bin/uv" venv -q "$work/venv" --python "$root/.venv/bin/python"
  (cd "$work/tree" && "$root/.venv/bin/uv" pip install --python "$work/venv/bin/python" -q \
    -c requirements/lock-dev.txt --override requirements/overrides.txt '.[test,bench]')
fi
for _ in $(seq "$rounds"); do
  (cd /tmp && "$work/venv/bin/python" "$work/tree/benchmarks/learned_labeller.py" speed \
    --repeat "$repeat" --data "$data" --out "$work/out" "$@" | tail -1 | sed "s/^/$rev: /")
  (cd "$root" && .venv/bin/python benchmarks/learned_labeller.py speed --repeat "$repeat" \
    --out out/learned "$@" | tail -1 | sed 's/^/working tree: /')
done
