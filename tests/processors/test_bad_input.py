"""Hostile and broken input through the whole pipeline: every page gets one classified outcome."""

from __future__ import annotations

import random
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from dripstream.processors.extract.simplify import SimplifyConfig, simplify
from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.pipeline import Outcome, PipelineSettings, extract_pages
from dripstream.topics.records import RawPage

LABELLER = HeuristicLabeller()
SETTINGS = PipelineSettings()
STATUSES = {"ok", "fallback", "error"}

PARAGRAPH = (
    "<p>Paragraph {i} of the story holds enough ordinary words to count as the main "
    "content of this page, with a few more words for good measure.</p>"
)
ARTICLE = (
    "<!DOCTYPE html><html><head><title>Story</title></head><body><nav><a href='/'>Home</a>"
    "</nav><article><h1>The story</h1>"
    + "".join(PARAGRAPH.format(i=i) for i in range(12))
    + "</article><footer>footer</footer></body></html>"
)


def run_one(html: bytes, pipeline: PipelineSettings = SETTINGS, **fields: object) -> Outcome:
    outcomes = extract_pages(
        [RawPage(url="https://example.com/page", html=html, **fields)],  # type: ignore[arg-type]
        LABELLER,
        pipeline,
    )
    assert len(outcomes) == 1
    return outcomes[0]


def assert_error(outcome: Outcome, error_class: str, reason: str) -> None:
    assert outcome.status == "error", outcome
    assert outcome.error_class == error_class
    assert outcome.reason == reason
    assert outcome.record is None
    assert outcome.message


def assert_served(outcome: Outcome) -> str:
    assert outcome.status in ("ok", "fallback"), outcome
    assert outcome.record is not None
    assert outcome.record.markdown.strip()
    return outcome.record.markdown


# -- explicit cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("html", [b"", b" \r\n\t "], ids=["empty", "whitespace"])
def test_empty_page_is_empty_document(html: bytes) -> None:
    assert_error(run_one(html), "EmptyDocument", "empty_document")


@pytest.mark.parametrize(
    "html",
    [
        b'{"title": "<h1>x</h1>", "body": "<p>text</p>", "n": [1, 2]}',
        b'[{"html": "<div>x</div>"}]',
    ],
    ids=["object", "array"],
)
def test_json_is_not_html(html: bytes) -> None:
    assert_error(run_one(html), "NotHtml", "not_html")


def test_pdf_is_not_html() -> None:
    pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
    assert_error(run_one(pdf * 20), "NotHtml", "not_html")


def test_png_is_not_html() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + random.Random(1).randbytes(2000)
    assert_error(run_one(png), "NotHtml", "not_html")


@pytest.mark.parametrize("seed", range(3))
def test_random_binary_is_not_html(seed: int) -> None:
    data = random.Random(seed).randbytes(20_000)
    assert_error(run_one(data), "NotHtml", "not_html")


def test_html_with_image_content_type_is_not_html() -> None:
    outcome = run_one(ARTICLE.encode(), content_type="image/jpeg")
    assert_error(outcome, "NotHtml", "not_html")


