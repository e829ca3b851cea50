"""The CPU labellers: oracle (annotation marks), heuristic, and fallback-only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dripstream.processors.errors import NotAnnotated
from dripstream.processors.extract.fallback import EXTRACTOR as FALLBACK_EXTRACTOR
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.fallback_only import FallbackOnlyLabeller
from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.pipeline import Outcome, PipelineSettings, extract_pages, simplify_page
from dripstream.processors.training.annotations import strip_annotation_marks
from dripstream.processors.training.oracle import OracleLabeller
from dripstream.topics.records import MAIN, OTHER, RawPage, SimplifiedPage, page_id

ANNOTATION_MARKS = ("cc-select", "mark-selected", "data-anno-uid", "cc-extraStyle", "marked-text")
SETTINGS = PipelineSettings()


@pytest.fixture(scope="module")
def rows(data_dir: Path) -> list[dict]:
    with open(data_dir / "webmainbench_sample.jsonl", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def raws(rows: list[dict]) -> list[RawPage]:
    return [
        RawPage(url=row["url"], html=strip_annotation_marks(row["html"]).encode("utf-8"))
        for row in rows
    ]


@pytest.fixture(scope="module")
def simplified(raws: list[RawPage]) -> list[SimplifiedPage]:
    pages = [simplify_page(raw, SETTINGS) for raw in raws]
    assert all(isinstance(page, SimplifiedPage) for page in pages)
    return pages  # type: ignore[return-value]


@pytest.fixture(scope="module")
def oracle(rows: list[dict], raws: list[RawPage]) -> OracleLabeller:
    labeller = OracleLabeller()
    for row, raw in zip(rows, raws, strict=True):
        labeller.read_annotations(page_id(raw.url, raw.html), row["html"])
    return labeller


def _labellers(oracle: OracleLabeller) -> list[Labeller]:
    return [oracle, HeuristicLabeller(), FallbackOnlyLabeller()]


@pytest.fixture(scope="module")
def outcomes(oracle: OracleLabeller, raws: list[RawPage]) -> dict[str, list[Outcome]]:
    return {
        labeller.name: extract_pages(raws, labeller, SETTINGS) for labeller in _labellers(oracle)
    }


def _simplified_page(html: str, url: str = "https://example.com/a") -> SimplifiedPage:
    page = simplify_page(RawPage(url=url, html=html.encode("utf-8")), SETTINGS)
    assert isinstance(page, SimplifiedPage)
    return page


# -- oracle -----------------------------------------------------------------------------------


def test_sample_pages_carry_annotations(rows: list[dict]) -> None:
    assert len(rows) == 9
    assert all("cc-select" in row["html"] for row in rows)


def test_oracle_refuses_an_unannotated_page() -> None:
    with pytest.raises(NotAnnotated):
        OracleLabeller().read_annotations("p1", "<html><body><p>plain</p></body></html>")


def test_oracle_refuses_a_page_it_has_not_read() -> None:
    page = _simplified_page("<p>some text</p>")
    with pytest.raises(NotAnnotated):
        OracleLabeller().label([page])


def test_oracle_labels_align_with_the_stripped_pages(
    oracle: OracleLabeller, simplified: list[SimplifiedPage]
) -> None:
    results = oracle.label(simplified)
    assert len(results) == len(simplified)
    for page, result in zip(simplified, results, strict=True):
        assert result.labels is not None, page.url
        assert len(result.labels) == page.block_count
        assert set(result.labels) <= {MAIN, OTHER}
        assert MAIN in result.labels, page.url


def test_oracle_reports_a_segmentation_mismatch_as_a_failure() -> None:
    oracle = OracleLabeller()
    page = _simplified_page("<p>one</p><p>two</p>")
    oracle.read_annotations(page.page_id, '<p cc-select="true">one</p>')
    [result] = oracle.label([page])
    assert result.labels is None
    assert result.failure == "label_mismatch"


def test_oracle_labels_marked_blocks_main() -> None:
    annotated = '<p>menu</p><div cc-select="true"><p>body one</p><p>body two</p></div><p>foot</p>'
    stripped = strip_annotation_marks(annotated)
    page = _simplified_page(stripped)
    oracle = OracleLabeller()
    oracle.read_annotations(page.page_id, annotated)
    [result] = oracle.label([page])
    assert result.labels == [OTHER, MAIN, MAIN, OTHER]


def test_every_oracle_page_succeeds_end_to_end(outcomes: dict[str, list[Outcome]]) -> None:
    assert [outcome.status for outcome in outcomes["oracle"]] == ["ok"] * 9


# -- no annotation leaks ----------------------------------------------------------------------


@pytest.mark.parametrize("mark", ANNOTATION_MARKS)
def test_no_annotation_mark_reaches_simplified_or_mapping(
    simplified: list[SimplifiedPage], mark: str
) -> None:
    for page in simplified:
        assert mark not in page.simplified_html, page.url
        assert all(mark not in block for block in page.mapping_blocks), page.url


@pytest.mark.parametrize("labeller", ["oracle", "heuristic", "fallback"])
def test_no_annotation_mark_reaches_the_markdown(
    outcomes: dict[str, list[Outcome]], labeller: str
) -> None:
    for outcome in outcomes[labeller]:
        assert outcome.record is not None, outcome
        assert outcome.record.markdown
        for mark in ANNOTATION_MARKS:
            assert mark not in outcome.record.markdown, (labeller, outcome.record.url, mark)


def test_stripping_removes_every_annotation_mark(rows: list[dict]) -> None:
    for row in rows:
        stripped = strip_annotation_marks(row["html"])
        assert all(mark not in stripped for mark in ANNOTATION_MARKS), row["id"]


# -- heuristic --------------------------------------------------------------------------------

PARAGRAPHS = [
    "The committee met on Tuesday to discuss the new budget for the coming year, and after a "
    "long debate the members agreed to raise spending on schools and public libraries.",
    "Critics argued that the plan would require higher taxes, but supporters pointed out that "
    "the city had run a surplus for three consecutive years and could afford the investment.",
    "The mayor said she would sign the budget next week, once the final figures have been "
    "checked by the finance office and published for residents to read and comment on.",
    "Local teachers welcomed the decision, saying that many classrooms still lack basic "
    "equipment and that the extra money would make a real difference to their pupils.",
]
HEURISTIC_PAGE = f"""<html><head><title>Budget</title></head><body>
<div class="top-links"><ul>
  <li><a href="/">Home</a></li><li><a href="/news">News</a></li>
  <li><a href="/sport">Sport</a></li><li><a href="/weather">Weather</a></li></ul></div>
