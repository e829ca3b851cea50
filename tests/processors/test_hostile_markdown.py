"""Markdown that a renderer shows as the page's text: no script links, no raw HTML from
text, no blocks made of text, and no nesting depth that breaks the converter.

Output is rendered by markdown-it-py (CommonMark, raw HTML on, GFM tables and
strikethrough) with its own link validation switched off, as the most permissive
downstream renderer would: what it emits is then checked as HTML.
"""

from __future__ import annotations

import html as htmlmod
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from dripstream.processors.extract.markdown import html_to_markdown, url_scheme
from dripstream.processors.extract.reconstruct import reconstruct
from dripstream.processors.extract.simplify import simplify

markdown_it = pytest.importorskip("markdown_it")

BASE = "https://example.com/docs/page.html"
SAFE_SCHEMES = {None, "http", "https", "ftp", "mailto", "tel"}
SCRIPT_URLS = [
    "javascript:alert(1)",
    "JAVASCRIPT:alert(1)",
    "JaVaScRiPt:alert(1)",
    " javascript:alert(1)",
    "&#x20;javascript:alert(1)",
    "\tjavascript:alert(1)",
    "java&#x09;script:alert(1)",
    "java&#9;script:alert(1)",
    "java&Tab;script:alert(1)",
    "jav&#x0A;ascript:alert(1)",
    "jav&#13;ascript:alert(1)",
    "&#106;avascript:alert(1)",
    "&#x6A;&#x61;&#x76;&#x61;script:alert(1)",
    "javascript&colon;alert(1)",
    "&#1;javascript:alert(1)",
    "javascript&#58;alert(1)",
    "vbscript:msgbox(1)",
    "VBScript:msgbox(1)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "DATA:text/html,<script>alert(1)</script>",
    "data:image/svg+xml,<svg onload=alert(1)>",
    "file:///etc/passwd",
    "blob:https://example.com/x",
]


def render(markdown: str) -> str:
    renderer = markdown_it.MarkdownIt("commonmark", {"html": True}).enable(
        ["table", "strikethrough"]
    )
    renderer.validateLink = lambda url: True  # as permissive as a renderer can be
    return renderer.render(markdown)


def assert_harmless(rendered: str) -> None:
    tree = LexborHTMLParser(rendered)
    assert not tree.css("script, iframe, object, embed, svg, style, form"), rendered
    for node in tree.css("*"):
        for name, value in node.attributes.items():
            assert not name.lower().startswith("on"), rendered
            if name in ("href", "src"):
                assert url_scheme(htmlmod.unescape(value or "")) in SAFE_SCHEMES, rendered


def rendered_text(rendered: str) -> str:
    body = LexborHTMLParser(rendered).body
    return " ".join((body.text(deep=True, separator=" ") if body else "").split())


def page_text(page: str) -> str:
    body = LexborHTMLParser(page).body
    return " ".join((body.text(deep=True, separator=" ") if body else "").split())


# -- links and images ---------------------------------------------------------------------


@pytest.mark.parametrize("url", SCRIPT_URLS)
def test_script_urls_become_neither_links_nor_images(url: str) -> None:
    page = f'<p>Go <a href="{url}">there</a> now <img src="{url}" alt="pic"> end</p>'
    markdown = html_to_markdown(page, BASE)
    rendered = render(markdown)
    assert_harmless(rendered)
    tree = LexborHTMLParser(rendered)
    assert not tree.css("a, img"), markdown
    assert rendered_text(rendered) == "Go there now end"


@pytest.mark.parametrize("url", SCRIPT_URLS)
def test_script_urls_survive_no_base_url_either(url: str) -> None:
    page = f'<p><a href="{url}">there</a><img src="{url}" alt="pic"></p>'
    assert_harmless(render(html_to_markdown(page)))


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("https://elsewhere.org/a", "https://elsewhere.org/a"),
        ("HTTP://elsewhere.org/a", "HTTP://elsewhere.org/a"),
        ("/guide?x=1&y=2", "https://example.com/guide?x=1&y=2"),
        ("mailto:someone@example.com", "mailto:someone@example.com"),
        ("tel:+4912345", "tel:+4912345"),
        ("page(1).html", "https://example.com/docs/page%281%29.html"),
        ("a b\\c", "https://example.com/docs/a%20b%5Cc"),
    ],
)
def test_web_links_are_kept_and_cannot_break_out_of_the_link(href: str, expected: str) -> None:
    rendered = render(html_to_markdown(f'<p><a href="{href}">link</a> after</p>', BASE))
    links = LexborHTMLParser(rendered).css("a")
    assert [(a.attributes["href"], a.text()) for a in links] == [(expected, "link")]
    assert rendered_text(rendered) == "link after"


