"""Every benchmark script of BENCHMARKS.md still starts: its imports resolve against the
code as it is now (``--help`` parses the arguments and stops before any work)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# reference_cpu.py runs in the reference implementation's own venv (setup_reference.sh);
# template_sizing.py takes no arguments (it is the sizing run itself).
SCRIPTS = sorted(
    path
    for path in (ROOT / "benchmarks").glob("*.py")
    if path.name not in ("reference_cpu.py", "template_sizing.py")
)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_benchmark_script_starts(script: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "usage:" in run.stdout


def test_processors_benchmark_runs_on_a_few_pages(tmp_path: Path, data_dir: Path) -> None:
    """The CPU-path benchmark (BENCHMARKS.md, "Processors") end to end on three pages."""
    pages = tmp_path / "pages.jsonl"
    with open(data_dir / "articles_dev.jsonl", encoding="utf-8") as rows:
        pages.write_text("".join(next(rows) for _ in range(3)), encoding="utf-8")
    script = ROOT / "benchmarks" / "processors_cpu.py"
    run = subprocess.run(
        [sys.executable, str(script), "--data", str(pages), "--repeat", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["pages"] == 3 and result["routed"]["simplified"] == 3
    assert result["tokens"]["simplified_mean"] < result["tokens"]["raw_mean"]
