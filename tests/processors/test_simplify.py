"""Dual-branch simplification: alignment, cleaning, pruning, segmentation, limits."""

from __future__ import annotations

import re

import pytest
from selectolax.lexbor import LexborHTMLParser

from dripstream.processors.extract.simplify import (
    SimplifiedDocument,
    SimplifyConfig,
    flat_items,
    simplify,
)

_ITEM_ID = re.compile(r'_item_id="(\d+)"')


def _ids(html: str) -> list[int]:
    return [int(value) for value in _ITEM_ID.findall(html)]


def assert_aligned(document: SimplifiedDocument) -> None:
    """Both branches have n blocks, block i carries id i, and the page re-parses to n ids."""
    n = document.block_count
    assert len(document.simplified_blocks) == n
    assert len(document.marked) == n
    expected = list(range(1, n + 1))
    assert [_ids(block)[0] for block in document.simplified_blocks] == expected
    assert [_ids(block)[0] for block in document.mapping_blocks] == expected
    assert _ids(document.simplified_html) == expected
    reparsed = LexborHTMLParser(document.simplified_html).css("[_item_id]")
    assert [int(node.attributes["_item_id"] or 0) for node in reparsed] == expected


def _text_of(block: str) -> str:
    node = LexborHTMLParser(block).body
    assert node is not None
    return " ".join((node.text(deep=True) or "").split())


ARTICLE_PAGE = """<!DOCTYPE html><html><head><title>The  page
title</title><script>var tracking = 1;</script><style>p { color: red }</style></head>
<body>
<header class="site-header"><a href="/">Site logo text</a></header>
<nav><a href="/a">Home</a><a href="/b">About</a></nav>
<article class="post">
  <header><h1 id="top">Article heading</h1></header>
  <p class="lead intro" data-track="x" style="margin: 0" onclick="go()">First paragraph with
     a <a href="/more" class="link" rel="nofollow" target="_blank">link</a> inside.</p>
  <div hidden>hidden by attribute</div>
  <div aria-hidden="true">Drawer text hidden from screen readers only.</div>
  <div style="color: red; display : none">hidden by style</div>
  <p>Second paragraph.</p>
  <script>document.write("script text")</script>
  <aside class="pull-quote">An aside inside the article.</aside>
</article>
<aside>Page-level aside text</aside>
<footer>Copyright footer text</footer>
</body></html>"""


@pytest.fixture(scope="module")
def article() -> SimplifiedDocument:
    return simplify(ARTICLE_PAGE)


def test_branches_are_aligned_with_consecutive_ids(article: SimplifiedDocument) -> None:
    assert article.block_count == 5
    assert_aligned(article)


def test_blocks_follow_document_order(article: SimplifiedDocument) -> None:
    assert [_text_of(block) for block in article.mapping_blocks] == [
        "Article heading",
        "First paragraph with a link inside.",
        "Drawer text hidden from screen readers only.",
        "Second paragraph.",
        "An aside inside the article.",
    ]


def test_title_is_read_and_whitespace_collapsed(article: SimplifiedDocument) -> None:
    assert article.title == "The page title"


@pytest.mark.parametrize(
    "text",
    [
        "tracking",
        "color: red",
        "script text",
        "Home",
        "About",
        "hidden by attribute",
        "hidden by style",
        "Page-level aside text",
        "Site logo text",
        "Copyright footer text",
    ],
)
def test_non_content_is_removed_from_both_branches(article: SimplifiedDocument, text: str) -> None:
    assert text not in article.simplified_html
    assert all(text not in block for block in article.mapping_blocks)


def test_header_inside_article_is_kept(article: SimplifiedDocument) -> None:
    assert "Article heading" in article.mapping_blocks[0]


def test_aria_hidden_and_article_aside_are_left_to_the_labeller(
    article: SimplifiedDocument,
) -> None:
    """aria-hidden hides from screen readers, not from view (closed drawers, accordions);
    an aside inside the article is the article's: both reach the labeller as blocks."""
    for text in ("Drawer text hidden from screen readers only.", "An aside inside the article."):
        assert any(text in block for block in article.mapping_blocks)
        assert text in article.simplified_html


def test_simplified_attributes_are_pruned_to_class_and_id(article: SimplifiedDocument) -> None:
    simplified = article.simplified_html
    for attribute in ("data-track", "style=", "onclick", "rel=", "target=", "href="):
        assert attribute not in simplified
    assert 'class="lead intro"' in simplified
    assert 'id="top"' in simplified
    assert 'class="link"' in simplified


