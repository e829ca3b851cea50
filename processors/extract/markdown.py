"""HTML (the selected mapping blocks) -> Markdown.

Keeps headings, paragraphs, nested lists, tables (pipe tables; tables with spanning or
block-level cells stay as minimal HTML), fenced code with its language, math as TeX
(``$...$`` / ``$$...$$``), blockquotes, images as ``![alt](src)`` and links, with relative
URLs resolved against the page URL.

Safe output: whatever the page holds, a CommonMark / GFM renderer shows its text as text.

- Links keep only ``http``, ``https``, ``ftp``, ``mailto`` and ``tel`` URLs and images
  only ``http`` / ``https`` (relative URLs are resolved first). The scheme is read the way
  a browser reads it: case-insensitively, after dropping leading controls and spaces and
  every tab and line break, and after decoding character references, so ``JAVASCRIPT:``,
  ``java&#x09;script:``, `` javascript:`` and ``vbscript:``, ``data:`` or ``file:`` URLs
  give plain text (a link) or nothing (an image). ``data:`` images are dropped as well:
  inline payloads do not belong in a text record.
- Text is escaped: characters that would start HTML, a link or an emphasis (``< [ ] * _
  ` ~ | \\``, ``&`` before a character reference) everywhere, and at the start of a line
  whatever would start a block (``#``, ``>``, ``-``/``+`` list markers, ``1.``/``1)``,
  ``---``/``===`` rules and underlines). Text that looks like HTML
  (``<img onerror=...>`` written as ``&lt;img ...&gt;`` in the page) stays text.
- TeX gets ``<`` as ``\\lt`` and a space inside ``](`` and ``]:``, which math renderers
  read the same and Markdown cannot turn into HTML or a link.

The converter walks the tree with an explicit stack (each step is a generator that yields
the sub-steps it needs), so nesting depth costs heap, not Python stack: any depth the
simplifier lets through converts without RecursionError.
"""

from __future__ import annotations

import contextlib
import html as htmlmod
import re
from collections.abc import Generator, Iterator
from typing import Any, TypeVar
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser, LexborNode

from dripstream.processors.extract.html_tags import BLOCK_TAGS, HEADING_TAGS

_WHITESPACE = re.compile(r"[ \t\r\n\f\v]+")
_SPACES = re.compile(r"[ \t\r\f\v]+")  # whitespace but line breaks
_NOT_SPACE_WHITESPACE = "\t\r\n\f\v"
_BLANK_LINES = re.compile(r"\n{3,}")
# Anywhere in text: characters that open HTML, links, code, emphasis or table cells;
# ``_`` only where it could be emphasis (not inside a word); ``&`` only before what would
# read as a character reference.
_ESCAPED_CHARS = "\\`*[]<|~_&"  # every character _INLINE_ESCAPE can match
_INLINE_ESCAPE = re.compile(r"[\\`*\[\]<|~]|(?<![^\W_])_|_(?![^\W_])|&(?=#?[0-9A-Za-z]+;)")
# At the start of a line of text: what would start a block.
_LINE_START = re.compile(
    r"^(?:(?P<mark>#{1,6}|[-+]|\d{1,9}[.)])(?=[ \t]|$)"  # heading, bullet, ordered item
    r"|(?P<rule>[-=])[-= \t]*$"  # thematic break / setext underline
    r"|>)"  # blockquote
)
_HEADING_CLOSE = re.compile(r"(\s)(#+)\s*$")
_LANGUAGE_CLASS = re.compile(r"(?:^|\s)(?:language|lang)-([\w+#.-]+)")
_STRONG = frozenset(("strong", "b"))
_EMPHASIS = frozenset(("em", "i", "cite", "dfn"))
_CODE = frozenset(("code", "kbd", "samp", "tt", "var"))
_STRIKE = frozenset(("del", "s", "strike"))
_SKIP = frozenset(("script", "style", "template", "head", "title", "meta", "link"))
# URL schemes a record may point to; anything else (javascript:, vbscript:, data:, file:,
# blob:, ...) is no link and no image.
LINK_SCHEMES = frozenset(("http", "https", "ftp", "mailto", "tel"))
IMAGE_SCHEMES = frozenset(("http", "https"))
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")
# WHATWG URL parsing: leading/trailing C0 controls and spaces are stripped, and tabs and
# line breaks anywhere are removed, before the scheme is read.
_C0_OR_SPACE = "".join(chr(code) for code in range(0x21))
_TAB_OR_NEWLINE = re.compile(r"[\t\n\r]")
# An absolute http(s) URL that urljoin gives back unchanged, whatever the base: another
# scheme is returned as it is, the same one re-assembled from its parts, which only an
# empty query or fragment, params (";") or an unusual host ("[", non-ASCII) would change.
# Most links are such URLs; they skip the join (tests/processors/test_markdown.py).
_JOINS_TO_ITSELF = re.compile(
    r"https?://[^\x00-\x20\x7f-\U0010ffff/?#;\[\]]+(?:/[^?#;]*)?(?:\?[^#]+)?(?:#.+)?"
)
# Characters percent-encoded in a link destination: they would end or escape it.
_URL_UNSAFE = re.compile(r"[\x00-\x20\x7f()<>\\|`\"']")
_TEX_LINK = re.compile(r"\](?=[(:])")
_TEX_TAG = re.compile(r"<")
_LIST_START_DIGITS = re.compile(r"[0-9]{1,9}")

