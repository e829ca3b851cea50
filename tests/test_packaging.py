"""The installed distribution has one import name: a wheel installs ``dripstream.*`` and
nothing generic (no top-level ``processors``, ``streams``, ``topics`` or ``gpu_worker``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERIC = ("processors", "streams", "topics", "gpu_worker")
PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy of the files git knows, so no build output of this tree
    # (build/lib keeps modules since deleted) can reach the wheel.
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [*PIP_WHEEL, "-w", str(out), str(source)],
        check=True,
        env={**os.environ, "DRIPSTREAM_PURE_PYTHON": "1"},
        capture_output=True,
    )
    (built,) = out.glob("dripstream-*.whl")
    return built


def test_the_wheel_holds_only_the_dripstream_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"dripstream"}, tops
    for part in GENERIC:
        assert f"dripstream/{part}/__init__.py" in names
    assert "dripstream/processors/label/models/learned_labeller.json" in names
    assert any(name.startswith("dripstream/gpu_worker/profiles/") for name in names)
    assert "dripstream/topics/schema/page-record.schema.json" in names


@pytest.mark.slow
def test_a_fresh_venv_with_only_the_wheel_imports_dripstream_and_no_generic_name(
    wheel: Path, tmp_path: Path
) -> None:
    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    python = target / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = (
        "import importlib, dripstream, dripstream.topics, dripstream.processors;"
        "missing = []\n"
        f"for name in {GENERIC!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        missing.append(name)\n"
        "print(','.join(missing))"
    )
    result = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ",".join(GENERIC)
