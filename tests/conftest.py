"""Shared fixtures: the development data beside the repository (../shared/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "webmainbench_sample.jsonl").exists():
        pytest.fail(f"development data not found at {DATA_DIR}")
    return DATA_DIR