T = TypeVar("T")
Step = Generator[Any, Any, T]


def _run(step: Step[T]) -> T:
    """Drive a step and the sub-steps it yields with an explicit stack (no recursion). A
    step may yield a result (a str or a list of blocks) instead of a sub-step: the content
    that needed none (text only, a leaf element), which goes straight back, with no
    generator made."""
    stack: list[Step[Any]] = [step]
    value: Any = None
    while True:
        try:
            sub = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value = done.value
            continue
        if isinstance(sub, (str, list)):
            value = sub
            continue
        stack.append(sub)
        value = None


def _fence(text: str, char: str = "`") -> str:
    longest = max((len(m) for m in re.findall(f"{re.escape(char)}+", text)), default=0)
    return char * max(3, longest + 1)


def url_scheme(value: str) -> str | None:
    """The scheme of a URL as a browser reads it (lowercase), or None for a relative URL."""
    cleaned = _TAB_OR_NEWLINE.sub("", value.strip(_C0_OR_SPACE))
    match = _SCHEME.match(cleaned)
    return match.group(1).lower() if match else None


def _allowed(value: str, schemes: frozenset[str]) -> bool:
    """Every reading of the URL (as given, and with character references decoded) has an
    allowed scheme or none."""
    for reading in {value, htmlmod.unescape(value)}:
        scheme = url_scheme(reading)
        if scheme is not None and scheme not in schemes:
            return False
    return True


def _list_start(value: str | None) -> int:
    """An ``<ol start>`` as Markdown can count it: 1 to 9 ASCII digits (CommonMark's limit),
    else 1. Other digits (``²``, Arabic-Indic) and signs are not numbers here."""
    text = (value or "").strip()
    return int(text) if _LIST_START_DIGITS.fullmatch(text) else 1


def _escape_text(text: str) -> str:
    # Most text holds none of the characters the pattern looks for: substring tests first.
    if any(char in text for char in _ESCAPED_CHARS):
        return _INLINE_ESCAPE.sub(r"\\\g<0>", text)
    return text


def _escape_line_start(line: str) -> str:
    match = _LINE_START.match(line)
    if match is None:
        return line
    if match.group("mark"):
        mark = match.group("mark")
        if mark[0].isdigit():  # "1." -> "1\."
            return mark[:-1] + "\\" + line[len(mark) - 1 :]
    return "\\" + line


def _escape_block_starts(text: str) -> str:
    return "\n".join(_escape_line_start(line) for line in text.split("\n"))


def _escape_pipes(text: str) -> str:
    """Escape the pipes not escaped yet (GFM splits cells even inside code spans)."""
    return re.sub(r"(?<!\\)((?:\\\\)*)\|", r"\1\\|", text)


def _safe_tex(tex: str) -> str:
    """TeX that Markdown cannot read as HTML or a link, meaning the same to a math renderer."""
    return _TEX_LINK.sub("] ", _TEX_TAG.sub(r"\\lt ", tex))