def test_mapping_keeps_href_and_drops_noise(article: SimplifiedDocument) -> None:
    paragraph = article.mapping_blocks[1]
    assert 'href="/more"' in paragraph
    for attribute in ("data-track", "style=", "onclick", "rel=", "target="):
        assert attribute not in paragraph


def test_named_navigation_is_removed() -> None:
    page = (
        "<body><div class='main-navbar'><a href='/x'>Products</a></div>"
        "<div id='breadcrumbs'>Home / Shop</div>"
        "<p>" + "Real content sentence. " * 20 + "</p></body>"
    )
    document = simplify(page)
    assert "Products" not in document.simplified_html
    assert "Home / Shop" not in document.simplified_html
    assert document.block_count == 1


def test_a_navigation_named_layout_around_the_article_is_kept() -> None:
    """A layout class that names a sidebar (``sidebar-first-only``: the column beside one)
    does not make the column that holds the article navigation, however long the menus."""
    menu = "".join(f"<li><a href='/m{i}'>Menu entry number {i}</a></li>" for i in range(200))
    page = (
        f"<body><ul class='mega'>{menu}</ul>"
        "<section class='col-sm-9 sidebar-first-only'><article>"
        "<p>" + "The course teaches digital marketing. " * 10 + "</p></article></section>"
        "<div class='sidebar'><p>Contact the coordinator.</p></div></body>"
    )
    document = simplify(page)
    assert "The course teaches digital marketing." in document.simplified_html
    assert "Contact the coordinator." not in document.simplified_html


def _shows_only(page: str, shown: tuple[str, ...], gone: tuple[str, ...]) -> None:
    """The page's blocks hold every ``shown`` text and no ``gone`` one."""
    text = " ".join(_text_of(block) for block in simplify(page).mapping_blocks)
    for kept in shown:
        assert kept in text
    for dropped in gone:
        assert dropped not in text


def test_tab_panels_and_until_found_content_are_not_hidden() -> None:
    """A hidden tab panel shows with a click on its tab (a code sample's other languages);
    ``hidden="until-found"`` shows to find-in-page: both are the page's content."""
    page = (
        "<body><article><h1>Send a message</h1><div role='tablist'>Python Node.js</div>"
        "<div role='tabpanel'><pre>pip install twilio</pre></div>"
        "<div role='tabpanel' hidden style='display: none'><pre>npm install twilio</pre></div>"
        "<div hidden='until-found'><p>A collapsed section.</p></div>"
        "<div hidden='until-found' style='display:none'><p>Styled away.</p></div>"
        "<div hidden><p>Plainly hidden.</p></div></article></body>"
    )
    _shows_only(
        page,
        shown=("pip install twilio", "npm install twilio", "A collapsed section."),
        gone=("Styled away.", "Plainly hidden."),
    )


def test_a_panel_that_a_control_opens_is_not_hidden() -> None:
    """An accordion's answer, hidden until its question is clicked, is named by the
    question's ``aria-controls``: it is content. A hidden element no control names, or a
    navigation-named one that a control opens (a mobile menu), still goes."""
    page = (
        "<body><main><h1>Questions</h1>"
        "<h3><span aria-controls='a1 a2'>How long does it take?</span></h3>"
        "<div id='a1' style='display: none'><p>Six weeks of evening classes.</p></div>"
        "<div id='a2' hidden><p>Each class is two hours.</p></div>"
        "<div id='a3' style='display:none'><p>Nobody opens this.</p></div>"
        "<span aria-controls='mobile-menu'>Menu</span>"
        "<div id='mobile-menu' class='menu' style='display:none'><a href='/'>Home</a></div>"
        "</main></body>"
    )
    _shows_only(
        page,
        shown=("Six weeks of evening classes.", "Each class is two hours."),
        gone=("Nobody opens this.", "Home"),
    )


def test_simplified_whitespace_is_collapsed_but_mapping_keeps_it() -> None:
    document = simplify("<p>one   two\n\n   three</p>")
    assert "one two three" in document.simplified_blocks[0]
    assert "one   two\n\n   three" in document.mapping_blocks[0]


# -- images -----------------------------------------------------------------------------------


def test_img_keeps_alt_and_src_only() -> None:
    document = simplify(
        '<p>See <img src="/a.png" alt="A chart" width="10" class="pic" loading="lazy"> here</p>'
    )
    simplified = document.simplified_blocks[0]
    assert re.search(r'<img class="pic" alt="A chart" src="/a.png">', simplified)
    assert "width" not in simplified and "loading" not in simplified
    assert 'src="/a.png"' in document.mapping_blocks[0]
    assert 'alt="A chart"' in document.mapping_blocks[0]