def test_a_hostile_page_url_does_not_turn_relative_links_into_scripts() -> None:
    page = '<p><a href="next">next</a> <img src="pic.png" alt="p"></p>'
    for base in ("javascript:alert(1)//", "data:text/html,x", "JAVASCRIPT://x/"):
        assert_harmless(render(html_to_markdown(page, base)))


def test_data_images_are_dropped_web_images_kept() -> None:
    page = (
        '<p><img src="data:image/png;base64,AAAA" alt="inline">'
        '<img src="/a.png" alt="web [x] <b>"></p>'
    )
    rendered = render(html_to_markdown(page, BASE))
    images = LexborHTMLParser(rendered).css("img")
    assert [(i.attributes["src"], i.attributes["alt"]) for i in images] == [
        ("https://example.com/a.png", "web x <b>")
    ]


# -- text that is markup --------------------------------------------------------------------

HTML_AS_TEXT = [
    "&lt;img src=x onerror=alert(1)&gt;",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "&lt;a href=javascript:alert(1)&gt;x&lt;/a&gt;",
    "&lt;!-- comment --&gt; &lt;?php echo 1; ?&gt; &lt;![CDATA[x]]&gt;",
    "&lt;https://example.com&gt; &lt;javascript:alert(1)&gt;",
    "[click](javascript:alert(1)) and ![x](javascript:alert(2))",
    "[ref] and [ref]: javascript:alert(1)",
    "&amp;lt;img src=x onerror=alert(1)&amp;gt; &amp;amp; &amp;#106;",
    "\\&lt;img onerror=alert(1)&gt; ends with a backslash \\",
]


@pytest.mark.parametrize("text", HTML_AS_TEXT)
def test_text_that_is_html_or_link_syntax_renders_as_that_text(text: str) -> None:
    page = f"<p>Before {text} after</p>"
    markdown = html_to_markdown(page, BASE)
    rendered = render(markdown)
    assert_harmless(rendered)
    assert not LexborHTMLParser(rendered).css("a, img"), markdown
    assert rendered_text(rendered) == page_text(page)


BLOCK_STARTERS = [
    "1. not a list",
    "1) not a list",
    "123456789. not a list",
    "# not a heading",
    "###### not a heading",
    "- not an item",
    "+ not an item",
    "* not an item",
    "> not a quote",
    "| not | a table |",
    "---",
    "***",
    "___",
    "- - -",
    "```js",
    "~~~",
    "<div>",
    "[x]: https://example.com",
]


@pytest.mark.parametrize("text", BLOCK_STARTERS)
def test_text_that_would_start_a_block_stays_in_its_paragraph(text: str) -> None:
    escaped = htmlmod.escape(text)
    page = f"<p>{escaped}</p><p>Line one<br>{escaped}</p><p>Heading under<br>===</p>"
    markdown = html_to_markdown(page)
    rendered = render(markdown)
    tree = LexborHTMLParser(rendered)
    assert [node.tag for node in tree.body.iter()] == ["p", "p", "p"], (markdown, rendered)
    assert rendered_text(rendered) == page_text(page)


def test_pipes_and_breaks_in_text_make_no_table() -> None:
    page = "<p>a | b<br>--- | ---<br>c | d</p>"
    rendered = render(html_to_markdown(page))
    assert not LexborHTMLParser(rendered).css("table")
    assert rendered_text(rendered) == "a | b --- | --- c | d"


def test_table_cells_keep_pipes_in_text_and_code() -> None:
    page = (
        "<table><tr><th>a|b</th><th><code>x|y</code></th></tr><tr><td>1</td><td>2</td></tr></table>"
    )
    rendered = render(html_to_markdown(page))
    cells = [node.text() for node in LexborHTMLParser(rendered).css("th, td")]
    assert cells == ["a|b", "x|y", "1", "2"]


def test_heading_text_ending_in_hashes_keeps_them() -> None:
    rendered = render(html_to_markdown("<h2>Programming in C #</h2>"))
    assert LexborHTMLParser(rendered).css_first("h2").text() == "Programming in C #"


