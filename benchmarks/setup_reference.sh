#!/usr/bin/env bash
# Set up the reference implementation of the Dripper method (PyPI `mineru-html`)
# in an isolated venv at .cache/ref-venv, CPU path only.
#
# mineru-html's own requirements pull torch/transformers/accelerate/trafilatura;
# none of those is needed for the CPU steps we benchmark (simplify_html,
# map_to_main, convert2content). So mineru-html is installed with --no-deps and
# only the libraries that `mineru_html.process.*` imports are added:
#   lxml, beautifulsoup4, selectolax (<1.0), pydantic, mineru-webkit (+ its deps,
#   which are all light: no torch).
# benchmarks/reference_cpu.py imports the submodules without executing the
# package's top-level __init__ (which imports transformers).
#
# Idempotent: re-running with an unchanged requirement set only checks a stamp.
# Usage: bash benchmarks/setup_reference.sh   (from anywhere)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${repo_root}/.cache/ref-venv"
stamp="${venv}/.ref-requirements"

no_deps_reqs=("mineru-html==1.1.2")
reqs=(
  "selectolax>=0.4.6,<1.0"
  "lxml>=6.0.2"
  "beautifulsoup4"
  "pydantic>=2"
  "mineru-webkit==0.1.6"
)
wanted="$(printf '%s\n' "nodeps:" "${no_deps_reqs[@]}" "deps:" "${reqs[@]}")"

if [[ -x "${venv}/bin/python" && -f "${stamp}" && "$(cat "${stamp}")" == "${wanted}" ]]; then
  echo "reference venv up to date: ${venv}"
  exit 0
fi

if [[ ! -x "${venv}/bin/python" ]]; then
  mkdir -p "$(dirname "${venv}")"
  python3 -m venv "${venv}"
fi

py="${venv}/bin/python"
"${py}" -m pip install --quiet --disable-pip-version-check --upgrade pip
"${py}" -m pip install --quiet --disable-pip-version-check "${reqs[@]}"
"${py}" -m pip install --quiet --disable-pip-version-check --no-deps "${no_deps_reqs[@]}"

# Smoke test: the process modules import without the package __init__.
"${py}" - <<'EOF'
import importlib
import importlib.util
import sys
import types

spec = importlib.util.find_spec("mineru_html")
assert spec is not None and spec.submodule_search_locations
stub = types.ModuleType("mineru_html")
stub.__path__ = list(spec.submodule_search_locations)
stub.__spec__ = spec
sys.modules["mineru_html"] = stub
for name in ("simplify_html", "map_to_main", "convert2content", "build_prompt"):
    importlib.import_module(f"mineru_html.process.{name}")
assert "transformers" not in sys.modules and "torch" not in sys.modules
print("mineru_html.process imports OK from", stub.__path__[0])
EOF

printf '%s' "${wanted}" > "${stamp}"
echo "reference venv ready: ${venv}"