def test_data_uri_src_is_dropped() -> None:
    document = simplify('<p>Text <img src="data:image/png;base64,AAAA" alt="pixel"></p>')
    assert "data:" not in document.simplified_html
    assert "data:" not in document.mapping_blocks[0]
    assert 'alt="pixel"' in document.simplified_html


def test_lazy_data_src_is_used_for_src() -> None:
    document = simplify(
        '<p>Text <img src="data:image/gif;base64,R0lG" data-src="/real.jpg" alt="x"></p>'
    )
    assert 'src="/real.jpg"' in document.simplified_blocks[0]
    assert 'src="/real.jpg"' in document.mapping_blocks[0]
    assert "data-src" not in document.simplified_html
    assert "data:" not in document.mapping_blocks[0]


def test_image_alone_is_a_block() -> None:
    document = simplify('<div><img src="/photo.jpg"></div>')
    assert document.block_count == 1
    assert 'src="/photo.jpg"' in document.mapping_blocks[0]


# -- truncation and lists -------------------------------------------------------------------


def test_long_text_is_truncated_in_simplified_only() -> None:
    text = " ".join(f"word{i}" for i in range(300))
    document = simplify(f"<p>{text}</p>", SimplifyConfig(max_text_chars=200))
    simplified_text = _text_of(document.simplified_blocks[0])
    assert len(simplified_text) <= 200
    assert text.startswith(simplified_text)
    assert "word299" not in document.simplified_html
    assert _text_of(document.mapping_blocks[0]) == text


def test_long_list_is_shortened_in_simplified_only() -> None:
    items = "".join(f"<li>entry number {i}</li>" for i in range(30))
    document = simplify(f"<ul>{items}</ul>", SimplifyConfig(max_list_items=10))
    assert document.block_count == 1
    assert document.simplified_blocks[0].count("<li>") == 10
    assert "entry number 9" in document.simplified_blocks[0]
    assert "entry number 10" not in document.simplified_blocks[0]
    assert document.mapping_blocks[0].count("<li>") == 30
    assert "entry number 29" in document.mapping_blocks[0]


def test_list_of_sections_is_recursed_into() -> None:
    page = "<ul><li><h2>One</h2><p>first</p></li><li><h2>Two</h2><p>second</p></li></ul>"
    document = simplify(page)
    assert document.block_count == 4
    assert_aligned(document)


# -- tables -----------------------------------------------------------------------------------


def test_data_table_is_one_whole_block() -> None:
    rows = "".join(f"<tr><td>r{i}</td><td>{i * i}</td></tr>" for i in range(20))
    page = f"<p>Intro</p><table><tr><th>Name</th><th>Square</th></tr>{rows}</table><p>End</p>"
    document = simplify(page)
    assert document.block_count == 3
    table = document.mapping_blocks[1]
    assert table.startswith("<table")
    assert table.count("<tr>") == 21
    assert "r19" in table and "<th>Square</th>" in table
    assert_aligned(document)


def test_layout_table_is_recursed_into_and_reparses_to_all_blocks() -> None:
    page = (
        "<body><table><tr>"
        "<td><div class='left-col'>Left column text</div><p>Paragraph in a cell</p></td>"
        "<td><h2>Right heading</h2><p>More text here</p>"
        "<table><tr><td>nested data</td><td>42</td></tr></table></td>"
        "</tr><tr><td><p>Second row</p></td></tr></table></body>"
    )
    document = simplify(page)
    assert document.block_count >= 5
    texts = [_text_of(block) for block in document.mapping_blocks]
    assert "Left column text" in texts
    assert "Right heading" in texts
    assert "Second row" in texts
    assert all("<table" not in block or "nested data" in block for block in document.mapping_blocks)
    assert_aligned(document)


def test_a_block_in_a_layout_tables_caption_stays_in_order_when_reparsed() -> None:
    # A caption holding a block is kept: without it the block would sit directly in the
    # table, and a parser reading the page again would move it before the table.
    page = "<table><tr><td>cell</td></tr><caption><div>caption block</div></caption></table>"
    document = simplify(page)
    reparsed = LexborHTMLParser(document.simplified_html).css("[_item_id]")
    assert [node.attributes.get("_item_id") for node in reparsed] == [
        str(index) for index in range(1, document.block_count + 1)
    ]
    assert "caption block" in [_text_of(block) for block in document.mapping_blocks]
    assert_aligned(document)


