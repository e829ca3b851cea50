"""Hostile input, generated in code: pages built to exhaust memory, time or a recursive
parser, charset tricks, script links, and classic broken payloads.

``hostile_cases()`` returns ``HostileCase`` tuples; the first four fields are the
contract (``name, data, expected, time_bound_s``):

- ``expected`` is ``RECORD`` (the page must give a record or a fallback record) or a
  frozenset of error class names (the page must be refused with one of them);
- ``time_bound_s`` is the wall time one offline ``dripstream extract`` of the page may
  take on a slow shared CPU (process start included);
- ``charset`` is the hint given with the page (the HTTP header / record field), if any;
- ``slow`` marks the big ones (megabytes of input; seconds each);
- ``sandbox`` says why a case is still expected to break its bounds until the per-page
  sandbox (rlimits and a hard time limit in a child process) bounds it; None when the
  cheap checks already do.

Nothing here is checked in as binary data: every payload is built by the functions below,
so a test (offline or on the stream) can regenerate the corpus anywhere.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import zlib
from collections.abc import Callable
from typing import NamedTuple

RECORD = "record-or-fallback"
REFUSED_SIZE = frozenset({"TooLarge"})
REFUSED_SHAPE = frozenset({"TooDeep", "TooManyElements"})
NOT_A_PAGE = frozenset({"NotHtml", "EmptyDocument"})
# A page within every size and element limit whose parse still needs more memory than the
# sandbox gives one page (160 MiB): a record where it fits, else PageMemoryExceeded.
RECORD_WITHIN_MEMORY = frozenset({RECORD, "PageMemoryExceeded"})
MIB = 1024 * 1024

_PARAGRAPH = (
    "<p>Paragraph {i} of the story holds enough ordinary words to count as the main "
    "content of this page, with a few more words for good measure.</p>"
)
ARTICLE_BODY = "<h1>The story</h1>" + "".join(_PARAGRAPH.format(i=i) for i in range(8))


class HostileCase(NamedTuple):
    name: str
    data: bytes
    expected: str | frozenset[str]
    time_bound_s: float
    charset: str | None = None
    slow: bool = False
    sandbox: str | None = None


def page(body: str, head: str = "", title: str = "Hostile") -> str:
    """A complete page around ``body``, with the ordinary article after it."""
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title>{head}</head>"
        f"<body>{body}<article>{ARTICLE_BODY}</article></body></html>"
    )


# -- memory and time ------------------------------------------------------------------------


def formatting_blowup(open_tags: int, paragraphs: int, distinct: bool = True) -> bytes:
    """Unclosed formatting elements inside a paragraph, then paragraphs: each ``<p>`` closes
    the one before, which takes the formatting elements off the stack but not off the list
    of active formatting elements, so an HTML5 parser rebuilds all of them in every
    paragraph ("reconstruct the active formatting elements"): open_tags x paragraphs
    elements. Distinct attributes defeat the Noah's Ark clause (three of a kind at most)."""
    opens = "".join(f"<b id={i if distinct else 'i'}>" for i in range(open_tags))
    return ("<html><body><p>" + opens + "<p>x" * paragraphs).encode()


def nested_lists_around_nav(lists: int, breaks: int, after: str = "", tag: str = "ul") -> bytes:
    """``lists`` nested ``<ul>`` (or ``tag``) around a ``<nav>`` with ``breaks`` ``<br>``,
    and ``after`` the nav (a heading there made every list search the whole subtree)."""
    name = tag.split()[0].split(">")[0]
    return (
        "<html><body>"
        + f"<{tag}>" * lists
        + "<nav>"
        + "<br>" * breaks
        + "</nav>"
        + after
        + f"</{name}>" * lists
    ).encode() + page("").encode()


