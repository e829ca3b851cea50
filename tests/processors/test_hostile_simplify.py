"""Markup whose parse would cost far more than its size is refused before it is parsed,
and the walk over a parsed page stays linear in the page and inside its time limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hostile_corpus import formatting_blowup, nested_lists_around_nav, page

from dripstream.processors.errors import PageTimeout, TooDeep, TooManyElements
from dripstream.processors.extract.simplify import SimplifyConfig, check_markup, simplify

# check_markup counts on the page's UTF-8 bytes when the caller has them: every verdict
# must be the same either way.
WITH_UTF8 = pytest.mark.parametrize("with_utf8", [False, True], ids=["text", "utf8"])


def check(html: str, with_utf8: bool, config: SimplifyConfig | None = None) -> None:
    check_markup(html, config, html.encode("utf-8") if with_utf8 else None)


@WITH_UTF8
@pytest.mark.parametrize(
    ("open_tags", "paragraphs"),
    [(2000, 2000), (4000, 6000), (700, 700)],
    ids=["29k", "67k", "small"],
)
def test_open_formatting_elements_rebuilt_in_every_block_are_refused_before_parsing(
    open_tags: int, paragraphs: int, with_utf8: bool
) -> None:
    html = formatting_blowup(open_tags, paragraphs).decode()
    with pytest.raises(TooManyElements, match="formatting elements left open"):
        check(html, with_utf8)
    started = time.monotonic()
    with pytest.raises(TooManyElements):
        simplify(html, utf8=html.encode("utf-8") if with_utf8 else None)
    assert time.monotonic() - started < 2  # not parsed: parsing the 29k page takes 1.5 GB


@pytest.mark.parametrize(
    "html",
    [
        "<p>" + "".join(f"<font color=#{i:06x}>" for i in range(1500)) + "<div>x</div>" * 1500,
        "<p>" + "".join(f"<i class=c{i}>" for i in range(1000)) + "<li>x" * 1000,
        "<div>" + "".join(f"<u title={i}><s>" for i in range(500)) + "<h2>x</h2>" * 1000,
    ],
    ids=["font-div", "i-li", "u-s-h2"],
)
@WITH_UTF8
def test_other_formatting_elements_and_blocks_are_counted_too(html: str, with_utf8: bool) -> None:
    with pytest.raises(TooManyElements):
        check(html, with_utf8)


@WITH_UTF8
def test_a_non_ascii_page_is_counted_the_same_on_its_bytes(with_utf8: bool) -> None:
    opened = "".join(f"<b class=é{i}>ü" for i in range(2000)) + "<p>€</p>" * 2000
    with pytest.raises(TooManyElements, match="formatting elements left open"):
        check("<p>" + opened, with_utf8)
    check("<p>ä</p>" * 3000 + "<b>ö</b>" * 60, with_utf8)


@WITH_UTF8
def test_three_of_a_kind_are_kept_open_so_identical_tags_are_no_blowup(with_utf8: bool) -> None:
    check(formatting_blowup(2000, 2000, distinct=False).decode(), with_utf8)


@WITH_UTF8
def test_closed_formatting_elements_cost_nothing(with_utf8: bool) -> None:
    check("<p><b>bold</b> <i>it</i> <a href=x>link</a></p>" * 50_000, with_utf8)


@pytest.mark.parametrize("tag", ["rb", "rt", "rp", "rtc"])
def test_ruby_parts_outside_ruby_nest_and_are_refused(tag: str) -> None:
    html = page(f"<{tag}>x" * 10_000)
    with pytest.raises(TooDeep, match="opens more than"):
        check_markup(html)


def test_ruby_parts_inside_ruby_close_each_other() -> None:
    check_markup(page("<ruby>" + "<rb>x<rt>y<rp>(<rtc>z" * 20_000 + "</ruby>"))


@pytest.mark.parametrize("root", ["svg", "math"])
def test_every_element_nests_inside_svg_and_math(root: str) -> None:
    with pytest.raises(TooDeep):
        check_markup(page(f"<{root}>" + "<option><tr><p>" * 3000))
    check_markup(page(f"<{root}>" + "<path d='M0 0'/>" * 20_000 + f"</{root}>"))


def test_unclosed_links_close_each_other_so_they_are_not_deep() -> None:
    html = page("<p>" + "".join(f"<a href=/{i}>link {i} " for i in range(20_000)))
    check_markup(html)
    assert simplify(html).block_count > 0


def test_more_tags_than_twice_the_element_limit_are_refused_before_parsing() -> None:
    config = SimplifyConfig(max_elements=1000)
    with pytest.raises(TooManyElements, match="tags"):
        simplify(page("<br>" * 2100), config)
    simplify(page("<br>" * 900), config)  # under the limit: parsed and walked


@pytest.mark.slow
def test_millions_of_br_in_nested_lists_are_refused_in_well_under_a_second() -> None:
    html = nested_lists_around_nav(250, 3_900_000).decode()
    started = time.monotonic()
    with pytest.raises(TooManyElements):
        simplify(html)
    assert time.monotonic() - started < 5  # was parsed and walked: 3 s and 776 MB


@pytest.mark.parametrize(
    ("tag", "after"),
    [
        ("ul", "<h1>Title</h1>"),
        ("div class=menu", "<h1>Title</h1>"),
        ("table><tr><td", "<div>x</div>"),
    ],
    ids=["lists", "navigation-named", "tables"],
)
def test_containers_nested_around_a_large_subtree_are_walked_in_linear_time(
    tag: str, after: str
) -> None:
    # Every nested list / table / navigation-named element searched its whole subtree:
    # 250 x 390,000 nodes (10 s for the lists). One search per page now.
    depth = 60 if tag.startswith("table") else 250
    html = nested_lists_around_nav(depth, 390_000, after, tag).decode()
    started = time.monotonic()
    document = simplify(html)
    assert time.monotonic() - started < 4
    assert document.block_count > 0


def test_the_time_limit_is_checked_at_every_element() -> None:
    # Fewer elements than the old check interval (1,024): the limit still holds.
    with pytest.raises(PageTimeout):
        simplify(page("<p>x</p>" * 10), SimplifyConfig(timeout_s=-1))


def test_no_development_page_is_refused_by_the_pre_parse_check(data_dir: Path) -> None:
    pages = 0
    for name in ("articles_dev.jsonl", "publishers_dev.jsonl", "webmainbench_sample.jsonl"):
        with (data_dir / name).open(encoding="utf-8") as lines:
            for line in lines:
                html = json.loads(line).get("html") or ""
                for with_utf8 in (False, True):
                    check(html, with_utf8)
                    check(html, with_utf8, SimplifyConfig(max_elements=50_000))  # wide margin
                pages += 1
    assert pages > 200