def test_tex_cannot_carry_html_or_links() -> None:
    page = (
        '<p>Inline <math><annotation encoding="application/x-tex">'
        "a&lt;img src=x onerror=alert(1)&gt; [x](javascript:alert(1))</annotation></math></p>"
        '<math display="block" alttext="&lt;script&gt;alert(1)&lt;/script&gt; [y]: javascript:x">'
        "</math><p>[y]</p>"
    )
    markdown = html_to_markdown(page)
    rendered = render(markdown)
    assert_harmless(rendered)
    assert not LexborHTMLParser(rendered).css("a, img"), markdown
    assert "\\lt img" in markdown  # what math renderers read as "<"


def test_code_spans_with_backticks_stay_closed() -> None:
    page = "<p>Run <code>``x`` &lt;img onerror=alert(1)&gt;</code> then <code>`</code> end</p>"
    rendered = render(html_to_markdown(page))
    codes = [node.text() for node in LexborHTMLParser(rendered).css("code")]
    assert codes == ["``x`` <img onerror=alert(1)>", "`"]
    assert_harmless(rendered)


def test_html_table_cells_hold_text_only() -> None:
    page = (
        '<table><tr><td colspan="2"><a href="javascript:alert(1)">x</a> &lt;img onerror=y&gt;'
        '</td></tr><tr><td><img src="/a.png" alt="i">1</td><td><b>2</b></td></tr></table>'
    )
    rendered = render(html_to_markdown(page, BASE))
    assert_harmless(rendered)
    cells = [node.text() for node in LexborHTMLParser(rendered).css("td")]
    assert cells == ["x <img onerror=y>", "1", "2"]


_SPECIALS = "\\`*_[]<>|~#-+=.!()&;:/ \n\t1aZé<>"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*_SPECIALS, "&lt;", "&amp;", "&#106;"]), max_size=60).map("".join))
def test_any_paragraph_text_renders_back_as_itself(text: str) -> None:
    page = f"<p>{htmlmod.escape(text, quote=False)}</p><p>x<br>{htmlmod.escape(text)}</p>"
    rendered = render(html_to_markdown(page))
    assert_harmless(rendered)
    tree = LexborHTMLParser(rendered)
    assert all(node.tag in ("body", "p", "br") for node in tree.body.css("*")), rendered
    assert rendered_text(rendered) == page_text(page)


# -- nesting depth --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("open_tags", "close_tags"),
    [
        ("<span>", "</span>"),
        ("<b>", "</b>"),
        ("<em><a href='/x'>", "</a></em>"),
        ("<div>", "</div>"),
        ("<blockquote>", "</blockquote>"),
        ("<ul><li>", "</li></ul>"),
        ("<ol start='3'><li>", "</li></ol>"),
        ("<table><tr><td>", "</td></tr></table>"),
        ("<section><p>", "</p></section>"),
        ("<pre><span>", "</span></pre>"),
        ("<td>", "</td>"),
    ],
    ids=["span", "b", "em-a", "div", "blockquote", "ul", "ol", "table", "section-p", "pre", "td"],
)
@pytest.mark.parametrize("depth", [250, 1000])
def test_deep_nesting_converts_without_recursion(
    open_tags: str, close_tags: str, depth: int
) -> None:
    page = open_tags * depth + "deep text" + close_tags * depth
    assert "deep text" in html_to_markdown(page, BASE)


def test_250_nested_spans_go_through_simplify_and_reconstruct() -> None:
    page = "<html><body>" + "<span>" * 250 + "deep text" + "</span>" * 250 + "</body></html>"
    document = simplify(page)
    result = reconstruct(document.mapping_blocks, ["main"] * document.block_count, BASE)
    assert result.markdown == "deep text"


# -- ordered-list starts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "first"),
    [
        ("²", "1."),
        ("٣", "1."),
        ("9" * 5000, "1."),
        ("-5", "1."),
        ("+3", "1."),
        ("", "1."),
        (" 7 ", "7."),
        ("999999999", "999999999."),
    ],
)
def test_ordered_list_start_counts_from_a_plain_number_or_1(start: str, first: str) -> None:
    page = f'<ol start="{start}"><li>first</li><li>second</li></ol>'
    markdown = html_to_markdown(page)
    assert markdown.split("\n")[0] == f"{first} first"
    assert re.fullmatch(r"\d{1,9}\. second", markdown.split("\n")[1])
    assert [li.text() for li in LexborHTMLParser(render(markdown)).css("li")] == ["first", "second"]


def test_ordered_list_start_reaches_reconstruct_without_error() -> None:
    page = '<html><body><ol start="²"><li>item text</li></ol></body></html>'
    document = simplify(page)
    result = reconstruct(document.mapping_blocks, ["main"] * document.block_count)
    assert result.markdown == "1. item text"
