"""The second opinion: on pages the learned labeller is unsure of, trafilatura also runs
and its Markdown replaces ours only where the rule in the model file prefers it."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import trafilatura

from dripstream.processors.errors import NothingSelected
from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.learned import LearnedLabeller, LearnedModel, SecondOpinion
from dripstream.processors.pipeline import (
    SECOND_OPINION,
    PipelineSettings,
    extract_pages,
    fallback_page,
    reconstruct_page,
    simplify_page,
)
from dripstream.processors.training.train import (
    MAX_ASKED,
    NEVER_ASK,
    SECOND_OPINION_BASELINE,
    PageResult,
    baseline_results,
    fit_second_opinion,
    load_rows,
    prepare_pages,
    with_second_opinion,
)
from dripstream.topics.records import (
    MAIN,
    OTHER,
    FallbackRequest,
    LabelledPage,
    PageRecord,
    RawPage,
)

ARTICLE = (
    "<html><head><title>Tides</title></head><body><nav><a href='/'>Home</a></nav>"
    "<article><h1>Tides</h1>"
    + "".join(
        f"<p>Paragraph {i}: the tide comes in twice a day along this coast, and the harbour "
        "master posts the times on the board by the pier every morning.</p>"
        for i in range(6)
    )
    + "</article><footer><p>Contact the harbour office for permits.</p></footer></body></html>"
)
RAW = raw_page_from_row({"url": "https://harbour.example/tides", "html": ARTICLE})
RULE = SecondOpinion(replace_below=0.5, compare_below=0.8, longer_ratio=1.5)


def test_the_rule_asks_for_a_second_opinion_only_below_its_thresholds() -> None:
    assert RULE.ratio(0.3) == 0.0
    assert RULE.ratio(0.6) == 1.5
    assert RULE.ratio(0.9) is None


def _labelled(second_opinion: float | None, main_blocks: int) -> LabelledPage:
    page = simplify_page(RAW, PipelineSettings())
    labels = [MAIN if i < main_blocks else OTHER for i in range(page.block_count)]
    return LabelledPage(
        page_id=page.page_id,
        url=page.url,
        title=page.title,
        mapping_blocks=page.mapping_blocks,
        labels=labels,
        labeller="learned",
        token_count=page.token_count,
        second_opinion=second_opinion,
    )


def test_a_sure_page_is_its_record_at_once() -> None:
    assert isinstance(reconstruct_page(_labelled(None, 3)), PageRecord)


def test_an_unsure_page_goes_to_the_fallback_with_its_record_as_candidate() -> None:
    request = reconstruct_page(_labelled(1.5, 3))
    assert isinstance(request, FallbackRequest) and request.reason == SECOND_OPINION
    assert request.candidate is not None and request.candidate.extractor == "dripper:learned"
    assert request.second_opinion == 1.5
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=FallbackRequest)
    assert decoded == request  # it travels on the fallback topic


def test_the_fallback_replaces_a_short_candidate_and_keeps_a_long_one() -> None:
    short = reconstruct_page(_labelled(1.5, 2))  # the title and one paragraph
    record = fallback_page(short, RAW)
    assert record.extractor == "fallback:trafilatura" and record.fallback_reason == SECOND_OPINION
    full = reconstruct_page(_labelled(1.5, 7))  # every paragraph: trafilatura is not longer
    kept = fallback_page(full, RAW)
    assert kept.extractor == "dripper:learned" and kept.markdown == full.candidate.markdown
    assert "second_opinion" in kept.timings_ms


def test_ratio_zero_prefers_the_fallback_whenever_it_finds_something() -> None:
    request = reconstruct_page(_labelled(0.0, 7))
    assert fallback_page(request, RAW).extractor == "fallback:trafilatura"


def test_the_second_opinion_runs_trafilaturas_fast_mode_and_the_fallback_its_full_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    modes = []
    extract = trafilatura.extract

    def recording(*args, **kwargs):
        modes.append(kwargs.get("fast"))
        return extract(*args, **kwargs)

    monkeypatch.setattr(trafilatura, "extract", recording)
    request = reconstruct_page(_labelled(0.0, 7))
    assert fallback_page(request, RAW).extractor == "fallback:trafilatura"
    fallback_page(msgspec.structs.replace(request, candidate=None), RAW)
    assert modes == [True, False]


def test_the_candidate_stands_when_the_fallback_finds_nothing() -> None:
    request = reconstruct_page(_labelled(0.0, 7))
    empty = RawPage(
        url=RAW.url,
        html=b"<html><head><title>x</title></head><body><script>1</script></body></html>",
    )
    kept = fallback_page(request, empty)
    assert kept.extractor == "dripper:learned" and kept.markdown == request.candidate.markdown
    with pytest.raises(NothingSelected):
        fallback_page(msgspec.structs.replace(request, candidate=None), empty)


@pytest.mark.parametrize("switch", ["0", "off", "false", "no", "OFF"])
def test_a_model_rule_serves_unless_the_switch_turns_it_off(switch: str) -> None:
    from dripstream.streams.settings import StreamSettings

    model = LearnedModel.load()
    model.second_opinion = SecondOpinion(replace_below=0.6, compare_below=0.7, longer_ratio=1.5)
    assert LearnedLabeller(model).second_opinion == model.second_opinion
    options = StreamSettings.from_env({"DRIPSTREAM_SECOND_OPINION": switch}).labeller_options()
    assert LearnedLabeller(model, options=options).second_opinion is None


def test_the_pipeline_serves_unsure_pages_through_the_second_opinion() -> None:
    always = LearnedModel.load()
    always.second_opinion = SecondOpinion(replace_below=2.0, compare_below=2.0, longer_ratio=0)
    [outcome] = extract_pages([RAW], LearnedLabeller(always), PipelineSettings())
    assert outcome.status == "fallback" and outcome.reason == SECOND_OPINION
    assert outcome.record is not None and outcome.record.fallback_reason == SECOND_OPINION
    always.second_opinion = SecondOpinion(replace_below=0, compare_below=2.0, longer_ratio=99)
    [kept] = extract_pages([RAW], LearnedLabeller(always), PipelineSettings())
    assert kept.status == "ok" and kept.record.extractor == "dripper:learned"


def _result(file: str, page: str, extractor: str, score: float, words: int, raw: float):
    return PageResult(
        file, page, f"site-{page}", "article", extractor, score, score, score, None, None,
        None, raw, raw, "dripper:learned" if extractor == "learned" else None, words,
    )  # fmt: skip


def test_without_fallback_results_the_fitted_rule_never_asks() -> None:
    results = [_result("f", str(i), "learned", 0.5, 50, 0.3) for i in range(10)]
    rule, _ = fit_second_opinion(results)
    assert rule == NEVER_ASK and rule.ratio(0.0) is None


def test_the_fitted_rule_asks_on_no_more_pages_than_its_budget() -> None:
    """Unsure pages (raw 0.61: 4% of the pages, raw 0.75: 6% more) all gain from the
    fallback, but asking on all of them is over the budget: the rule asks on the least sure
    only; without the budget it asks on both."""
    results = []
    for i in range(200):
        raw = 0.61 if i < 8 else 0.75 if i < 20 else 0.97
        ours, theirs = (0.3, 0.9) if raw < 0.9 else (0.9, 0.8)
        results.append(_result("f", str(i), "learned", ours, 50, raw))
        results.append(_result("f", str(i), SECOND_OPINION_BASELINE, theirs, 200, 0.0))
    rule, _ = fit_second_opinion(results)
    assert MAX_ASKED * 200 >= 8
    assert rule.ratio(0.61) is not None and rule.ratio(0.75) is None and rule.ratio(0.97) is None
    unbounded, _ = fit_second_opinion(results, max_asked=1.0)
    assert unbounded.ratio(0.75) is not None and unbounded.ratio(0.97) is None


def test_the_fitted_rule_takes_the_fallback_where_it_wins_on_held_out_pages() -> None:
    results = []
    for i in range(40):
        unsure = i % 2 == 0  # unsure pages: ours is short and poor, the fallback's good
        ours, raw, theirs_words = (0.3, 0.5, 200) if unsure else (0.9, 0.95, 60)
        results.append(_result("f", str(i), "learned", ours, 50, raw))
        results.append(_result("f", str(i), SECOND_OPINION_BASELINE, 0.8, theirs_words, 0.0))
    rule, check = fit_second_opinion(results, max_asked=1.0)
    assert rule.ratio(0.5) is not None and rule.ratio(0.95) is None
    assert check["ships"] and check["held_out_gain"]["f"] > 0
    served = with_second_opinion(results, rule)
    assert sum(r.word_f1 for r in served) / len(served) == pytest.approx(0.85)


def _paired(pages: dict[str, list[tuple[float, float, float]]]) -> list[PageResult]:
    """Ten copies of each file's (raw confidence, our score, the fallback's score) pages,
    ours of 50 words, the fallback's of 200."""
    results = []
    for file, rows in pages.items():
        for copy in range(10):
            for n, (raw, ours, theirs) in enumerate(rows):
                page = f"{file}{copy}-{n}"
                results.append(_result(file, page, "learned", ours, 50, raw))
                results.append(_result(file, page, SECOND_OPINION_BASELINE, theirs, 200, 0.0))
    return results


