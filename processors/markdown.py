"""HTML (the selected mapping blocks) -> Markdown.

Keeps headings, paragraphs, nested lists, tables (pipe tables; tables with spanning or
block-level cells stay as minimal HTML), fenced code with its language, math as TeX
(``$...$`` / ``$$...$$``), blockquotes, images as ``![alt](src)`` and links, with relative
URLs resolved against the page URL.
"""

from __future__ import annotations

import html as htmlmod
import re
from collections.abc import Iterator
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser, LexborNode

from processors.html_tags import BLOCK_TAGS, HEADING_TAGS

_WHITESPACE = re.compile(r"[ \t\r\n\f\v]+")
_BLANK_LINES = re.compile(r"\n{3,}")
_INLINE_ESCAPE = re.compile(r"([\\`*])")
_LANGUAGE_CLASS = re.compile(r"(?:^|\s)(?:language|lang)-([\w+#.-]+)")
_STRONG = frozenset(("strong", "b"))
_EMPHASIS = frozenset(("em", "i", "cite", "dfn"))
_CODE = frozenset(("code", "kbd", "samp", "tt", "var"))
_STRIKE = frozenset(("del", "s", "strike"))
_SKIP = frozenset(("script", "style", "template", "head", "title", "meta", "link"))


def _fence(text: str, char: str = "`") -> str:
    longest = max((len(m) for m in re.findall(f"{re.escape(char)}+", text)), default=0)
    return char * max(3, longest + 1)