<div class="layout">
  <div class="article-body">
    <h1>City approves new budget</h1>
    {"".join(f"<p>{text}</p>" for text in PARAGRAPHS)}
  </div>
  <div class="related-links"><h3>Related stories</h3><ul>
    <li><a href="/1">Council elections set for spring</a></li>
    <li><a href="/2">Library opening hours extended</a></li>
    <li><a href="/3">New bus routes announced today</a></li></ul></div>
</div>
<div class="page-bottom"><ul><li><a href="/privacy">Privacy policy</a></li>
  <li><a href="/terms">Terms of use</a></li><li><a href="/contact">Contact us</a></li></ul>
  <p><a href="/about">About this site</a></p></div>
</body></html>"""


def test_heuristic_labels_paragraphs_main_and_link_lists_other() -> None:
    page = _simplified_page(HEURISTIC_PAGE)
    [result] = HeuristicLabeller().label([page])
    assert result.labels is not None
    assert len(result.labels) == page.block_count
    labelled = dict(zip(page.mapping_blocks, result.labels, strict=True))
    for text in PARAGRAPHS:
        [block] = [block for block in labelled if text[:40] in block]
        assert labelled[block] == MAIN, block
    link_blocks = [block for block in labelled if "<a " in block]
    assert len(link_blocks) >= 3
    for block in link_blocks:
        assert labelled[block] == OTHER, block


def test_heuristic_end_to_end_gives_the_article() -> None:
    raw = RawPage(url="https://example.com/budget", html=HEURISTIC_PAGE.encode("utf-8"))
    [outcome] = extract_pages([raw], HeuristicLabeller(), SETTINGS)
    assert outcome.status == "ok"
    assert outcome.record is not None
    markdown = outcome.record.markdown
    assert all(text in markdown for text in PARAGRAPHS)
    for link_text in ("Council elections", "Privacy policy", "Weather"):
        assert link_text not in markdown


def test_heuristic_returns_one_outcome_per_page() -> None:
    pages = [_simplified_page(HEURISTIC_PAGE), _simplified_page("<p>short</p>")]
    results = HeuristicLabeller().label(pages)
    assert [len(result.labels or []) for result in results] == [p.block_count for p in pages]


# -- fallback only ----------------------------------------------------------------------------


def test_fallback_only_labels_nothing(simplified: list[SimplifiedPage]) -> None:
    results = FallbackOnlyLabeller().label(simplified)
    assert len(results) == len(simplified)
    assert all(result.labels is None and result.failure == "fallback_only" for result in results)


def test_fallback_only_routes_every_page_to_the_fallback_extractor(
    outcomes: dict[str, list[Outcome]],
) -> None:
    for outcome in outcomes["fallback"]:
        assert outcome.status == "fallback"
        assert outcome.reason == "fallback_only"
        assert outcome.record is not None
        assert outcome.record.extractor == FALLBACK_EXTRACTOR
        assert outcome.record.fallback_reason == "fallback_only"