def test_50_mb_page_is_too_large() -> None:
    html = b"<html><body>" + b"<p>hello world</p>" * (50 * 1024 * 1024 // 18) + b"</body></html>"
    assert len(html) >= 50 * 1024 * 1024
    assert_error(run_one(html), "TooLarge", "too_large")


def test_100000_nested_divs_are_too_deep_and_refused_fast() -> None:
    html = b"<html><body>" + b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000 + b"</body></html>"
    started = time.perf_counter()
    outcome = run_one(html)
    assert time.perf_counter() - started < 2.0
    assert_error(outcome, "TooDeep", "too_deep")


def test_nesting_past_the_walk_limit_is_too_deep() -> None:
    # Deep enough for the walker's max_depth, shallow enough to pass the pre-parse check.
    html = b"<body>" + b"<section>" * 400 + b"text" + b"</section>" * 400 + b"</body>"
    assert_error(run_one(html), "TooDeep", "too_deep")


@pytest.mark.slow
def test_a_million_tiny_elements_are_too_many() -> None:
    html = b"<html><body>" + b"<b></b>" * 1_000_000 + b"</body></html>"
    assert_error(run_one(html), "TooManyElements", "too_many_elements")


def test_truncated_document_is_served() -> None:
    cut = ARTICLE.encode()[: len(ARTICLE) * 2 // 3]
    assert not cut.endswith(b"</html>")
    markdown = assert_served(run_one(cut))
    assert "Paragraph 0 of the story" in markdown


def test_document_cut_inside_a_tag_is_served() -> None:
    html = ARTICLE.encode()
    cut = html[: html.index(b"<p>", len(html) // 2) + 2]  # ends with "<p"
    markdown = assert_served(run_one(cut))
    assert "Paragraph 1 of the story" in markdown


@pytest.mark.parametrize(
    ("html", "fields"),
    [
        (ARTICLE.replace("<head>", '<head><meta charset="utf-16">').encode("ascii"), {}),
        (
            ARTICLE.replace("<head>", '<head><meta charset="utf-8">')
            .replace("story", "störy café")
            .encode("latin-1"),
            {},
        ),
        (ARTICLE.encode("utf-8"), {"charset": "utf-32"}),
        (ARTICLE.encode("utf-8"), {"charset": "utf-16"}),
        (ARTICLE.encode("utf-8"), {"charset": "no-such-charset"}),
        (ARTICLE.replace("story", "история").encode("utf-8"), {"charset": "iso-8859-1"}),
    ],
    ids=[
        "meta-utf16-ascii",
        "meta-utf8-latin1",
        "hint-utf32",
        "hint-utf16",
        "hint-unknown",
        "hint-latin1",
    ],
)
def test_wrong_or_lying_charset_is_not_an_error(html: bytes, fields: dict[str, str]) -> None:
    markdown = assert_served(run_one(html, **fields))
    assert "Paragraph 2 of the" in markdown


def test_meta_utf8_over_latin1_bytes_keeps_the_ascii_text() -> None:
    html = (
        ARTICLE.replace("<head>", '<head><meta charset="utf-8">')
        .replace("story", "störy")
        .encode("latin-1")
    )
    markdown = assert_served(run_one(html))
    assert "Paragraph 3 of the st\ufffdry" in markdown


def test_slow_simplification_times_out() -> None:
    body = "".join(f"<div><p>text {i} <b>bold</b></p></div>" for i in range(7000))
    html = f"<html><body>{body}</body></html>".encode()
    pipeline = PipelineSettings(simplify=SimplifyConfig(timeout_s=0.0005))
    assert_error(run_one(html, pipeline), "PageTimeout", "timeout")


def test_page_without_blocks_goes_to_fallback_and_errors_when_it_finds_nothing() -> None:
    outcome = run_one(b"<html><head><title>t</title></head><body><div></div></body></html>")
    assert outcome.status == "error"
    assert outcome.error_class == "NothingSelected"
    assert outcome.message and outcome.message.startswith("no_blocks")


def test_a_batch_keeps_one_outcome_per_page_in_order() -> None:
    pages = [b"", ARTICLE.encode(), b"%PDF-1.4", b"<div>" * 10_000, ARTICLE.encode()[:900]]
    outcomes = extract_pages(
        [RawPage(url=f"https://e.com/{i}", html=html) for i, html in enumerate(pages)],
        LABELLER,
        SETTINGS,
    )
    assert [outcome.status for outcome in outcomes] == ["error", "ok", "error", "error", "ok"]
    assert [outcome.reason for outcome in outcomes][:4] == [
        "empty_document",
        None,
        "not_html",
        "too_deep",
    ]


# -- properties -------------------------------------------------------------------------------

TAGS = [
    "html", "head", "body", "title", "div", "p", "span", "a", "b", "i", "em", "strong", "ul",
    "ol", "li", "table", "tr", "td", "th", "tbody", "h1", "h2", "h3", "pre", "code", "img",
    "br", "hr", "article", "section", "header", "footer", "nav", "aside", "main", "script",
    "style", "math", "mi", "annotation", "blockquote", "figure", "noscript", "template",
    "svg", "form", "input", "select", "option", "iframe", "dl", "dt", "dd", "caption",
]  # fmt: skip
ATTRIBUTES = st.sampled_from(
    [
        'class="content"',
        "class='nav menu'",
        'id="main"',
        "hidden",
        'aria-hidden="true"',
        'style="display:none"',
        'href="/x?a=1&amp;b=2"',
        'href="javascript:alert(1)"',
        'src="data:image/png;base64,AA"',
        'src="/img.png"',
        'data-src="/lazy.png"',
        'alt="a [b] c"',
        'colspan="2"',
        'rowspan="0"',
        'start="x"',
        'type="math/tex; mode=display"',
        'encoding="application/x-tex"',
        'role="presentation"',
        'display="block"',
        'cc-select="true"',
        "unquoted=va<lue",
        'broken="',
    ]
)
TEXT_PIECES = [
    "&amp;", "&lt;", "&#x1F600;", "&nbsp;", "&bogus;", "&#0;", "<", ">", "<!--", "-->", "]]>",
    "<![CDATA[", "\u200b", "\ufeff", "日本語", "مرحبا", "`", "$x$", "\\", "\x00",
]  # fmt: skip
TEXT = st.one_of(st.text(max_size=30), st.sampled_from(TEXT_PIECES))


@st.composite
def html_fragment(draw: st.DrawFn, depth: int = 0) -> str:
    """Nested, sometimes unclosed or mis-closed markup with attributes, entities, unicode."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 9)) if depth < 6 else 0
        if kind <= 3:
            parts.append(draw(TEXT))
            continue
        tag = draw(st.sampled_from(TAGS))
        attrs = " ".join(draw(st.lists(ATTRIBUTES, max_size=3)))
        open_tag = f"<{tag}{' ' if attrs else ''}{attrs}>"
        inner = draw(html_fragment(depth + 1))
        close = draw(
            st.sampled_from([f"</{tag}>", f"</{tag}>", "", f"</{draw(st.sampled_from(TAGS))}>"])
        )
        parts.append(open_tag + inner + close)
    return "".join(parts)


def _check_outcome(outcome: Outcome) -> None:
    assert outcome.status in STATUSES
    if outcome.status == "error":
        assert outcome.error_class
        assert outcome.reason
        assert outcome.record is None
    else:
        assert outcome.record is not None
        assert outcome.record.markdown.strip()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_always_get_one_classified_outcome(data: bytes) -> None:
    _check_outcome(run_one(data))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(html_fragment(), st.sampled_from(["utf-8", "utf-16", "cp1252", None]))
def test_arbitrary_html_always_gets_one_classified_outcome(html: str, charset: str | None) -> None:
    data = html.encode("utf-8", "surrogatepass")
    outcome = run_one(data, charset=charset)
    _check_outcome(outcome)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(html_fragment(), st.booleans())
def test_simplify_keeps_branches_aligned_on_arbitrary_html(html: str, mark: bool) -> None:
    config = SimplifyConfig(mark_attr="cc-select" if mark else None)
    document = simplify(html, config)
    n = document.block_count
    assert len(document.simplified_blocks) == n
    assert len(document.marked) == n
    ids = [int(value) for value in re.findall(r'_item_id="(\d+)"', document.simplified_html)]
    assert ids == list(range(1, n + 1))
    for index, (simp, mapp) in enumerate(
        zip(document.simplified_blocks, document.mapping_blocks, strict=True), 1
    ):
        assert f'_item_id="{index}"' in simp
        assert f'_item_id="{index}"' in mapp
    for branch in (document.simplified_html, "".join(document.mapping_blocks)):
        assert not LexborHTMLParser(branch).css("[cc-select]")
    reparsed = LexborHTMLParser(document.simplified_html).css("[_item_id]")
    assert [node.attributes.get("_item_id") for node in reparsed] == [str(i) for i in ids]
