"""The learned CPU labeller: shipped model, features, confidence, routing, registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from processors.features import FEATURE_NAMES, N_FEATURES, page_features
from processors.labellers.base import Labeller
from processors.labellers.learned import (
    LearnedLabeller,
    LearnedModel,
    default_model_path,
)
from processors.labellers.registry import build_labeller
from processors.pipeline import PipelineSettings, extract_pages, simplify_page
from processors.sources import raw_page_from_row
from processors.training import group_folds, isotonic
from topics.records import MAIN, OTHER, SimplifiedPage

SETTINGS = PipelineSettings()
PAGE = """<html><head><title>Rivers of the plains</title></head><body>
<div class="site-nav"><a href="/">Home</a> <a href="/news">News</a> <a href="/about">About</a></div>
<main><article class="post-content"><h1>Rivers of the plains</h1>
<p>The rivers of the northern plains carry snow melt from the mountains every spring, and
the towns along their banks have learnt to read the water long before it arrives.</p>
<p>When the melt comes early, the lower valleys flood and the farms move their herds to the
higher pastures, a custom older than any of the roads that now cross the valley floor.</p>
<p>Engineers have proposed dams for a century; the towns have always voted them down.</p>
</article></main>
<div class="related-posts"><a href="/a">Ten towns to visit</a><a href="/b">Why rivers move</a></div>
<div class="copyright">Copyright 2026 Example Media</div></body></html>"""


@pytest.fixture(scope="module")
def page() -> SimplifiedPage:
    step = simplify_page(
        raw_page_from_row({"url": "https://example.org/rivers", "html": PAGE}), SETTINGS
    )
    assert isinstance(step, SimplifiedPage)
    return step


@pytest.fixture(scope="module")
def labeller() -> LearnedLabeller:
    return LearnedLabeller()


def test_the_model_file_ships_in_the_package_and_is_small() -> None:
    path = default_model_path()
    assert path.exists()
    assert path.stat().st_size <= 10 * 2**20
    document = json.loads(path.read_text())
    assert document["feature_names"] == list(FEATURE_NAMES)
    assert 0 < document["threshold"] < 1
    assert document["calibration"]["x"] == sorted(document["calibration"]["x"])


def test_features_are_one_finite_row_per_block(page: SimplifiedPage) -> None:
    X = page_features(page.simplified_html, page.mapping_blocks, page.title)
    assert X.shape == (page.block_count, N_FEATURES)
    assert np.isfinite(X).all()
    again = page_features(page.simplified_html, page.mapping_blocks, page.title)
    assert np.array_equal(X, again)


def test_features_of_a_page_without_blocks_are_empty() -> None:
    assert page_features("", []).shape == (0, N_FEATURES)


def test_labels_the_article_and_not_the_boilerplate(
    labeller: LearnedLabeller, page: SimplifiedPage
) -> None:
    (outcome,) = labeller.label([page])
    assert outcome.ok and len(outcome.labels) == page.block_count
    texts = dict(zip(page.mapping_blocks, outcome.labels, strict=True))
    main_text = " ".join(block for block, label in texts.items() if label == MAIN)
    assert "snow melt" in main_text and "higher pastures" in main_text
    assert "Copyright" not in main_text and "Ten towns" not in main_text
    assert outcome.confidence is not None and 0.0 <= outcome.confidence <= 1.0


def test_low_confidence_pages_are_routed_away(page: SimplifiedPage) -> None:
    model = LearnedModel.load()
    (outcome,) = LearnedLabeller(model, min_confidence=1.01).label([page])
    assert outcome.labels is None and outcome.failure == "low_confidence"
    assert outcome.confidence is not None
    (kept,) = LearnedLabeller(model, min_confidence=0.0).label([page])
    assert kept.ok


def test_min_confidence_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIPSTREAM_LEARNED_MIN_CONFIDENCE", "0.4")
    assert LearnedLabeller(LearnedModel.load()).min_confidence == 0.4


def test_the_whole_pipeline_runs_with_it(labeller: LearnedLabeller, data_dir: Path) -> None:
    with open(data_dir / "articles_dev.jsonl", encoding="utf-8") as lines:
        rows = [json.loads(line) for _, line in zip(range(5), lines, strict=False)]
    outcomes = extract_pages([raw_page_from_row(row) for row in rows], labeller, SETTINGS)
    assert all(outcome.status in ("ok", "fallback") for outcome in outcomes)
    assert any(outcome.record.extractor == "dripper:learned" for outcome in outcomes)


def test_the_registry_builds_it() -> None:
    labeller = build_labeller("learned")
    assert isinstance(labeller, Labeller) and labeller.name == "learned"


def test_isotonic_calibration_is_monotone() -> None:
    rng = np.random.default_rng(0)
    x = rng.random(500)
    y = rng.random(500) < x
    fitted = isotonic(x.tolist(), y.tolist())
    assert fitted["y"] == sorted(fitted["y"])
    assert fitted["y"][0] >= 0.0 and fitted["y"][-1] <= 1.0


def test_folds_never_split_a_site() -> None:
    groups = ["a", "a", "b", "c", "c", "c", "d", "e", "f", "f"]
    folds = group_folds(groups, 3, seed=1)
    by_group: dict[str, set[int]] = {}
    for group, fold in zip(groups, folds, strict=True):
        by_group.setdefault(group, set()).add(fold)
    assert all(len(f) == 1 for f in by_group.values())
    assert folds == group_folds(groups, 3, seed=1)


def test_labels_are_main_or_other(labeller: LearnedLabeller, page: SimplifiedPage) -> None:
    (outcome,) = labeller.label([page])
    assert set(outcome.labels) <= {MAIN, OTHER}
