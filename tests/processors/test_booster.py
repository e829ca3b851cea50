"""Prediction through LightGBM's C library: the Python package's results, without its
imports."""

from __future__ import annotations

import json
import subprocess
import sys
from array import array

import numpy as np
import pytest

from dripstream.processors.label.booster import Booster, BoosterError
from dripstream.processors.label.learned import default_model_path


def test_predictions_equal_the_python_packages() -> None:
    lightgbm = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(float)
    trained = lightgbm.train(
        {"objective": "binary", "verbose": -1, "num_threads": 1},
        lightgbm.Dataset(X, label=y),
        num_boost_round=20,
    )
    ours = Booster(trained.model_to_string())
    for rows in (X, X[:1], X.astype(np.float64), X[::2]):  # dtypes, one row, a strided view
        assert ours.predict(rows, 6) == trained.predict(rows, num_threads=1).tolist()
    flat = array("f", X.tobytes())  # what the labeller passes: a flat float32 buffer
    assert ours.predict(flat, 6) == trained.predict(X, num_threads=1).tolist()


def test_the_shipped_model_loads_and_predicts_probabilities() -> None:
    model = json.loads(default_model_path().read_text())
    booster = Booster(model["lightgbm"])
    columns = len(model["feature_names"])
    p = booster.predict(array("f", bytes(4 * 3 * columns)), columns)
    assert len(p) == 3 and all(0 <= q <= 1 for q in p)


def test_a_broken_model_is_refused_with_lightgbms_reason() -> None:
    with pytest.raises(BoosterError, match=r"\S"):
        Booster("tree\nversion=v4\nnot a model")


def test_a_wrong_number_of_columns_is_refused() -> None:
    model = json.loads(default_model_path().read_text())
    booster = Booster(model["lightgbm"])
    with pytest.raises(BoosterError):
        booster.predict(np.zeros((2, 3), dtype=np.float32), 3)
    with pytest.raises(BoosterError, match="rows of 4"):
        booster.predict(array("f", bytes(4 * 6)), 4)  # 6 values are not rows of 4
    with pytest.raises(BoosterError, match="float32 or float64"):
        booster.predict(array("i", [1, 2]), 2)


def test_labelling_imports_neither_lightgbm_nor_numpy() -> None:
    """The Python package pulls in SciPy (and pandas where installed): ~90 MiB a worker;
    numpy's import is a tenth of a short batch's time on the command line."""
    code = (
        "import sys\n"
        "from dripstream.processors.label.registry import build_labeller\n"
        "from dripstream.processors.pipeline import simplify_page, PipelineSettings\n"
        "from dripstream.processors.ingest.sources import raw_page_from_row\n"
        "html = '<p>' + 'Words of a paragraph. ' * 40 + '</p><p>More.</p>'\n"
        "row = {'url': 'https://example.org/', 'html': html}\n"
        "page = simplify_page(raw_page_from_row(row), PipelineSettings())\n"
        "assert build_labeller('learned').label([page])[0].labels\n"
        "print(sorted({'lightgbm', 'numpy', 'scipy', 'pandas', 'pyarrow'} & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"