class _Converter:
    def __init__(self, base_url: str | None) -> None:
        self.base_url = base_url or ""

    def url(self, value: str | None) -> str:
        value = (value or "").strip()
        if not value or value.startswith(("javascript:", "data:", "#")):
            return ""
        if self.base_url:
            try:
                return urljoin(self.base_url, value)
            except ValueError:
                return value
        return value

    # -- blocks ---------------------------------------------------------------------------

    def blocks(self, node: LexborNode) -> list[str]:
        """Markdown blocks (paragraph strings) for the children of a block container."""
        out: list[str] = []
        run: list[str] = []

        def flush() -> None:
            text = _tidy_inline("".join(run))
            run.clear()
            if text:
                out.append(text)

        for tag, child in _content_children(node):
            if tag == "-text":
                run.append(_text(child.text_content or ""))
            elif tag in BLOCK_TAGS or (
                tag == "math" and child.attributes.get("display") == "block"
            ):
                flush()
                out.extend(self.block(child, tag))
            else:
                run.append(self.inline(child, tag))
        flush()
        return out

    def block(self, node: LexborNode, tag: str) -> list[str]:
        if tag in HEADING_TAGS:
            text = _tidy_inline(self.inline_children(node)).replace("\n", " ")
            return [f"{'#' * int(tag[1])} {text}"] if text else []
        if tag in ("ul", "ol", "menu"):
            return self.list_block(node, ordered=tag == "ol")
        if tag == "table":
            return self.table(node)
        if tag == "pre":
            return self.pre(node)
        if tag == "blockquote":
            inner = "\n\n".join(self.blocks(node))
            return (
                ["\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))]
                if inner
                else []
            )
        if tag == "hr":
            return ["---"]
        if tag == "math":
            tex = _math_tex(node)
            return [f"$$\n{tex}\n$$"] if tex else []
        return self.blocks(node)

    def list_block(self, node: LexborNode, ordered: bool) -> list[str]:
        start = node.attributes.get("start") or "1"
        number = int(start) if start.isdigit() else 1
        items: list[str] = []
        for child in node.iter(include_text=False):
            if child.tag != "li":
                if child.tag in ("ul", "ol"):  # a list nested without an <li>
                    items.extend(self.list_block(child, child.tag == "ol"))
                continue
            marker = f"{number}. " if ordered else "- "
            number += 1
            body = "\n\n".join(self.blocks(child))
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

    def pre(self, node: LexborNode) -> list[str]:
        code = _pre_text(node).strip("\n")
        if not code.strip():
            return []
        classes = node.attributes.get("class") or ""
        inner = node.css_first("code")
        if inner is not None:
            classes += " " + (inner.attributes.get("class") or "")
        match = _LANGUAGE_CLASS.search(classes)
        fence = _fence(code)
        return [f"{fence}{match.group(1) if match else ''}\n{code}\n{fence}"]

    def table(self, node: LexborNode) -> list[str]:
        rows: list[list[tuple[str, bool]]] = []
        complex_table = False
        for row in node.css("tr"):
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
            return self.blocks(node)
        if complex_table:
            return [self.html_table(node)]
        width = max(len(row) for row in rows)
        texts = [
            [
                _tidy_inline(self.inline_children(cell)).replace("\n", "<br>").replace("|", "\\|")
                for cell, _ in row
            ]
            + [""] * (width - len(row))
            for row in rows
        ]
        caption = node.css_first("caption")
        lines = [f"| {' | '.join(texts[0])} |", f"|{'---|' * width}"]
        lines.extend(f"| {' | '.join(row)} |" for row in texts[1:])
        out = [_tidy_inline(self.inline_children(caption))] if caption is not None else []
        return [*[c for c in out if c], "\n".join(lines)]

    def html_table(self, node: LexborNode) -> str:
        """A table Markdown cannot express, as HTML with only the span attributes."""
        parts = ["<table>"]
        for row in node.css("tr"):
            parts.append("<tr>")
            for cell in row.iter(include_text=False):
                if cell.tag not in ("td", "th"):
                    continue
                spans = "".join(
                    f' {name}="{htmlmod.escape(cell.attributes[name] or "")}"'
                    for name in ("colspan", "rowspan")
                    if cell.attributes.get(name)
                )
                text = htmlmod.escape(_tidy_inline(self.inline_children(cell)), quote=False)
                parts.append(f"<{cell.tag}{spans}>{text.replace(chr(10), '<br>')}</{cell.tag}>")
            parts.append("</tr>")
        parts.append("</table>")
        return "".join(parts)

    # -- inline ---------------------------------------------------------------------------

    def inline_children(self, node: LexborNode) -> str:
        return "".join(
            _text(child.text_content or "") if tag == "-text" else self.inline(child, tag)
            for tag, child in _content_children(node)
        )

    def inline(self, node: LexborNode, tag: str) -> str:
        if tag == "br":
            return "\n"
        if tag == "img":
            src = self.url(node.attributes.get("src"))
            # Brackets in the alt text would end or split the image syntax.
            alt = _WHITESPACE.sub(" ", node.attributes.get("alt") or "").strip()
            alt = alt.replace("[", "").replace("]", "")
            target = src.replace(" ", "%20").replace(")", "%29")
            return f"![{alt}]({target})" if src else ""
        if tag == "math":
            tex = _math_tex(node)
            return f"${tex}$" if tex else ""
        if tag in _CODE:
            code = _WHITESPACE.sub(" ", node.text(deep=True) or "")
            if not code.strip():
                return code
            fence = "``" if "`" in code else "`"
            return f"{fence}{code}{fence}"
        inner = self.inline_children(node)
        if tag in BLOCK_TAGS:  # a block inside inline content: keep it apart
            return f" {inner} "
        if tag == "a":
            href = self.url(node.attributes.get("href"))
            text = inner.strip()
            if not text or not href:
                return inner
            target = href.replace(" ", "%20").replace(")", "%29")
            return f"{_lead(inner)}[{text}]({target}){_trail(inner)}"
        for tags, mark in ((_STRONG, "**"), (_EMPHASIS, "*"), (_STRIKE, "~~")):
            if tag in tags:
                text = inner.strip()
                return f"{_lead(inner)}{mark}{text}{mark}{_trail(inner)}" if text else inner
        return inner


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


def _text(text: str) -> str:
    return _INLINE_ESCAPE.sub(r"\\\1", _WHITESPACE.sub(" ", text))


def _tidy_inline(text: str) -> str:
    """Collapse spaces, trim each line (line breaks come from <br>)."""
    lines = [_WHITESPACE.sub(" ", line).strip() for line in text.split("\n")]
    return "\n".join(line for line in lines if line)


def _pre_text(node: LexborNode) -> str:
    """Preformatted text as rendered: raw text, <br> and block boundaries as newlines."""
    parts: list[str] = []
    for child in node.iter(include_text=True):
        tag = child.tag
        if tag == "-text":
            parts.append(child.text_content or "")
        elif tag == "br":
            parts.append("\n")
        elif tag in BLOCK_TAGS:
            inner = _pre_text(child)
            if parts and not parts[-1].endswith("\n"):
                parts.append("\n")
            parts.append(inner if inner.endswith("\n") else inner + "\n")
        elif tag and not tag.startswith("-") and tag not in _SKIP:
            parts.append(_pre_text(child))
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
    markdown = "\n\n".join(_Converter(base_url).blocks(root))
    return _BLANK_LINES.sub("\n\n", markdown).strip()