def test_presentation_table_is_recursed_into() -> None:
    page = '<table role="presentation"><tr><td>cell one</td><td>cell two</td></tr></table>'
    document = simplify(page)
    assert document.block_count == 2
    assert_aligned(document)


# -- segmentation -----------------------------------------------------------------------------


def test_inline_runs_between_blocks_become_paragraphs() -> None:
    page = "<div>before <b>bold</b> text<div>inner block</div>after <i>it</i></div>"
    document = simplify(page)
    assert [_text_of(block) for block in document.mapping_blocks] == [
        "before bold text",
        "inner block",
        "after it",
    ]
    assert document.mapping_blocks[0].startswith('<p _item_id="1">')
    assert document.mapping_blocks[2].startswith('<p _item_id="3">')
    assert document.simplified_blocks[0].startswith('<p _item_id="1">')


def test_loose_text_in_body_is_a_block() -> None:
    document = simplify("Just some text <b>and bold</b>")
    assert document.block_count == 1
    assert _text_of(document.mapping_blocks[0]) == "Just some text and bold"


def test_empty_elements_make_no_blocks() -> None:
    document = simplify("<div><p> </p><span></span><div>\n</div></div><p>kept</p>")
    assert document.block_count == 1


def test_page_without_content_has_zero_blocks() -> None:
    document = simplify("<html><head><title>t</title></head><body> </body></html>")
    assert document.block_count == 0
    assert document.simplified_html == ""


def test_inline_math_stays_inside_its_paragraph() -> None:
    page = "<p>Energy <math><mi>E</mi><mo>=</mo><mi>m</mi></math> is conserved.</p>"
    document = simplify(page)
    assert document.block_count == 1
    assert "<math>" in document.mapping_blocks[0]
    assert _text_of(document.mapping_blocks[0]).startswith("Energy")


def test_display_tex_script_is_kept_as_tex() -> None:
    page = '<p>Before.</p><script type="math/tex; mode=display">a^2+b^2=c^2</script>'
    document = simplify(page)
    assert any("$$a^2+b^2=c^2$$" in block for block in document.mapping_blocks)
    assert "$$a^2+b^2=c^2$$" in document.simplified_html


# -- mark attribute ---------------------------------------------------------------------------


def test_mark_attr_reports_marked_blocks_and_never_appears() -> None:
    page = (
        "<body><p>unmarked one</p>"
        '<div cc-select="true"><p>inside a marked div</p><p>also inside</p></div>'
        '<p>contains <span cc-select="true">a marked span</span></p>'
        '<p cc-select="true">marked itself</p>'
        "<p>unmarked two</p></body>"
    )
    document = simplify(page, SimplifyConfig(mark_attr="cc-select"))
    assert document.marked == [False, True, True, True, True, False]
    assert_aligned(document)
    assert "cc-select" not in document.simplified_html
    assert all("cc-select" not in block for block in document.mapping_blocks)
    assert all("cc-select" not in block for block in document.simplified_blocks)


def test_without_mark_attr_nothing_is_marked() -> None:
    document = simplify('<p cc-select="true">x</p><p>y</p>')
    assert document.marked == [False, False]


def test_mark_attr_does_not_change_segmentation() -> None:
    page = '<div><p>a</p><div cc-select="true">b <i>c</i></div>d</div>'
    plain = simplify(page)
    marked = simplify(page, SimplifyConfig(mark_attr="cc-select"))
    assert plain.mapping_blocks == marked.mapping_blocks
    assert plain.simplified_html == marked.simplified_html


def test_flat_items_keep_every_block_in_order_without_containers() -> None:
    html = (
        "<body><main><article class='post'><h1>Title</h1><div class='body'><p>One.</p>"
        "<p>Two <b>bold</b>.</p></div><table><tr><td><p>Cell</p></td></tr></table>"
        "</article></main></body>"
    )
    document = simplify(html)
    flat = flat_items(document.simplified_html)
    nodes = LexborHTMLParser(flat).css("[_item_id]")
    assert [n.attributes["_item_id"] for n in nodes] == [
        str(i) for i in range(1, document.block_count + 1)
    ]
    assert "<article" not in flat and 'class="body"' not in flat
    assert flat.startswith('<html><head><meta charset="utf-8"></head><body>')


