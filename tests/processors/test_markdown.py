"""HTML -> Markdown of the selected blocks."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dripstream.processors.extract.markdown import _JOINS_TO_ITSELF, html_to_markdown
from dripstream.processors.extract.simplify import simplify

BASE = "https://example.com/docs/page.html"


@pytest.mark.parametrize("level", range(1, 7))
def test_headings_get_their_level(level: int) -> None:
    markdown = html_to_markdown(f"<h{level}>  The <em>big</em>\n title </h{level}>")
    assert markdown == f"{'#' * level} The *big* title"


def test_paragraphs_are_separated_by_a_blank_line() -> None:
    assert html_to_markdown("<p>One</p><p>Two <b>bold</b></p>") == "One\n\nTwo **bold**"


def test_nested_lists_keep_ordered_start_and_indentation() -> None:
    html = (
        '<ol start="3"><li>three<ul><li>sub a</li><li>sub b'
        "<ol><li>deep</li></ol></li></ul></li><li>four</li></ol>"
    )
    lines = html_to_markdown(html).split("\n")
    assert lines[0] == "3. three"
    assert "   - sub a" in lines
    assert "   - sub b" in lines
    assert "     1. deep" in lines
    assert lines[-1] == "4. four"


def test_unordered_list_items_are_dashes() -> None:
    assert html_to_markdown("<ul><li>a</li><li>b</li></ul>") == "- a\n- b"


def test_simple_table_is_a_pipe_table() -> None:
    html = (
        "<table><caption>Results</caption><tr><th>Name</th><th>A|B</th></tr>"
        "<tr><td>x</td><td>1<br>2</td></tr><tr><td>y</td></tr></table>"
    )
    assert html_to_markdown(html) == (
        "Results\n\n| Name | A\\|B |\n|---|---|\n| x | 1<br>2 |\n| y |  |"
    )


def test_table_with_colspan_stays_html() -> None:
    html = (
        '<table class="t"><tr><th>A</th><th>B</th></tr>'
        '<tr><td colspan="2" style="x">wide &amp; tall</td></tr></table>'
    )
    assert html_to_markdown(html) == (
        '<table><tr><th>A</th><th>B</th></tr><tr><td colspan="2">wide &amp; tall</td></tr></table>'
    )


def test_table_with_rowspan_stays_html() -> None:
    html = '<table><tr><td rowspan="2">a</td><td>b</td></tr><tr><td>c</td></tr></table>'
    assert html_to_markdown(html).startswith('<table><tr><td rowspan="2">a</td>')


def test_code_fence_has_language_and_outgrows_backticks_inside() -> None:
    html = '<pre><code class="hljs language-python">print("```")\nif x:\n    y = 1</code></pre>'
    assert html_to_markdown(html) == '````python\nprint("```")\nif x:\n    y = 1\n````'


def test_code_fence_without_language_keeps_indentation_and_br() -> None:
    html = "<pre>  a = 1<br>  b = &lt;2&gt;</pre>"
    assert html_to_markdown(html) == "```\n  a = 1\n  b = <2>\n```"


def test_inline_code_uses_double_backticks_around_a_backtick() -> None:
    html = "<p>Run <code>pip install</code> or <code>a`b</code>.</p>"
    assert html_to_markdown(html) == "Run `pip install` or ``a`b``."


def test_mathml_with_tex_annotation_becomes_inline_tex() -> None:
    html = (
        "<p>Area <math><semantics><mi>π</mi><msup><mi>r</mi><mn>2</mn></msup>"
        '<annotation encoding="application/x-tex">\\pi r^2</annotation>'
        "</semantics></math> of a circle.</p>"
    )
    assert html_to_markdown(html) == "Area $\\pi r^2$ of a circle."


def test_block_mathml_with_alttext_becomes_display_tex() -> None:
    html = '<p>So:</p><math display="block" alttext="e^{i\\pi}+1=0"><mi>e</mi></math>'
    assert html_to_markdown(html) == "So:\n\n$$\ne^{i\\pi}+1=0\n$$"


def test_tex_script_goes_through_simplifier_to_display_math() -> None:
    page = (
        "<p>Pythagoras:</p>"
        '<script type="math/tex; mode=display">a^2+b^2=c^2</script>'
        '<p>with <script type="math/tex">c</script> the hypotenuse.</p>'
    )
    document = simplify(page)
    markdown = html_to_markdown("".join(document.mapping_blocks))
    assert markdown == "Pythagoras:\n\n$$a^2+b^2=c^2$$\n\nwith $c$ the hypotenuse."


def test_images_and_links_resolve_against_base_url() -> None:
    html = (
        '<p><a href="/guide?x=1">the guide</a>, <a href="other.html">other</a>, '
        '<a href="https://elsewhere.org/a">abs</a> '
        '<img src="../img/chart one.png" alt="A [big] chart"></p>'
    )
    assert html_to_markdown(html, BASE) == (
        "[the guide](https://example.com/guide?x=1), "
        "[other](https://example.com/docs/other.html), "
        "[abs](https://elsewhere.org/a) "
        "![A big chart](https://example.com/img/chart%20one.png)"
    )


_URL_PARTS = st.text(alphabet=st.sampled_from("aZ09-._~%:@!$&'()*+,=/?#;[] é\u3000"), max_size=12)


@settings(max_examples=3000, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp"]),
    rest=_URL_PARTS,
    base=st.sampled_from(["https://example.com/docs/a.html", "http://example.org", "ftp://x/"]),
)
def test_a_url_taken_as_its_own_join_is_one_urljoin_gives_back(
    scheme: str, rest: str, base: str
) -> None:
    value = f"{scheme}://{rest}"
    if _JOINS_TO_ITSELF.fullmatch(value):
        assert urljoin(base, value) == value


@pytest.mark.parametrize(
    "value",
    [
        "https://example.com/a?",  # empty query: urljoin drops the "?"
        "https://example.com/a#",
        "https://example.com/a;",  # params
        "https://[::1/a",  # urljoin raises
        "https://exämple.com/a",
        "HTTPS://example.com/a",
        "https:///a",
    ],
)
def test_urls_urljoin_would_change_or_refuse_take_the_join(value: str) -> None:
    assert not _JOINS_TO_ITSELF.fullmatch(value)


def test_javascript_and_fragment_links_become_plain_text() -> None:
    html = '<p><a href="javascript:void(0)">Click</a> and <a href="#top">up</a> now</p>'
    assert html_to_markdown(html, BASE) == "Click and up now"


def test_image_without_usable_src_is_dropped() -> None:
    assert html_to_markdown('<p>a <img src="data:image/png;base64,AA" alt="x"> b</p>') == "a b"


def test_blockquote_prefixes_every_line() -> None:
    html = "<blockquote><p>Quote one</p><p>Quote <i>two</i></p></blockquote>"
    assert html_to_markdown(html) == "> Quote one\n>\n> Quote *two*"


def test_markdown_characters_in_text_are_escaped() -> None:
    assert html_to_markdown("<p>2 * 3 and `x`</p>") == "2 \\* 3 and \\`x\\`"


def test_scripts_and_styles_produce_nothing() -> None:
    assert html_to_markdown("<p>a</p><script>var b;</script><style>p{}</style>") == "a"


def test_empty_input_gives_empty_markdown() -> None:
    assert html_to_markdown("") == ""
    assert html_to_markdown("<div> <p></p> </div>") == ""
