"""The learned CPU labeller: shipped model, features, confidence, routing, registry."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import numpy as np
import pytest

from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.booster import Booster
from dripstream.processors.label.features import (
    CONTEXT_NAMES,
    FEATURE_NAMES,
    N_FEATURES,
    PageFeatures,
    block_features,
    context_features,
    page_features,
    pairwise_sum,
)
from dripstream.processors.label.learned import (
    LearnedLabeller,
    LearnedModel,
    default_model_path,
    interpolate,
    stacked_rows,
)
from dripstream.processors.label.registry import build_labeller
from dripstream.processors.pipeline import PipelineSettings, extract_pages, simplify_page
from dripstream.processors.training.train import (
    CONTEXT_PASSES,
    PAGE_WEIGHT,
    fit_model,
    group_folds,
    isotonic,
    load_rows,
    matrix_array,
    prepare_pages,
)
from dripstream.topics.records import MAIN, OTHER, SimplifiedPage

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
    assert document["lightgbm"] and len(document["lightgbm_context"]) == CONTEXT_PASSES
    assert 0 < document["threshold"] < 1
    assert document["calibration"]["x"] == sorted(document["calibration"]["x"])


def test_features_are_one_finite_row_per_block(page: SimplifiedPage) -> None:
    matrix = page_features(page.simplified_html, page.mapping_blocks, page.title)
    X = matrix_array(matrix, N_FEATURES)
    assert X.shape == (page.block_count, N_FEATURES)
    assert np.isfinite(X).all()
    again = page_features(page.simplified_html, page.mapping_blocks, page.title)
    assert matrix.tobytes() == again.tobytes()


def test_features_of_a_page_without_blocks_are_empty() -> None:
    features = block_features("", [])
    assert len(features.matrix) == 0 and features.parent == features.signature == []


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


def test_min_confidence_from_the_settings() -> None:
    from dripstream.processors.label.registry import build_labeller
    from dripstream.streams.settings import StreamSettings

    env = {"DRIPSTREAM_LEARNED_MIN_CONFIDENCE": "0.4"}
    options = StreamSettings.from_env(env).labeller_options()
    assert LearnedLabeller(LearnedModel.load(), options=options).min_confidence == 0.4
    assert build_labeller("learned", options).min_confidence == 0.4  # type: ignore[attr-defined]
    # Unset: the learned labeller alone has no floor.
    assert LearnedLabeller(LearnedModel.load()).min_confidence is None


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


def test_an_unsure_page_keeps_the_blocks_near_its_best_one() -> None:
    model = LearnedModel.load()
    model.threshold, model.margin = 0.5, 0.3
    # A sure page: the threshold alone decides.
    assert model.main_blocks([0.95, 0.6, 0.45, 0.1]) == [True, True, False, False]
    # The best block is main but unsure (0.7): the bar comes down to 0.4.
    assert model.main_blocks([0.7, 0.42, 0.38]) == [True, True, False]
    # No block reaches 0.5: none is main (the page goes to the fallback).
    assert not any(model.main_blocks([0.45, 0.3, 0.2]))
    assert model.main_blocks([]) == []


def test_the_margin_is_saved_with_the_model(tmp_path: Path) -> None:
    model = LearnedModel.load()
    model.margin = 0.25
    model.save(tmp_path / "model.json")
    assert LearnedModel.load(tmp_path / "model.json").margin == 0.25
    document = json.loads((tmp_path / "model.json").read_text())
    del document["margin"]  # a model file from before the margin: the threshold alone
    (tmp_path / "old.json").write_text(json.dumps(document))
    assert LearnedModel.load(tmp_path / "old.json").margin == 0.0


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


def _context_of(
    p: list[float], parent: list[int], grandparent: list[int], signature: list[int] | None = None
) -> dict[str, np.ndarray]:
    X = np.zeros((len(p), N_FEATURES), dtype=np.float32)
    X[:, FEATURE_NAMES.index("log_text")] = np.log1p(9.0)  # every block 10 characters
    signatures = signature if signature is not None else [-1] * len(p)
    features = PageFeatures(array("f", X.tobytes()), parent, grandparent, signatures)
    columns = matrix_array(context_features(p, features), len(CONTEXT_NAMES))
    assert columns.shape == (len(p), len(CONTEXT_NAMES)) and np.isfinite(columns).all()
    return {name: columns[:, i] for i, name in enumerate(CONTEXT_NAMES)}


def test_the_context_pass_sees_the_first_pass_on_the_neighbours_and_containers() -> None:
    c = _context_of([1.0, 0.0, 1.0, 0.0, 0.0], [0, 0, 0, 1, -1], [2, 2, 2, 2, -1])
    assert c["first_prev"].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert c["first_next"].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    assert c["first_between"][1] == 1.0 and c["first_between"][3] == 0.0  # inside a region
    assert c["first_parent"][:3] == pytest.approx([2 / 3] * 3)  # blocks 0-2 share container 0
    assert c["first_parent"][3] == 0.0 and c["first_parent"][4] == 0.0  # alone: its own
    assert c["first_grandparent"][:4] == pytest.approx([0.5] * 4)
    assert c["first_page_main_share"][0] == pytest.approx(0.4)
    assert c["first_win3"][1] == pytest.approx(2 / 3)
    assert c["first_signature"].tolist() == [1.0, 0.0, 1.0, 0.0, 0.0]  # unplaced: its own
    assert c["signature_text_share"] == pytest.approx([0.2] * 5)


def test_the_context_pass_averages_over_the_blocks_of_one_signature() -> None:
    c = _context_of([0.9, 0.2, 0.4, 0.0], [0, 0, 1, 1], [-1, -1, -1, -1], [7, 3, 7, 7])
    assert c["first_signature"][[0, 2, 3]] == pytest.approx([1.3 / 3] * 3)
    assert c["first_signature"][1] == pytest.approx(0.2)
    assert c["signature_text_share"] == pytest.approx([0.75, 0.25, 0.75, 0.75])


def test_blocks_of_one_tag_and_class_path_share_a_signature_whatever_their_numbers() -> None:
    html = (
        '<div class="body"><p _item_id="1">a</p><p _item_id="2">b</p></div>'
        '<div class="post-12"><p _item_id="3">c</p></div>'
        '<div class="post-7"><p _item_id="4">d</p><p class="x" _item_id="5">e</p></div>'
        '<ul class="body"><li _item_id="6">f</li></ul>'
    )
    blocks = ["<p>a</p>", "<p>b</p>", "<p>c</p>", "<p>d</p>", '<p class="x">e</p>', "<li>f</li>"]
    signature = block_features(html, blocks).signature
    assert signature[0] == signature[1] and signature[2] == signature[3]
    assert len({signature[0], signature[2], signature[4], signature[5]}) == 4


def test_a_block_in_a_repeated_card_knows_the_cards_group() -> None:
    cards = "".join(
        f'<li class="product-{i}"><p _item_id="{2 * i + 2}">name {i}</p>'
        f'<p _item_id="{2 * i + 3}">$1{i}.00</p></li>'
        for i in range(4)
    )
    menu = "".join(f'<li class="menu"><a _item_id="{i + 10}">m</a></li>' for i in range(3))
    html = f'<p _item_id="1">intro</p><ul class="grid">{cards}</ul><ul>{menu}</ul>'
    blocks = ["<p>intro</p>"]
    for i in range(4):
        blocks += [f"<p>name {i}</p>", f"<p>$1{i}.00</p>"]
    blocks += ['<a href="/">m</a>'] * 3
    X = matrix_array(block_features(html, blocks).matrix, N_FEATURES)
    column = {name: X[:, FEATURE_NAMES.index(name)] for name in FEATURE_NAMES}
    assert column["card_repeat"][1:9] == pytest.approx([np.log1p(4)] * 8)
    assert column["card_blocks"][1:9] == pytest.approx([2.0] * 8)
    assert column["card_top"][1:9].tolist() == [1.0] * 8
    text = sum(len(f"name{i}$1{i}.00") for i in range(4))  # visible characters
    total = text + len("intro") + 3
    assert column["card_text_share"][1] == pytest.approx(text / total)
    assert column["card_link_share"][1] == 0.0
    # the intro sits in no card; a menu's one-link items are not cards
    for name in ("card_repeat", "card_blocks", "card_top"):
        assert column[name][0] == 0.0 and column[name][9:].tolist() == [0.0] * 3


def test_block_features_place_each_block_under_its_containers(page: SimplifiedPage) -> None:
    features = block_features(page.simplified_html, page.mapping_blocks, page.title)
    again = page_features(page.simplified_html, page.mapping_blocks, page.title)
    assert features.matrix.tobytes() == again.tobytes()
    assert (
        len(features.parent)
        == len(features.grandparent)
        == len(features.signature)
        == page.block_count
    )
    assert any(p >= 0 for p in features.parent)
    assert all(g <= max(features.parent) for g in features.grandparent)


def test_training_every_pass_is_reproducible(data_dir: Path) -> None:
    pages = prepare_pages(load_rows(data_dir / "articles_dev.jsonl")[:24], "articles_dev")
    first, again = fit_model(pages, seed=3, num_trees=5), fit_model(pages, seed=3, num_trees=5)
    assert first.booster.model == again.booster.model
    assert len(first.context_boosters) == CONTEXT_PASSES
    assert [b.model for b in first.context_boosters] == [b.model for b in again.context_boosters]
    probabilities = np.array(first.predict(pages[0].page_features))
    assert (
        probabilities.shape == (len(pages[0].y),)
        and ((probabilities >= 0) & (probabilities <= 1)).all()
    )


def test_each_context_pass_reads_the_context_of_every_pass_before_it(data_dir: Path) -> None:
    pages = prepare_pages(load_rows(data_dir / "articles_dev.jsonl")[:24], "articles_dev")
    model = fit_model(pages, seed=3, num_trees=5, context_trees=5, context_passes=2)

    def names(booster: Booster) -> list[str]:
        line = next(x for x in booster.model.splitlines() if x.startswith("feature_names="))
        return line.split("=", 1)[1].split()

    second, third = model.context_boosters
    assert names(model.booster) == list(FEATURE_NAMES)
    assert names(second) == [*FEATURE_NAMES, *CONTEXT_NAMES]
    assert names(third) == [*FEATURE_NAMES, *CONTEXT_NAMES, *(f"{n}_pass2" for n in CONTEXT_NAMES)]
    # The chain's answer is the third pass's, on the columns the two passes before it give.
    features = pages[0].page_features
    p1 = model.booster.predict(features.matrix, N_FEATURES)
    c1 = context_features(p1, features)
    p2 = second.predict(stacked_rows(features.matrix, [c1]), N_FEATURES + len(CONTEXT_NAMES))
    c2 = context_features(p2, features)
    p3 = third.predict(stacked_rows(features.matrix, [c1, c2]), N_FEATURES + 2 * len(CONTEXT_NAMES))
    assert model.predict(features) == p3 != p2


def test_a_model_file_with_one_context_pass_still_loads(tmp_path: Path) -> None:
    model = LearnedModel.load()
    document = json.loads(default_model_path().read_text())
    document["lightgbm_context"] = document["lightgbm_context"][0]  # one pass, as a string
    (tmp_path / "one.json").write_text(json.dumps(document))
    one = LearnedModel.load(tmp_path / "one.json")
    assert [b.model for b in one.context_boosters] == [model.context_boosters[0].model]


def test_every_page_weighs_the_same_in_training_and_text_decides_within_a_page(
    data_dir: Path,
) -> None:
    pages = prepare_pages(load_rows(data_dir / "articles_dev.jsonl")[:6], "articles_dev")
    assert len({len(page.y) for page in pages}) > 1  # pages of different sizes
    log_text = FEATURE_NAMES.index("log_text")
    for page in pages:
        assert page.weight.sum() == pytest.approx(PAGE_WEIGHT)
        order = np.argsort(page.X[:, log_text], kind="stable")
        assert (np.diff(page.weight[order]) >= 0).all()  # more text, never less weight
        assert page.weight.min() > 0


def test_numpy_sums_and_interpolation_are_matched_to_the_last_bit() -> None:
    # The features and the confidence add in numpy's order, so training (numpy) and
    # serving (plain Python) see the same values.
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 8, 9, 17, 128, 129, 300, 1000):
        values = (rng.exponential(size=n) * rng.choice([1e-3, 1.0, 1e3], size=n)).tolist()
        assert pairwise_sum(values) == float(np.sum(values))
        assert pairwise_sum(values, 3, max(n - 5, 0)) == float(
            np.sum(values[3 : 3 + max(n - 5, 0)])
        )
    xs = sorted(set(rng.random(40).tolist()))
    ys = sorted(rng.random(len(xs)).tolist())
    for x in [-1.0, xs[0], xs[-1], 2.0, *rng.random(200).tolist()]:
        assert interpolate(x, xs, ys) == float(np.interp(x, xs, ys))