def ampersand_flood(paragraph_bytes: int, ampersands: int) -> bytes:
    """``<p>`` tags, then bare ampersands (each escapes to ``&amp;``: five-fold output)."""
    return b"<p>" * (paragraph_bytes // 3) + b"&" * ampersands


def ruby_flood(count: int, tag: str = "rb") -> bytes:
    """Ruby-annotation elements outside ``<ruby>``: they nest instead of closing."""
    return page(f"<{tag}>x" * count).encode()


def sole_content(inner: str) -> bytes:
    """A page whose only content is ``inner`` (so it is what any labeller selects)."""
    return (
        "<!DOCTYPE html><html><head><title>Hostile</title></head><body><article>"
        f"<h1>The story</h1>{inner}</article></body></html>"
    ).encode()


LONG_TEXT = " ".join(_PARAGRAPH.format(i=i)[3:-4] for i in range(6))


def nested(tag: str, depth: int, inner: str = "deep text") -> str:
    return f"<{tag}>" * depth + inner + f"</{tag}>" * depth


# -- the corpus ------------------------------------------------------------------------------

_NOT_TEXT_CODECS = ("rot13", "hex", "base64", "zlib", "idna", "punycode", "undefined")
_SCRIPT_URLS = (
    "javascript:alert(1)",
    "JAVASCRIPT:alert(1)",
    "JaVaScRiPt:alert(1)",
    " javascript:alert(1)",
    "\tjavascript:alert(1)",
    "java&#x09;script:alert(1)",
    "java&#9;script:alert(1)",
    "java&Tab;script:alert(1)",
    "jav&#x0A;ascript:alert(1)",
    "&#106;avascript:alert(1)",
    "&#x6A;&#x61;&#x76;&#x61;script:alert(1)",
    "javascript&colon;alert(1)",
    "\x01javascript:alert(1)",
    "vbscript:msgbox(1)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "DATA:text/html,<script>alert(1)</script>",
    "file:///etc/passwd",
)


def script_link_page() -> bytes:
    links = "".join(
        f'<li><a href="{url}">link {i}</a> <img src="{url}" alt="image {i}"></li>'
        for i, url in enumerate(_SCRIPT_URLS)
    )
    text = (
        "<p>Shown as text: &lt;img src=x onerror=alert(1)&gt; and "
        "&lt;script&gt;alert(2)&lt;/script&gt; and "
        "&lt;a href=javascript:alert(3)&gt;x&lt;/a&gt;</p>"
        "<p>1. not a list</p><p># not a heading</p><p>- not an item</p><p>&gt; not a quote</p>"
        "<p>| not | a table |</p>"
    )
    return page(f"<article><h2>Links</h2><ul>{links}</ul>{text}</article>").encode()


def hostile_cases(include_slow: bool = True) -> list[HostileCase]:
    """Every hostile case; ``include_slow=False`` leaves out the multi-megabyte ones
    (``SLOW_CASES``, whose names are known without building them)."""
    cases: list[HostileCase] = []
    add = cases.append

    # Charsets that are Python codecs but not text encodings: ignored, never fatal.
    for codec in _NOT_TEXT_CODECS:
        meta = page("", head=f'<meta charset="{codec}">').encode()
        add(HostileCase(f"meta-charset-{codec}", meta, RECORD, 20))
        equiv = page(
            "", head=f'<meta http-equiv="Content-Type" content="text/html; charset={codec}">'
        )
        add(HostileCase(f"http-equiv-charset-{codec}", equiv.encode(), RECORD, 20))
        add(HostileCase(f"hint-charset-{codec}", page("").encode(), RECORD, 20, charset=codec))
    add(HostileCase("hint-charset-utf-7", page("").encode(), RECORD, 20, charset="utf-7"))
    add(
        HostileCase(
            "meta-charset-x-user-defined",
            page("", '<meta charset="x-user-defined">').encode(),
            RECORD,
            20,
        )
    )

    # Ordered-list starts the converter cannot count from.
    for name, start in (
        ("superscript", "²"),
        ("arabic-indic", "٣"),
        ("5000-digits", "9" * 5000),
        ("negative", "-5"),
        ("huge-negative", "-" + "9" * 5000),
        ("plus", "+3"),
        ("spaces", " 7 "),
    ):
        items = "".join(f"<li>{_PARAGRAPH.format(i=i)[3:-4]}</li>" for i in range(6))
        body = f'<ol start="{start}">{items}</ol>'
        add(HostileCase(f"ol-start-{name}", sole_content(body), RECORD, 20))

    # Deep nesting inside the 256-level limit: no recursive converter may overflow.
    for tag in ("span", "b", "a", "div", "blockquote", "ul", "li", "table", "pre", "td"):
        body = nested(tag, 250, LONG_TEXT)
        add(HostileCase(f"nested-{tag}-250", sole_content(body), RECORD, 30))
    nested_tables = "<table><tr><td>" * 60 + LONG_TEXT + "</td></tr></table>" * 60
    add(HostileCase("nested-tables-60", sole_content(nested_tables), RECORD, 30))
    nested_lists = "<ul><li>" * 120 + LONG_TEXT + "</li></ul>" * 120
    add(HostileCase("nested-lists-120", sole_content(nested_lists), RECORD, 30))
    nested_quotes = "<blockquote><p>" * 120 + LONG_TEXT + "</p></blockquote>" * 120
    add(HostileCase("nested-quotes-120", sole_content(nested_quotes), RECORD, 30))
    add(HostileCase("nested-div-100k", page(nested("div", 100_000)).encode(), REFUSED_SHAPE, 20))
    add(HostileCase("unclosed-div-100k", page("<div>" * 100_000).encode(), REFUSED_SHAPE, 20))

    # JSON that no recursive parser can read.
    add(HostileCase("json-100k-open-brackets", b"[" * 100_000, NOT_A_PAGE, 20))
    add(HostileCase("json-100k-nested-arrays", b"[" * 100_000 + b"]" * 100_000, NOT_A_PAGE, 20))
    add(
        HostileCase(
            "json-100k-nested-objects", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, NOT_A_PAGE, 20
        )
    )

    # Script links and text that is HTML.
    add(HostileCase("script-links", script_link_page(), RECORD, 20))

    # Parser blow-ups small enough to run everywhere.
    add(HostileCase("formatting-blowup-29k", formatting_blowup(2000, 2000), REFUSED_SHAPE, 20))
    # Identical attributes: the Noah's Ark clause keeps three, nothing blows up.
    add(
        HostileCase("formatting-identical", formatting_blowup(2000, 2000, False), REFUSED_SHAPE, 20)
    )
    add(HostileCase("ruby-rb-20k", ruby_flood(20_000), REFUSED_SHAPE, 20))
    add(HostileCase("ruby-rt-20k", ruby_flood(20_000, "rt"), REFUSED_SHAPE, 20))

    # Parser rules the pre-parse check must model: ruby parts close only inside <ruby>,
    # everything nests inside <svg>/<math>, a new <a> closes the one before.
    add(
        HostileCase(
            "ruby-rb-inside-ruby-20k",
            page("<ruby>" + "<rb>x<rt>y" * 20_000 + "</ruby>").encode(),
            RECORD,
            30,
        )
    )
    add(
        HostileCase(
            "svg-option-20k", page("<svg>" + "<option>" * 20_000).encode(), REFUSED_SHAPE, 20
        )
    )
    add(
        HostileCase("math-li-20k", page("<math>" + "<mi><li>" * 10_000).encode(), REFUSED_SHAPE, 20)
    )
    add(
        HostileCase(
            "unclosed-links-20k",
            page("<p>" + "".join(f"<a href=/{i}>link {i} " for i in range(20_000))).encode(),
            RECORD,
            30,
        )
    )
    add(
        HostileCase(
            "formatting-font-blowup",
            (
                "<p>"
                + "".join(f"<font color=#{i:06x}>" for i in range(1500))
                + "<div>x</div>" * 1500
            ).encode(),
            REFUSED_SHAPE,
            20,
        )
    )

    # Classic broken input.
    add(HostileCase("empty", b"", frozenset({"EmptyDocument"}), 20))
    add(HostileCase("whitespace", b" \r\n\t " * 100, frozenset({"EmptyDocument"}), 20))
    add(HostileCase("nul-bytes", b"\x00" * 10_000, NOT_A_PAGE, 20))
    add(HostileCase("random-binary", random.Random(13).randbytes(100_000), NOT_A_PAGE, 20))
    add(HostileCase("gzip-bytes", gzip.compress(page("").encode() * 20), NOT_A_PAGE, 20))
    full = page("<article><p>Truncated " + "words " * 200 + "</p></article>").encode()
    add(HostileCase("truncated-mid-tag", full[: len(full) // 2] + b"<a hr", RECORD, 20))
    add(
        HostileCase(
            "truncated-mid-utf8", page("é" * 200).encode()[:-3] + "é".encode()[:1], RECORD, 20
        )
    )
    add(HostileCase("utf16-le-without-bom", page("").encode("utf-16-le"), RECORD, 20))
    add(HostileCase("utf16-be-without-bom", page("").encode("utf-16-be"), RECORD, 20))
    add(HostileCase("utf32-without-bom", page("").encode("utf-32-le"), RECORD, 20))
    add(HostileCase("lying-utf16-meta", page("", '<meta charset="utf-16">').encode(), RECORD, 20))
    add(HostileCase("no-markup", b"just words " * 100, NOT_A_PAGE, 20))
    add(
        HostileCase(
            "lone-surrogates-utf8",
            b"<p>" + b"\xed\xa0\x80" * 1000 + b"</p>" + page("").encode(),
            RECORD,
            20,
        )
    )

    if include_slow:
        cases.extend(build() for build in SLOW_CASES.values())
    return cases


def hostile_case(name: str) -> HostileCase:
    """One case by name (builds only that one: the slow ones are megabytes each)."""
    if name in SLOW_CASES:
        return SLOW_CASES[name]()
    for case in hostile_cases(include_slow=False):
        if case.name == name:
            return case
    raise KeyError(name)


def _slow(name: str, data: Callable[[], bytes], expected: str | frozenset[str], bound: float):
    return lambda: HostileCase(name, data(), expected, bound, slow=True)


# Multi-megabyte cases, built on demand.
SLOW_CASES: dict[str, Callable[[], HostileCase]] = {
    name: _slow(name, data, expected, bound)
    for name, data, expected, bound in (
        ("formatting-blowup-67k", lambda: formatting_blowup(4000, 6000), REFUSED_SHAPE, 20),
        ("ruby-rb-100k", lambda: ruby_flood(100_000), REFUSED_SHAPE, 30),
        ("ul-250-nav-br-3.9m", lambda: nested_lists_around_nav(250, 3_900_000), REFUSED_SHAPE, 30),
        ("ul-250-nav-br-350k", lambda: nested_lists_around_nav(250, 350_000), RECORD, 30),
        # Subtree searches per element made these quadratic (nesting x subtree size).
        (
            "ul-250-nav-br-h1-390k",
            lambda: nested_lists_around_nav(250, 390_000, "<h1>Title</h1>"),
            RECORD,
            30,
        ),
        (
            "menu-div-250-br-h1-390k",
            lambda: nested_lists_around_nav(250, 390_000, "<h1>Title</h1>", "div class=menu"),
            RECORD,
            30,
        ),
        (
            "tables-60-br-div-390k",
            lambda: nested_lists_around_nav(60, 390_000, "<div>x</div>", "table><tr><td"),
            RECORD,
            30,
        ),
        # 16 MB of <p> and 16 million "&": over the size limit.
        ("p-16mb-amp-16m", lambda: ampersand_flood(16_000_000, 16_000_000), REFUSED_SIZE, 30),
        # Just under it: 16 Mi "&", each one "&amp;" in the mapping branch.
        (
            "p-amp-under-size-limit",
            lambda: b"<p>" + b"&" * (16 * MIB - 64),
            RECORD_WITHIN_MEMORY,
            60,
        ),
        (
            "br-under-element-limit",
            lambda: page("<p>" + "<br>" * 390_000 + "x</p>").encode(),
            RECORD_WITHIN_MEMORY,
            60,
        ),
    )
}


# -- coding bombs: crawler records whose body, once decoded, is far more than a page -----

BOMB_DECODED_MIB = 96  # over the decoded-body limit (64 MiB)


def _codings(body: bytes) -> dict[str, tuple[str, bytes]]:
    """name -> (Content-Encoding, encoded body)."""
    import brotli

    raw = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    return {
        "gzip": ("gzip", gzip.compress(body, 1)),
        "deflate": ("deflate", zlib.compress(body, 1)),
        "raw-deflate": ("deflate", raw.compress(body) + raw.flush()),
        "br": ("br", brotli.compress(body, quality=1)),
    }


def _warc_value(url: str, coding: str, body: bytes) -> bytes:
    http = (
        f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: {coding}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Record-ID: <urn:uuid:{zlib.crc32(url.encode()):032x}>\r\n"
        f"WARC-Target-URI: {url}\r\nWARC-Date: 2024-05-01T12:00:00Z\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http)}\r\n\r\n"
    ).encode()
    return head + http + b"\r\n\r\n"


def coding_bombs() -> list[tuple[str, str, bytes]]:
    """(name, form, value) of records whose decoded body is over the limit, in every
    content coding, as a Scrapy item with a base64 body (``jsonl``) and as a WARC response
    record (``warc``); plus a plain base64 body of more characters than a page may have.
    Each must be refused as ``TooLarge``, offline and in the stream alike."""
    body = b"<html><body>" + b"<p>bomb</p>" * (BOMB_DECODED_MIB * MIB // 11)
    bombs = []
    for name, (coding, encoded) in _codings(body).items():
        url = f"https://bomb.example/{name}"
        item = {
            "url": url,
            "status": 200,
            "body": base64.b64encode(encoded).decode(),
            "body_encoding": "base64",
            "headers": {"Content-Type": ["text/html"], "Content-Encoding": [coding]},
        }
        bombs.append((f"{name}-item", "jsonl", json.dumps(item).encode()))
        bombs.append((f"{name}-warc", "warc", _warc_value(url, coding, encoded)))
    plain = b"<html><body>" + b"<p>plain</p>" * (20 * MIB // 12)
    item = {
        "url": "https://bomb.example/base64",
        "status": 200,
        "body": base64.b64encode(plain).decode(),
        "body_encoding": "base64",
        "headers": {"Content-Type": ["text/html"]},
    }
    bombs.append(("base64-item", "jsonl", json.dumps(item).encode()))
    return bombs


# -- checking rendered output -----------------------------------------------------------------

SAFE_SCHEMES = frozenset(("http", "https", "ftp", "mailto", "tel"))


def assert_renders_harmless(markdown: str) -> None:
    """Render like the most permissive CommonMark renderer (raw HTML on, no link
    validation) and check the HTML: no script-capable element, no event handler, no link
    or image to anything but a web (or mail/phone) URL."""
    import html as htmlmod

    from markdown_it import MarkdownIt
    from selectolax.lexbor import LexborHTMLParser

    from dripstream.processors.extract.markdown import url_scheme

    renderer = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    renderer.validateLink = lambda url: True
    rendered = renderer.render(markdown)
    tree = LexborHTMLParser(rendered)
    dangerous = tree.css("script, iframe, object, embed, svg, math, style, form, base, meta")
    assert not dangerous, rendered[:2000]
    for node in tree.css("*"):
        for name, value in node.attributes.items():
            assert not name.lower().startswith("on"), rendered[:2000]
            if name.lower() in ("href", "src", "srcset", "action", "formaction", "xlink:href"):
                scheme = url_scheme(htmlmod.unescape(value or ""))
                assert scheme is None or scheme in SAFE_SCHEMES, rendered[:2000]