def test_the_fitted_rule_lifts_a_group_from_behind_the_fallback() -> None:
    """On unsure pages (raw 0.85) the fallback is better in file a and worse in file b.
    Not asking keeps b further ahead; asking lifts a from behind the fallback to ahead of
    it: the rule asks, since each group's lead is a target of its own."""
    pages = {
        "a": [(0.85, 0.5, 0.9), (0.97, 0.9, 0.6)],  # (raw, ours, the fallback's)
        "b": [(0.85, 0.9, 0.7), (0.97, 0.9, 0.9)],
    }
    rule, _ = fit_second_opinion(_paired(pages), max_asked=1.0)
    assert rule.ratio(0.85) is not None and rule.ratio(0.97) is None


def test_a_rule_that_loses_on_the_sites_it_was_not_fitted_on_never_asks() -> None:
    """As above, but asking costs file b more (0.6 a page) than it gives file a (0.4):
    fitted on half the sites, the rule loses on the other half on average, so the model
    ships without it, and the check says what the fit chose and why it did not ship."""
    pages = {
        "a": [(0.85, 0.5, 0.9), (0.97, 0.9, 0.6)],  # (raw, ours, the fallback's)
        "b": [(0.85, 0.9, 0.3), (0.97, 0.9, 0.9)],
    }
    rule, check = fit_second_opinion(_paired(pages), max_asked=1.0)
    assert rule == NEVER_ASK
    assert check["rule"]["replace_below"] > 0.85 or check["rule"]["compare_below"] > 0.85
    gain = check["held_out_gain"]
    assert gain["a"] > 0 > gain["b"] and gain["a"] + gain["b"] < 0
    assert not check["ships"]