def _own_rows(table: LexborNode) -> Iterator[LexborNode]:
    """The rows of this table, not those of tables nested in its cells."""
    for child in table.iter(include_text=False):
        if child.tag == "tr":
            yield child
        elif child.tag in ("thead", "tbody", "tfoot"):
            for row in child.iter(include_text=False):
                if row.tag == "tr":
                    yield row


class _Converter:
    def __init__(self, base_url: str | None) -> None:
        self.base_url = base_url or ""
        self.html_depth = 0  # > 0 inside an HTML table: text is HTML-escaped, not Markdown

    def url(self, value: str | None, schemes: frozenset[str] = LINK_SCHEMES) -> str:
        """The resolved, percent-safe URL, or "" when it is no allowed link target."""
        value = _TAB_OR_NEWLINE.sub("", (value or "").strip(_C0_OR_SPACE))
        if not value or value.startswith("#") or not _allowed(value, schemes):
            return ""
        if self.base_url and not _JOINS_TO_ITSELF.fullmatch(value):
            joined = value
            with contextlib.suppress(ValueError):  # e.g. a malformed IPv6 host: kept as is
                joined = urljoin(self.base_url, value)
            if joined != value and not _allowed(joined, schemes):  # a hostile page URL
                return ""
            value = joined
        return _URL_UNSAFE.sub(lambda match: f"%{ord(match.group(0)):02X}", value)

    def text(self, text: str) -> str:
        if text.isspace() and text.isascii():  # the indentation between tags
            return " "
        if "  " in text or any(char in text for char in _NOT_SPACE_WHITESPACE):
            text = _WHITESPACE.sub(" ", text)
        return text if self.html_depth else _escape_text(text)

    # -- blocks ---------------------------------------------------------------------------

    def blocks(self, node: LexborNode) -> Step[list[str]]:
        """Markdown blocks (paragraph strings) for the children of a block container."""
        out: list[str] = []
        run: list[str] = []

        def flush() -> None:
            text = _escape_block_starts(_tidy_inline("".join(run)))
            run.clear()
            if text:
                out.append(text)

        for tag, child in _content_children(node):
            if tag == "-text":
                run.append(self.text(child.text_content or ""))
            elif tag in BLOCK_TAGS or (
                tag == "math" and child.attributes.get("display") == "block"
            ):
                flush()
                out.extend((yield self.block(child, tag)))
            else:
                run.append((yield self.inline(child, tag)))
        flush()
        return out

    def block(self, node: LexborNode, tag: str) -> list[str] | Step[list[str]]:
        """A block element's Markdown blocks, or the step that makes them."""
        if tag in HEADING_TAGS:
            inner = self.inline_children(node)
            if isinstance(inner, str):
                return _heading(tag, inner)
            return self._heading_after(tag, inner)
        if tag in ("ul", "ol", "menu"):
            return self.list_block(node, ordered=tag == "ol")
        if tag == "table":
            return self.table(node)
        if tag == "pre":
            return self.pre(node)
        if tag == "blockquote":
            return self.blockquote(node)
        if tag == "hr":
            return ["---"]
        if tag == "math":
            tex = _safe_tex(_math_tex(node))
            return [f"$$\n{tex}\n$$"] if tex else []
        return self.blocks(node)

    def _heading_after(self, tag: str, children: Step[str]) -> Step[list[str]]:
        inner: str = yield children
        return _heading(tag, inner)

    def blockquote(self, node: LexborNode) -> Step[list[str]]:
        inner = "\n\n".join((yield self.blocks(node)))
        return (
            ["\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))] if inner else []
        )

    def list_block(self, node: LexborNode, ordered: bool) -> Step[list[str]]:
        number = _list_start(node.attributes.get("start"))
        items: list[str] = []
        for child in node.iter(include_text=False):
            if child.tag != "li":
                if child.tag in ("ul", "ol"):  # a list nested without an <li>
                    items.extend((yield self.list_block(child, child.tag == "ol")))
                continue
            marker = f"{min(number, 999_999_999)}. " if ordered else "- "
            number += 1
            body = "\n\n".join((yield self.blocks(child)))
            if not body:
                continue
            indent = " " * len(marker)
            lines = body.split("\n")
            items.append(
                marker
                + lines[0]
                + "".join(f"\n{indent}{line}" if line else "\n" for line in lines[1:])
            )
        return ["\n".join(items)] if items else []

    def pre(self, node: LexborNode) -> Step[list[str]]:
        code = (yield _pre_text(node)).strip("\n")
        if not code.strip():
            return []
        classes = node.attributes.get("class") or ""
        inner = node.css_first("code")
        if inner is not None:
            classes += " " + (inner.attributes.get("class") or "")
        match = _LANGUAGE_CLASS.search(classes)
        fence = _fence(code)
        return [f"{fence}{match.group(1) if match else ''}\n{code}\n{fence}"]

    def table(self, node: LexborNode) -> Step[list[str]]:
        rows: list[list[tuple[LexborNode, bool]]] = []
        complex_table = False
        for row in _own_rows(node):
            cells = []
            for cell in row.iter(include_text=False):
                if cell.tag not in ("td", "th"):
                    continue
                attrs = cell.attributes
                if (attrs.get("colspan") or "1") != "1" or (attrs.get("rowspan") or "1") != "1":
                    complex_table = True
                if cell.css_first("table, ul, ol, pre, p + p") is not None:
                    complex_table = True
                cells.append((cell, cell.tag == "th"))
            if cells:
                rows.append(cells)
        if not rows:
            return (yield self.blocks(node))
        if complex_table:
            return [(yield self.html_table(node))]
        width = max(len(row) for row in rows)
        texts = []
        for row_cells in rows:
            line = []
            for cell, _ in row_cells:
                text = _tidy_inline((yield self.inline_children(cell)))
                line.append(_escape_pipes(text).replace("\n", "<br>"))
            texts.append(line + [""] * (width - len(row_cells)))
        caption = node.css_first("caption")
        lines = [f"| {' | '.join(texts[0])} |", f"|{'---|' * width}"]
        lines.extend(f"| {' | '.join(row)} |" for row in texts[1:])
        out = []
        if caption is not None:
            out.append(_escape_block_starts(_tidy_inline((yield self.inline_children(caption)))))
        return [*[c for c in out if c], "\n".join(lines)]

    def html_table(self, node: LexborNode) -> Step[str]:
        """A table Markdown cannot express, as HTML with only the span attributes."""
        parts = ["<table>"]
        self.html_depth += 1
        try:
            for row in _own_rows(node):
                parts.append("<tr>")
                for cell in row.iter(include_text=False):
                    if cell.tag not in ("td", "th"):
                        continue
                    spans = "".join(
                        f' {name}="{htmlmod.escape(cell.attributes[name] or "")}"'
                        for name in ("colspan", "rowspan")
                        if cell.attributes.get(name)
                    )
                    inner = _tidy_inline((yield self.inline_children(cell)))
                    text = htmlmod.escape(inner, quote=False).replace("\n", "<br>")
                    parts.append(f"<{cell.tag}{spans}>{text}</{cell.tag}>")
                parts.append("</tr>")
        finally:
            self.html_depth -= 1
        parts.append("</table>")
        return "".join(parts)

    # -- inline ---------------------------------------------------------------------------

    def inline_children(self, node: LexborNode) -> str | Step[str]:
        """The inline content of ``node``: at once when it holds text only."""
        children = list(_content_children(node))
        for tag, _ in children:
            if tag != "-text":
                return self._mixed_children(children)
        return "".join([self.text(child.text_content or "") for _, child in children])

    def _mixed_children(self, children: list[tuple[str, LexborNode]]) -> Step[str]:
        parts = []
        for tag, child in children:
            if tag == "-text":
                parts.append(self.text(child.text_content or ""))
            else:
                parts.append((yield self.inline(child, tag)))
        return "".join(parts)

    def inline(self, node: LexborNode, tag: str) -> str | Step[str]:
        """An inline element's Markdown: at once for a leaf or an element of text only."""
        if tag == "br":
            return "\n"
        if tag == "img":
            if self.html_depth:
                return ""
            src = self.url(node.attributes.get("src"), IMAGE_SCHEMES)
            # Brackets in the alt text would end or split the image syntax.
            alt = _WHITESPACE.sub(" ", node.attributes.get("alt") or "").strip()
            alt = self.text(alt.replace("[", "").replace("]", ""))
            return f"![{alt}]({src})" if src else ""
        if tag == "math":
            tex = _math_tex(node)
            return f"${_safe_tex(tex)}$" if tex else ""
        if tag in _CODE:
            code = _WHITESPACE.sub(" ", node.text(deep=True) or "")
            if not code.strip() or self.html_depth:
                return code
            fence = "`" * (max((len(m) for m in re.findall("`+", code)), default=0) + 1)
            pad = " " if code.startswith("`") or code.endswith("`") else ""
            return f"{fence}{pad}{code}{pad}{fence}"
        inner = self.inline_children(node)
        if isinstance(inner, str):
            return self._inline_markup(node, tag, inner)
        return self._inline_after(node, tag, inner)

    def _inline_after(self, node: LexborNode, tag: str, children: Step[str]) -> Step[str]:
        inner: str = yield children
        return self._inline_markup(node, tag, inner)

    def _inline_markup(self, node: LexborNode, tag: str, inner: str) -> str:
        """The element's own syntax around its content ``inner``."""
        if tag in BLOCK_TAGS:  # a block inside inline content: keep it apart
            return f" {inner} "
        if self.html_depth:
            return inner
        if tag == "a":
            href = self.url(node.attributes.get("href"))
            text = inner.strip()
            if not text or not href:
                return inner
            return f"{_lead(inner)}[{text}]({href}){_trail(inner)}"
        for tags, mark in ((_STRONG, "**"), (_EMPHASIS, "*"), (_STRIKE, "~~")):
            if tag in tags:
                text = inner.strip()
                return f"{_lead(inner)}{mark}{text}{mark}{_trail(inner)}" if text else inner
        return inner


def _heading(tag: str, inner: str) -> list[str]:
    text = _tidy_inline(inner).replace("\n", " ")
    text = _HEADING_CLOSE.sub(r"\1\\\2", text)
    return [f"{'#' * int(tag[1])} {text}"] if text else []


def _content_children(node: LexborNode) -> Iterator[tuple[str, LexborNode]]:
    """(tag, child) for the text and element children that carry content ("-text" for text);
    comments and non-content elements are left out."""
    for child in node.iter(include_text=True):
        tag = child.tag
        if tag == "-text" or (tag and not tag.startswith("-") and tag not in _SKIP):
            yield tag, child


def _lead(text: str) -> str:
    return " " if text[:1].isspace() else ""


def _trail(text: str) -> str:
    return " " if text[-1:].isspace() else ""


def _tidy_inline(text: str) -> str:
    """Collapse spaces, trim each line (line breaks come from <br>)."""
    if "  " not in text and not any(char in text for char in _NOT_SPACE_WHITESPACE):
        return text.strip()  # one line, nothing to collapse
    lines = [line.strip() for line in _SPACES.sub(" ", text).split("\n")]
    return "\n".join(line for line in lines if line)


def _pre_text(node: LexborNode) -> Step[str]:
    """Preformatted text as rendered: raw text, <br> and block boundaries as newlines."""
    parts: list[str] = []
    for child in node.iter(include_text=True):
        tag = child.tag
        if tag == "-text":
            parts.append(child.text_content or "")
        elif tag == "br":
            parts.append("\n")
        elif tag in BLOCK_TAGS:
            inner = yield _pre_text(child)
            if parts and not parts[-1].endswith("\n"):
                parts.append("\n")
            parts.append(inner if inner.endswith("\n") else inner + "\n")
        elif tag and not tag.startswith("-") and tag not in _SKIP:
            parts.append((yield _pre_text(child)))
    return "".join(parts)


def _math_tex(node: LexborNode) -> str:
    for annotation in node.css("annotation"):
        if "tex" in (annotation.attributes.get("encoding") or "").lower():
            return (annotation.text(deep=True) or "").strip()
    alttext = node.attributes.get("alttext")
    if alttext:
        return alttext.strip()
    return _WHITESPACE.sub(" ", node.text(deep=True) or "").strip()


def html_to_markdown(html: str, base_url: str | None = None) -> str:
    """Convert an HTML fragment or document to Markdown."""
    tree = LexborHTMLParser(html)
    root = tree.body or tree.root
    if root is None:
        return ""
    markdown = "\n\n".join(_run(_Converter(base_url).blocks(root)))
    return _BLANK_LINES.sub("\n\n", markdown).strip()