def test_elements_with_the_same_class_keep_their_own_mapping_attributes() -> None:
    # Open tags are remembered by (tag, class, id) across pages: what else a tag carries
    # (href, colspan, start) must still come from the element itself.
    first = simplify(
        '<p class="x"><a class="l" href="/one">one</a></p>'
        '<table class="t"><tr><td class="c" colspan="2">a</td><td class="c">b</td></tr></table>'
    )
    second = simplify('<p class="x"><a class="l" href="/two" title="T">two</a></p>')
    assert 'href="/one"' in first.mapping_blocks[0]
    assert 'href="/two"' in second.mapping_blocks[0] and 'title="T"' in second.mapping_blocks[0]
    assert '<td class="c" colspan="2">' in first.mapping_blocks[1]
    assert '<td class="c">b' in first.mapping_blocks[1]
    assert second.simplified_blocks[0].startswith('<p class="x"')


def test_navigation_names_are_judged_per_configuration() -> None:
    # Which class/id pairs name navigation is remembered per word set, not across them.
    html = '<div class="menu"><a href="/">Home</a></div>' + "<p>" + "Body text. " * 40 + "</p>"
    assert "Home" not in "".join(simplify(html).mapping_blocks)
    kept = simplify(html, SimplifyConfig(nav_words=frozenset({"sidebar"})))
    assert "Home" in "".join(kept.mapping_blocks)


STREAMED_PAGE = """<html><body><main><h1>Streamed article</h1>
<!--$?--><template id="B:0"></template><!--$--><p>Skeleton</p><!--/$--><p>Loading</p><!--/$-->
<p>Written in place.</p>
<!--$?--><template id="B:5"></template><p>Still loading</p><!--/$-->
<!--$?--><template id="B:a"></template><!--/$-->
</main>
<nav><template id="B:1"></template></nav>
<template id="X:2"></template>
<div hidden id="S:a"><p>Second streamed paragraph.</p><template id="P:3"></template></div>
<div hidden id="S:0"><p>First streamed paragraph.</p></div>
<div hidden id="S:3"><p>Nested streamed paragraph.</p></div>
<div hidden id="S:1"><p>Streamed into the navigation.</p></div>
<div hidden id="S:7"><p>A segment nothing asks for.</p></div>
<div hidden><p>Plainly hidden.</p></div>
</body></html>"""


def test_streamed_segments_are_read_at_their_placeholders() -> None:
    """React's streaming render sends content last, in hidden ``S:n`` divs (numbered in
    hex) that its script moves into the ``B:n`` / ``P:n`` placeholder templates: the
    reader sees them there, so the blocks come in that order."""
    texts = [_text_of(block) for block in simplify(STREAMED_PAGE).mapping_blocks]
    assert texts[:6] == [
        "Streamed article",
        "First streamed paragraph.",
        "Written in place.",
        "Still loading",
        "Second streamed paragraph.",
        "Nested streamed paragraph.",
    ]


def test_streamed_content_replaces_its_boundarys_fallback() -> None:
    """A boundary's fallback (``Loading``, a skeleton) goes when its content arrives, as
    React's script removes it; a boundary whose content never came keeps its fallback."""
    document = simplify(STREAMED_PAGE)
    for text in ("Loading", "Skeleton"):
        assert all(text not in block for block in document.mapping_blocks)
    assert any("Still loading" in block for block in document.mapping_blocks)


def test_a_segment_whose_placeholder_was_removed_is_shown_where_it_lies() -> None:
    texts = [_text_of(block) for block in simplify(STREAMED_PAGE).mapping_blocks]
    assert texts[6:] == ["Streamed into the navigation."]


def test_hidden_content_that_is_no_streamed_segment_stays_hidden() -> None:
    document = simplify(STREAMED_PAGE)
    for text in ("A segment nothing asks for.", "Plainly hidden."):
        assert text not in document.simplified_html
        assert all(text not in block for block in document.mapping_blocks)


def test_the_page_s_own_utf8_bytes_simplify_as_its_text() -> None:
    html = (
        "<html><head><title>Café “noir”</title></head><body><nav class='menu'>Accueil</nav>"
        "<article><h1>Le café</h1><p>Crème brûlée, 日本語 and ✓ marks.</p>"
        "<ul><li>un</li><li>deux</li></ul></article></body></html>"
    )
    from_text, from_bytes = simplify(html), simplify(html, utf8=html.encode("utf-8"))
    assert from_bytes.block_count == from_text.block_count > 0
    assert from_bytes.simplified_html == from_text.simplified_html
    assert from_bytes.mapping_blocks == from_text.mapping_blocks
    assert from_bytes.title == from_text.title == "Café “noir”"