def test_once_every_group_is_safely_ahead_the_rule_maximises_the_mean_lead() -> None:
    """Asking on unsure pages (raw 0.85) would lift file a's lead from 0.025 to 0.05 but
    drop file b's from 0.35 to 0.05. Both choices keep every group MIN_LEAD ahead, so the
    rule does not ask: maximin would, at a cost of 0.3 to b for 0.025 to a."""
    pages = {
        "a": [(0.85, 0.8, 0.85), (0.97, 0.9, 0.8)],  # (raw, ours, the fallback's)
        "b": [(0.85, 0.9, 0.3), (0.97, 0.9, 0.8)],
    }
    rule, _ = fit_second_opinion(_paired(pages), max_asked=1.0)
    assert rule.ratio(0.85) is None and rule.ratio(0.97) is None


def test_the_rule_keeps_groups_ahead_of_the_full_fallback_not_of_the_second_opinion() -> None:
    """The second opinion runs trafilatura's fast mode, the targets are set against the
    fallback's full run. In file a, the full run is better than the fast one: measured
    against the fast run, not asking keeps both files ahead (the rule does not ask, as b
    loses by asking); against the full run, a is behind unless the rule asks."""
    pages = {  # (raw, ours, the fast run's, the full run's)
        "a": [(0.85, 0.5, 0.8, 0.95), (0.97, 0.9, 0.5, 0.7)],
        "b": [(0.85, 0.9, 0.85, 0.85), (0.97, 0.9, 0.9, 0.9)],
    }
    fast_only, with_full = [], []
    for file, rows in pages.items():
        for copy in range(10):
            for n, (raw, ours, fast, full) in enumerate(rows):
                page = f"{file}{copy}-{n}"
                fast_only.append(_result(file, page, "learned", ours, 50, raw))
                fast_only.append(_result(file, page, SECOND_OPINION_BASELINE, fast, 200, 0.0))
                with_full.append(_result(file, page, "trafilatura", full, 200, 0.0))
    rule, _ = fit_second_opinion(fast_only, max_asked=1.0)
    assert rule.ratio(0.85) is None
    rule, _ = fit_second_opinion(fast_only + with_full, max_asked=1.0)
    assert rule.ratio(0.85) is not None and rule.ratio(0.97) is None
    served = with_second_opinion(fast_only + with_full, rule)
    assert {r.word_f1 for r in served if r.id.endswith("-0")} == {0.8, 0.85}  # the fast runs


def test_baseline_outputs_are_cached_and_the_cache_is_only_ever_replaced_whole(
    data_dir: Path, tmp_path: Path
) -> None:
    pages = prepare_pages(load_rows(data_dir / "articles_dev.jsonl")[:2], "articles_dev")
    first = baseline_results(pages, True, tmp_path, (SECOND_OPINION_BASELINE,))
    cache = tmp_path / "baselines.json"
    written = cache.stat().st_mtime_ns
    assert baseline_results(pages, True, tmp_path, (SECOND_OPINION_BASELINE,)) == first
    assert cache.stat().st_mtime_ns == written  # nothing new to cache: left as it was
    assert [path.name for path in tmp_path.iterdir()] == ["baselines.json"]
    assert len(json.loads(cache.read_text())) == 2
