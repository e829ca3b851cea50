"""Dual-branch simplification: one walk of the DOM yields both aligned block sequences.

The walk (paper, Appendix I) does, in one pass over a lexbor tree:

1. cleaning: drops non-content subtrees (``SimplifyConfig.remove_tags``, page-level
   ``header``/``footer``/``aside`` outside ``article``/``main``, elements whose
   class/id name them as navigation (unless they hold the title, an ``article`` or
   ``main``), hidden elements (``hidden``, ``display: none``, ``visibility: hidden``),
   comments, empty ``noscript``). Not hidden: ``aria-hidden`` (it hides from assistive
   technology, not from view; product drawers, accordions and size guides carry it while
   holding the page's text), what the reader opens with a click (a tab panel,
   ``role="tabpanel"``, as with a code sample's other languages; an element whose id an
   ``aria-controls`` names, as with an accordion's answers) and ``hidden="until-found"``
   (the browser shows it to find-in-page); the labeller decides, as it does for an
   ``aside`` inside the article. Content that a page streams in (React's streaming server
   rendering: ``<div hidden id="S:n">`` segments that its runtime moves into the
   ``<template id="B:n">`` or ``"P:n"`` placeholder) is hidden only until the page's
   script runs: it is walked at its placeholder, where the reader sees it, or where it
   lies if the walk never reached its placeholder (``_Walker.place_segments``); a
   boundary's fallback (``Loading``, a skeleton) goes when its content is placed, as the
   script removes it;
2. segmentation: block-level elements whose content is all inline become blocks; runs of
   inline content and loose text between blocks become blocks wrapped in ``<p>``; data
   tables, content lists, ``pre``, ``math`` and ``figure`` stay whole; layout tables and
   lists holding sections are recursed into;
3. two serialisations of every block: the *simplified* one (attributes pruned to class
   and id, img alt/src, whitespace collapsed, long text truncated, long lists shortened)
   and the *mapping* one (full text and the attributes that Markdown needs).

Blocks get ids 1..n in document order. The simplified page keeps the class/id-carrying
containers around the blocks (semantic cues for the labeller) and tags each block's root
with ``_item_id``, the form the published models read.
"""

from __future__ import annotations

import html as htmlmod
import re
import time
from dataclasses import dataclass, field, fields

from selectolax.lexbor import LexborHTMLParser, LexborNode

from dripstream.processors.errors import PageTimeout, TooDeep, TooLarge, TooManyElements
from dripstream.processors.extract.html_tags import BLOCK_TAGS, VOID_TAGS
from dripstream.processors.extract.page_hints import page_hints

# Elements kept whole as one block (lists and tables only when they hold content, see below).
ATOMIC_TAGS = frozenset(("pre", "figure", "table", "ul", "ol", "dl"))
# Inside these, loose text is still "inline": they never split into blocks themselves.
_NEVER_EMPTY = frozenset(("img", "br", "hr", "math"))
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_NAME_SPLIT = re.compile(r"[^a-z0-9]+")
_WHITESPACE = re.compile(r"\s+")
_STREAMED_SEGMENT = 'hidden id="S:'  # in the HTML: the page streams content (React)
_SEGMENT_ID = re.compile(r"^S:([0-9a-f]+)$")  # React numbers its segments in hex
_PLACEHOLDER = re.compile(r"^[BP]:([0-9a-f]+)$")  # a template that a segment replaces
# Comments that open and close a Suspense boundary; the fallback of a boundary whose
# content streamed (``B:n``) lies between its template and the closing comment.
_BOUNDARY_OPENS = frozenset(("$", "$?", "$!"))
_BOUNDARY_CLOSE = "/$"
# Inside a list or a table, these make it a layout container rather than one content unit.
_LAYOUT_LIST_SELECTOR = "h1, h2, h3, h4, h5, h6, table, article, section, blockquote, pre, form"
_LAYOUT_TABLE_SELECTOR = "div, p, ul, ol, h1, h2, h3, h4, h5, h6, article, section, form"
# Pre-parse checks (``check_markup``): an HTML5 parser's work is not bounded by the size of
# its input, so hostile markup is refused before it is parsed, by a cheap scan of its tags:
# - depth: lexbor's tree building slows down sharply past a few thousand open elements.
#   Elements whose end tag is optional are not counted (they close implicitly), void
#   elements never nest; ruby parts (rb rt rp rtc) close implicitly only inside <ruby>, and
#   inside <svg>/<math> every element nests;
# - element count: more tags than twice the element limit is refused without a closer look
#   (a C-speed count, so 16 MB of <br> costs no more than a fraction of a second);
# - the active formatting elements: a formatting element left open (<b>, <font>, ...) is
#   re-created by the parser in every later block it runs into ("reconstruct the active
#   formatting elements"), so 2,000 open <b> before 2,000 <p> make 4 million elements out of
#   29 KB. The estimate adds, at every block start, the formatting elements open at that
#   point (at most three of a kind, as the parser keeps them: the Noah's Ark clause).
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)([^>]*)")
_ANY_TAG = re.compile(r"</?[a-zA-Z]")
_NOT_NESTING = VOID_TAGS | frozenset(
    "p li dt dd tr td th option optgroup thead tbody tfoot colgroup caption".split()
)
_RUBY_PARTS = frozenset(("rb", "rt", "rtc", "rp"))
_FOREIGN = frozenset(("svg", "math"))
_FORMATTING = frozenset("a b big code em font i nobr s small strike strong tt u".split())


def _any_case(word: str) -> str:
    """A pattern of ``word`` in any letter case (``em`` -> ``[eE][mM]``): over a whole
    page, faster than the same pattern under ``re.IGNORECASE``."""
    return "".join(f"[{c.lower()}{c.upper()}]" for c in word)


_LONGER_FORMATTING = "|".join(map(_any_case, sorted(_FORMATTING - {"a", "b", "i", "s", "u"})))
# Matched on the page's UTF-8 bytes when the caller has them (the parser reads those; a
# bytes scan costs half the time of one over a str with non-ASCII characters), where
# ``\s`` is ASCII whitespace only, as for the HTML tokenizer.
_FIRST_LETTERS = "".join(sorted({name[0] for name in _FORMATTING - {"a"}}))
# The look-ahead turns away most "<" at one class test, before the alternatives are tried.
_FORMATTING_START = (
    rf"<(?=[{_FIRST_LETTERS}{_FIRST_LETTERS.upper()}])(?:[bisuBISU]|{_LONGER_FORMATTING})[\s/>]"
)
_FORMATTING_START_TEXT = re.compile(_FORMATTING_START)
_FORMATTING_START_UTF8 = re.compile(_FORMATTING_START.encode("ascii"))
# At most one open at a time: a new one closes the one before.
_ONE_OPEN = frozenset(("a", "nobr", "button", "form"))
# Start tags where formatting elements opened inside the previous block are re-created.
_BLOCK_STARTS = BLOCK_TAGS - frozenset(("body", "html"))
PARSE_DEPTH_LIMIT = 4096
# Containers kept in the simplified page even without class/id: layout-table structure
# (so a parser reading the page again keeps every block in its cell, in order) and the
# semantic content containers (a strong cue for the labeller, at a few tokens).
_KEPT_CONTAINERS = frozenset(
    ("table", "caption", "thead", "tbody", "tfoot", "tr", "td", "th", "article", "main")
)

DEFAULT_REMOVE_TAGS = frozenset(
    "script style template head title iframe svg canvas object embed noembed applet audio "
    "video source track map area link meta base nav button input select option "
    "optgroup textarea datalist dialog frameset frame".split()
)
DEFAULT_NAV_WORDS = frozenset(
    "nav navbar navigation menu footer header breadcrumb breadcrumbs sidebar".split()
)
_MAPPING_ATTRS = {
    "a": ("href", "title"),
    "img": ("src", "alt", "title"),
    "td": ("colspan", "rowspan"),
    "th": ("colspan", "rowspan"),
    "ol": ("start",),
    "math": ("alttext", "display"),
    "annotation": ("encoding",),
}
_LAZY_SRC_ATTRS = ("data-src", "data-original", "data-lazy-src", "data-url")


@dataclass(frozen=True)
class SimplifyConfig:
    """Settings of the simplifier; the defaults follow the paper."""

    remove_tags: frozenset[str] = DEFAULT_REMOVE_TAGS
    remove_page_regions: bool = True  # header / footer / aside outside <article>/<main>
    nav_words: frozenset[str] = DEFAULT_NAV_WORDS  # class/id words that mark navigation
    max_text_chars: int = 200  # per text run in the simplified branch
    max_list_items: int = 10  # items kept per list in the simplified branch
    max_input_chars: int = 16 * 1024 * 1024
    max_depth: int = 256
    max_elements: int = 400_000
    timeout_s: float = 10.0
    # Name of an attribute (e.g. an annotation mark) whose presence on or around a block
    # is reported in SimplifiedDocument.marked; it is never written to either branch.
    mark_attr: str | None = None

    def __reduce__(self) -> tuple[type[SimplifyConfig], tuple[object, ...]]:
        # Pickled (to a sandbox's child) by its fields in order: compiled (setup.py), a
        # frozen class cannot be restored field by field.
        return (SimplifyConfig, tuple(getattr(self, name.name) for name in fields(self)))


@dataclass
class SimplifiedDocument:
    """Result of simplify(): ``simplified_blocks[i]`` and ``mapping_blocks[i]`` align."""

    title: str
    simplified_html: str
    simplified_blocks: list[str]
    mapping_blocks: list[str]
    marked: list[bool] = field(default_factory=list)
    hints: tuple[str, ...] = ()  # what the page says it is (page_hints)

    @property
    def block_count(self) -> int:
        return len(self.mapping_blocks)


class _Inline:
    """A run of inline content, serialised in both branches. (Plain classes, not
    dataclasses, for the walk's two item kinds: compiled, a dataclass keeps the
    interpreted ``__init__`` that the dataclasses module writes.)"""

    __slots__ = ("has_media", "mapp", "marked", "simp", "text_len")

    def __init__(
        self, simp: list[str], mapp: list[str], text_len: int, has_media: bool, marked: bool
    ) -> None:
        self.simp = simp
        self.mapp = mapp
        self.text_len = text_len
        self.has_media = has_media
        self.marked = marked

    def extend(self, other: _Inline) -> None:
        self.simp.extend(other.simp)
        self.mapp.extend(other.mapp)
        self.text_len += other.text_len
        self.has_media = self.has_media or other.has_media
        self.marked = self.marked or other.marked

    @property
    def has_content(self) -> bool:
        return self.text_len > 0 or self.has_media


class _Block:
    """One block: the simplified open tag is split so the id can be injected last."""

    __slots__ = ("map_head", "map_tail", "marked", "simp_head", "simp_tail")

    def __init__(
        self, simp_head: str, simp_tail: str, map_head: str, map_tail: str, marked: bool
    ) -> None:
        self.simp_head = simp_head  # "<p class=x"
        self.simp_tail = simp_tail  # ">...</p>"
        self.map_head = map_head
        self.map_tail = map_tail
        self.marked = marked


_Item = _Inline | _Block | str  # str: container markup in the simplified page


def _escape_text(text: str) -> str:
    # Most text has nothing to escape: three substring tests beat the function call.
    if "&" in text or "<" in text or ">" in text:
        return htmlmod.escape(text, quote=False)
    return text


def _escape_value(value: str) -> str:
    if "&" in value or '"' in value or "<" in value or ">" in value or "'" in value:
        return htmlmod.escape(value)
    return value


def _names_navigation(
    class_name: str | None, element_id: str | None, words: frozenset[str]
) -> bool:
    """Whether a class/id pair holds one of ``words`` (split on non-alphanumerics)."""
    names = _NAME_SPLIT.split(f"{class_name or ''} {element_id or ''}".lower())
    return not words.isdisjoint(names)


# Per navigation word set (one per configuration): (class, id) -> whether the pair names
# navigation.
_NAV_NAMES: dict[frozenset[str], dict[tuple[str | None, str | None], bool]] = {}
_NAV_NAMES_LIMIT = 20_000


# (tag, class, id) -> the open tags of both branches (see _Walker._open_tags).
_OPEN_TAGS: dict[tuple[str, str | None, str | None], tuple[str, str]] = {}
_OPEN_TAGS_LIMIT = 20_000  # a few MB at most


def _attrs_markup(attrs: list[tuple[str, str]]) -> str:
    markup = ""
    for name, value in attrs:  # one or two attributes: a loop beats a joined generator
        markup += f' {name}="{_escape_value(value)}"'
    return markup


def _image_src(attributes: dict[str, str | None]) -> str:
    src = attributes.get("src") or ""
    if not src or src.startswith("data:"):
        for name in _LAZY_SRC_ATTRS:
            candidate = attributes.get(name)
            if candidate and not candidate.startswith("data:"):
                return candidate
        srcset = attributes.get("srcset") or attributes.get("data-srcset")
        if srcset:
            return srcset.split(",")[0].strip().split(" ")[0]
        return ""
    return src


def _placeholder(attributes: dict[str, str | None]) -> str | None:
    """The segment number a placeholder template (``B:n`` / ``P:n``) stands for."""
    match = _PLACEHOLDER.match(attributes.get("id") or "")
    return match.group(1) if match else None


def _fallback_nesting(node: LexborNode, nesting: int) -> int:
    """Walking a placed boundary's fallback (left out): the boundary nesting after
    ``node``, -1 once ``node`` is the comment that closes the boundary."""
    if node.tag != "-comment":
        return nesting
    data = (node.comment_content or "").strip()
    if data == _BOUNDARY_CLOSE:
        return nesting - 1
    return nesting + 1 if data in _BOUNDARY_OPENS else nesting


class _Walker:
    """Single-use state of one simplify() call."""

    def __init__(self, config: SimplifyConfig, root: LexborNode | None = None) -> None:
        self.config = config
        self.root = root
        self._holders: dict[str, set[int]] = {}
        self._controlled: set[str] | None = None  # ids named by an aria-controls, when needed
        self._body_text_len: int | None = None  # read when first needed
        self._nav_names = _NAV_NAMES.setdefault(config.nav_words, {})
        if len(self._nav_names) > _NAV_NAMES_LIMIT:  # bounded; pages repeat the same pairs
            self._nav_names.clear()
        self.elements = 0
        self.deadline = time.monotonic() + config.timeout_s
        self.mark_attr = config.mark_attr
        self._segments: dict[str, LexborNode] = {}  # streamed segments by placeholder number
        self._placing: int | None = None  # mem_id of the segment being walked at its place
        self._fallback_follows = False  # a boundary's content was placed: skip its fallback

    def place_segments(self, root: LexborNode) -> None:
        """Remember the page's streamed segments (``div[hidden]#S:n`` with a placeholder
        template), so that each is walked at its placeholder instead of being dropped as
        hidden."""
        placeholders = {_placeholder(template.attributes) for template in root.css("template[id]")}
        for node in root.css('div[hidden][id^="S:"]'):
            match = _SEGMENT_ID.match(node.attributes.get("id") or "")
            if match and match.group(1) in placeholders:
                self._segments.setdefault(match.group(1), node)

    def _segment_at(self, template: LexborNode) -> LexborNode | None:
        return self._segments.get(_placeholder(template.attributes) or "")

    def _left_unplaced(self, attributes: dict[str, str | None]) -> bool:
        """A streamed segment whose placeholder the walk never reached (it lay in a removed
        element): shown where it is, for the labeller to judge."""
        if not self._segments:
            return False
        match = _SEGMENT_ID.match(attributes.get("id") or "")
        return match is not None and self._segments.pop(match.group(1), None) is not None

    def _text_len(self, node: LexborNode) -> int:
        """The element's text length, with the streamed segments it will hold."""
        size = len(node.text(deep=True) or "")
        if self._segments:
            for template in node.css("template[id]"):
                segment = self._segment_at(template)
                if segment is not None:
                    size += len(segment.text(deep=True) or "")
        return size

    def _streamed(
        self,
        attributes: dict[str, str | None],
        depth: int,
        atomic: bool,
        in_article: bool,
        in_pre: bool,
    ) -> _Item | list[_Item] | None:
        """The streamed segment that replaces this placeholder template, walked here (once:
        its own place, at the end of the body, stays hidden). A boundary's (``B:n``)
        content replaces its fallback too, which the caller then skips."""
        segment = self._segments.pop(_placeholder(attributes) or "", None)
        if segment is None:  # not a placeholder: a template, removed as ever
            return None
        self._placing = segment.mem_id
        try:
            piece = self.element(segment, "div", depth, atomic, in_article, in_pre)
        finally:
            self._placing = None
        self._fallback_follows = (attributes.get("id") or "").startswith("B")
        return piece

    # -- cleaning -----------------------------------------------------------------------

    def _removed(
        self, node: LexborNode, tag: str, attributes: dict[str, str | None], in_article: bool
    ) -> bool:
        config = self.config
        if tag in config.remove_tags:
            return True
        if tag == "noscript":
            return not (node.text(deep=True) or "").strip()
        if config.remove_page_regions and tag in ("header", "footer", "aside"):
            return not in_article
        if not attributes:
            return False
        tab = attributes.get("role") == "tabpanel"  # hidden until a click on its tab
        if "hidden" in attributes and not tab and attributes["hidden"] != "until-found":
            if node.mem_id == self._placing or self._left_unplaced(attributes):
                return False
            if not self._disclosed(attributes):
                return True
        style = attributes.get("style")
        if style and not tab and _HIDDEN_STYLE.search(style) and not self._disclosed(attributes):
            return True
        if attributes.get("type") == "hidden":
            return True
        if not config.nav_words or ("class" not in attributes and "id" not in attributes):
            return False
        names = (attributes.get("class"), attributes.get("id"))
        named = self._nav_names.get(names)
        if named is None:
            named = self._nav_names[names] = _names_navigation(*names, config.nav_words)
        return named and self._navigation_region(node)

    def _disclosed(self, attributes: dict[str, str | None]) -> bool:
        """Whether a control on the page opens the element: its id is named by an
        ``aria-controls`` (an accordion's answer, a "read more" panel)."""
        element_id = attributes.get("id")
        if not element_id:
            return False
        if self._controlled is None:
            self._controlled = set()
            for control in self.root.css("[aria-controls]") if self.root is not None else ():
                self._controlled.update((control.attributes.get("aria-controls") or "").split())
        return element_id in self._controlled

    def _navigation_region(self, node: LexborNode) -> bool:
        """An element whose class/id names navigation: not where the page's text is, nor
        around its title, its article or its main region."""
        if node.tag == "h1" or self._holds(node, "h1, article, main"):
            return False
        if self._body_text_len is None:
            text = self.root.text(deep=True) if self.root is not None else ""
            self._body_text_len = max(len(text or ""), 1)
        return self._text_len(node) < 0.2 * self._body_text_len

    def _holds(self, node: LexborNode, selector: str) -> bool:
        """Whether an element below ``node`` matches ``selector``. One search of the page per
        selector, every match marking its ancestors, instead of one subtree search per
        element: that is quadratic when lists or tables nest around a large subtree."""
        holders = self._holders.get(selector)
        if holders is None:
            holders = set()
            for match in self.root.css(selector) if self.root is not None else ():
                parent = match.parent
                while parent is not None and parent.mem_id not in holders:
                    holders.add(parent.mem_id)
                    parent = parent.parent
            self._holders[selector] = holders
        return node.mem_id in holders

    # -- walking ------------------------------------------------------------------------

    def _tick(self) -> None:
        self.elements += 1
        if self.elements > self.config.max_elements:
            raise TooManyElements(f"more than {self.config.max_elements} elements")
        if time.monotonic() > self.deadline:  # every element: a few ns, a bound that holds
            raise PageTimeout(f"simplification exceeded {self.config.timeout_s:g} s")

    def children(
        self,
        node: LexborNode,
        depth: int,
        atomic: bool,
        in_article: bool,
        in_pre: bool,
        list_limit: int = 0,
    ) -> tuple[list[_Item], bool, list[int]]:
        """Walk the children of ``node``; consecutive inline pieces are merged. Returns the
        items, whether any is not inline (a block or container markup), and the positions
        of the inline runs.

        With ``list_limit``, list items past that count are left out of the simplified
        branch (the mapping branch keeps them).
        """
        items: list[_Item] = []
        has_blocks = False
        inline_at: list[int] = []
        last_inline: _Inline | None = None  # items[-1] when it is an inline run
        list_items = 0
        fallback = -1  # >= 0: in a placed boundary's fallback, at this boundary nesting
        piece: _Item | list[_Item] | None
        for child in node.iter(include_text=True):
            tag = child.tag
            if fallback >= 0:
                fallback = _fallback_nesting(child, fallback)
                continue
            if tag == "-text":
                text = child.text_content or ""
                if last_inline is not None and not in_pre and text.isspace():
                    last_inline.simp.append(" ")  # indentation joins the run before it
                    last_inline.mapp.append(text)
                    continue
                piece = self._text(text, in_pre)
                if piece is None:
                    continue
            elif tag == "-comment" or tag is None or tag.startswith("-"):
                continue
            else:
                piece = self.element(child, tag, depth + 1, atomic, in_article, in_pre)
                if self._fallback_follows:
                    self._fallback_follows = False
                    fallback = 0
                if piece is None:
                    continue
                if list_limit and tag == "li":
                    list_items += 1
                    if list_items > list_limit and type(piece) is _Inline:
                        piece.simp = []
            if type(piece) is _Inline:
                if last_inline is not None:
                    last_inline.extend(piece)
                else:
                    inline_at.append(len(items))
                    items.append(piece)
                    last_inline = piece
                continue
            if isinstance(piece, list):
                items.extend(piece)
            else:
                items.append(piece)
            has_blocks = True
            last_inline = None
        return items, has_blocks, inline_at

    def _text(self, text: str, in_pre: bool) -> _Inline | None:
        if not text:
            return None
        if not in_pre and text.isspace():  # most text nodes: the indentation between tags
            return _Inline([" "], [text], 0, False, False)
        if in_pre:
            simp = (
                text
                if len(text) <= self.config.max_text_chars * 4
                else text[: self.config.max_text_chars * 4]
            )
        else:
            # Every whitespace character but the space is unprintable: a printable text
            # without double spaces has nothing to collapse.
            simp = text if text.isprintable() and "  " not in text else _WHITESPACE.sub(" ", text)
            if len(simp) > self.config.max_text_chars:
                simp = simp[: self.config.max_text_chars]
        size = len(text.strip())
        if "&" in text or "<" in text or ">" in text:
            simp, text = _escape_text(simp), _escape_text(text)
        return _Inline([simp], [text], size, False, False)

    def element(
        self, node: LexborNode, tag: str, depth: int, atomic: bool, in_article: bool, in_pre: bool
    ) -> _Item | list[_Item] | None:
        self._tick()
        if depth > self.config.max_depth:
            raise TooDeep(f"the document nests deeper than {self.config.max_depth} elements")
        attributes = node.attributes
        if tag == "script" and (attributes.get("type") or "").startswith("math/tex"):
            return self._tex_script(node, attributes)
        if tag == "template" and self._segments:
            return self._streamed(attributes, depth, atomic, in_article, in_pre)
        if self._removed(node, tag, attributes, in_article):
            return None
        marked = self.mark_attr is not None and self.mark_attr in attributes
        in_article = in_article or tag in ("article", "main")
        if tag in VOID_TAGS:
            return self._void(tag, attributes, marked)
        starts_atomic = not atomic and tag in ATOMIC_TAGS and self._is_content_unit(node, tag)
        inner_atomic = atomic or starts_atomic or tag == "math"
        list_limit = self.config.max_list_items if starts_atomic and tag in ("ul", "ol") else 0
        items, has_blocks, inline_at = self.children(
            node, depth, inner_atomic, in_article, in_pre or tag == "pre", list_limit
        )
        if not has_blocks:
            inline = self._wrap_inline(tag, attributes, items, marked)
            if inline is None:
                return None
            if starts_atomic or (not atomic and tag in BLOCK_TAGS):
                return self._make_block(inline)
            return inline
        # A container: its inline runs become blocks, its markup stays in the simplified page.
        simp_open = self._open_tags(tag, attributes)[0] if attributes else f"<{tag}>"
        keep_markup = len(simp_open) > len(tag) + 2 or tag in _KEPT_CONTAINERS
        if marked:
            for item in items:
                if type(item) is _Block:
                    item.marked = True
        if not inline_at and not keep_markup:
            return items
        out: list[_Item] = [simp_open] if keep_markup else []
        # Only the inline runs change (into blocks, or out when empty): the rest is copied
        # by slices, not visited, as a container's items hold all the blocks below it.
        start = 0
        for index in inline_at:
            out.extend(items[start:index])
            run = items[index]
            assert type(run) is _Inline
            wrapped = self._wrap_inline("p", {}, [run], marked) if run.has_content else None
            if wrapped is not None:
                out.append(self._make_block(wrapped))
            start = index + 1
        out.extend(items[start:])
        if keep_markup:
            out.append(f"</{tag}>")
        return out

    def _is_content_unit(self, node: LexborNode, tag: str) -> bool:
        """Tables and lists stay whole unless they are page layout."""
        if tag == "table":
            role = (node.attributes.get("role") or "").lower()
            return (
                role not in ("presentation", "none")
                and not self._holds(node, _LAYOUT_TABLE_SELECTOR)
                and not self._holds(node, "table")
            )
        if tag in ("ul", "ol", "dl"):
            return not self._holds(node, _LAYOUT_LIST_SELECTOR)
        return True

    def _open_tags(self, tag: str, attributes: dict[str, str | None]) -> tuple[str, str]:
        """The element's open tag in the simplified and the mapping branch. Pages repeat
        the same few (tag, class, id), which is all the simplified tag holds (but for
        ``img``, a void element never wrapped here), and all the mapping tag holds but for
        the tags with mapping attributes (``a`` and its ``href``, ...): remembered."""
        key = (tag, attributes.get("class"), attributes.get("id"))
        tags = _OPEN_TAGS.get(key)
        if tags is None:
            tags = (
                f"<{tag}{_attrs_markup(self._simp_attrs(tag, attributes))}>",
                f"<{tag}{_attrs_markup(self._map_attrs(tag, attributes))}>",
            )
            if len(_OPEN_TAGS) >= _OPEN_TAGS_LIMIT:  # bounded; pages repeat the same keys
                _OPEN_TAGS.clear()
            _OPEN_TAGS[key] = tags
        if tag in _MAPPING_ATTRS:
            return tags[0], f"<{tag}{_attrs_markup(self._map_attrs(tag, attributes))}>"
        return tags

    def _simp_attrs(self, tag: str, attributes: dict[str, str | None]) -> list[tuple[str, str]]:
        attrs = []
        for name in ("class", "id"):
            value = attributes.get(name)
            if value and value.strip():
                attrs.append((name, _WHITESPACE.sub(" ", value.strip())))
        if tag == "img":
            alt = attributes.get("alt")
            if alt:
                attrs.append(("alt", alt))
            src = _image_src(attributes)
            if src:
                attrs.append(("src", src))
        return attrs

    def _map_attrs(self, tag: str, attributes: dict[str, str | None]) -> list[tuple[str, str]]:
        attrs = []
        cls = attributes.get("class")
        if cls and cls.strip():
            attrs.append(("class", cls.strip()))
        for name in _MAPPING_ATTRS.get(tag, ()):
            value = _image_src(attributes) if name == "src" else attributes.get(name)
            if value:
                attrs.append((name, value))
        return attrs

    def _void(self, tag: str, attributes: dict[str, str | None], marked: bool) -> _Inline | None:
        if tag == "br":
            return _Inline(["<br>"], ["<br>"], 0, False, marked)
        if tag == "hr":
            return _Inline(["<hr>"], ["<hr>"], 0, False, marked)
        if tag == "img":
            simp = f"<img{_attrs_markup(self._simp_attrs(tag, attributes))}>"
            mapp = f"<img{_attrs_markup(self._map_attrs(tag, attributes))}>"
            has_media = bool(_image_src(attributes))
            return _Inline([simp], [mapp], 0, has_media, marked)
        return None

    def _tex_script(self, node: LexborNode, attributes: dict[str, str | None]) -> _Inline | None:
        tex = (node.text(deep=True) or "").strip()
        if not tex:
            return None
        fence = "$$" if "mode=display" in (attributes.get("type") or "") else "$"
        text = _escape_text(f"{fence}{tex}{fence}")
        return _Inline([text], [text], len(tex), False, False)

    def _wrap_inline(
        self, tag: str, attributes: dict[str, str | None], items: list[_Item], marked: bool
    ) -> _Inline | None:
        inner = items[0] if items else _Inline([], [], 0, tag in _NEVER_EMPTY, False)
        assert isinstance(inner, _Inline)
        if not inner.has_content and tag not in _NEVER_EMPTY:
            return None
        if attributes:
            simp_open, map_open = self._open_tags(tag, attributes)
        else:
            simp_open = map_open = f"<{tag}>"
        close = f"</{tag}>"
        return _Inline(
            [simp_open, *inner.simp, close],
            [map_open, *inner.mapp, close],
            inner.text_len,
            inner.has_media,
            inner.marked or marked,
        )

    @staticmethod
    def _make_block(inline: _Inline) -> _Block:
        """Turn a wrapped inline run (first part is the root's open tag) into a block."""
        simp_open, map_open = inline.simp[0], inline.mapp[0]
        return _Block(
            simp_head=simp_open[:-1],
            simp_tail=">" + "".join(inline.simp[1:]),
            map_head=map_open[:-1],
            map_tail=">" + "".join(inline.mapp[1:]),
            marked=inline.marked,
        )


def _title(tree: LexborHTMLParser) -> str:
    node = tree.css_first("title")
    title = node.text(deep=True).strip() if node is not None else ""
    if not title:
        node = tree.css_first("h1")
        title = node.text(deep=True).strip() if node is not None else ""
    return _WHITESPACE.sub(" ", title)


def check_markup(
    html: str, config: SimplifyConfig | None = None, utf8: bytes | None = None
) -> None:
    """Refuse markup whose parse would be too deep or create too many elements, before it
    is parsed (see the pre-parse notes at the top): TooDeep past PARSE_DEPTH_LIMIT open
    elements, TooManyElements past twice ``max_elements`` tags or when the estimate of the
    elements the parser creates exceeds ``max_elements``. ``utf8``, when given, is
    ``html`` encoded as UTF-8: the C-speed bounds count on it (the same "<" as in the
    text, ASCII never occurs inside a multi-byte character)."""
    limit = (config or SimplifyConfig()).max_elements
    opens = utf8.count(b"<") if utf8 is not None else html.count("<")
    if opens > 2 * limit:  # C-speed bound first; the exact count only then
        tags = sum(1 for _ in _ANY_TAG.finditer(html))
        if tags > 2 * limit:
            raise TooManyElements(f"the markup holds {tags} tags, more than {2 * limit}")
    # Most pages are safe by C-speed bounds alone, which skips the scan below: the depth
    # is at most the start tags; the estimate at most the start tags times the formatting
    # elements that can be open (every one but <a>, which closes the one before, plus it).
    # The start tags are at most the "<"s; counting the end tags too (a slower search) is
    # only needed when that is not bound enough.
    if opens <= PARSE_DEPTH_LIMIT:
        starts = opens
    elif utf8 is not None:
        starts = opens - utf8.count(b"</")
    else:
        starts = opens - html.count("</")
    if starts <= PARSE_DEPTH_LIMIT:
        if utf8 is not None:
            formatting_starts = len(_FORMATTING_START_UTF8.findall(utf8))
        else:
            formatting_starts = len(_FORMATTING_START_TEXT.findall(html))
        if starts * (formatting_starts + 2) <= limit:
            return
    depth = ruby = foreign = 0
    starts = rebuilt = active = 0
    one_open: set[str] = set()
    formatting: dict[str, list[str]] = {}  # open formatting elements by name: their keys
    kinds: dict[str, int] = {}  # how many of each (name, attributes) are kept open
    for match in _TAG.finditer(html):
        closing, name, rest = match.groups()
        name = name.lower()
        if closing:
            if name in _FORMATTING and formatting.get(name):
                key = formatting[name].pop()
                kinds[key] -= 1
                active -= 1
            if name in _RUBY_PARTS and ruby:
                continue
            if name == "ruby":
                ruby = max(ruby - 1, 0)
            elif name in _FOREIGN:
                foreign = max(foreign - 1, 0)
            if name in _ONE_OPEN:
                if name not in one_open:
                    continue
                one_open.discard(name)
            if name not in _NOT_NESTING or foreign:
                depth = max(depth - 1, 0)
            continue
        starts += 1
        if name in _BLOCK_STARTS and active:
            rebuilt += active
            if starts + rebuilt > limit:
                raise TooManyElements(
                    f"the markup would make the parser create more than {limit} elements: "
                    f"{active} formatting elements left open are re-created in every block"
                )
        if name in _FORMATTING:
            if name == "a" and formatting.get("a"):
                kinds[formatting["a"].pop()] -= 1
                active -= 1
            key = f"{name} {rest.strip().lower()}"
            if kinds.get(key, 0) < 3:
                formatting.setdefault(name, []).append(key)
                kinds[key] = kinds.get(key, 0) + 1
                active += 1
        if rest.rstrip().endswith("/") and foreign:
            continue  # self-closing in SVG / MathML
        if name in _ONE_OPEN:
            if name in one_open:
                continue
            one_open.add(name)
        if name == "ruby":
            ruby += 1
        elif name in _RUBY_PARTS:
            if ruby:
                continue
        elif name in _FOREIGN:
            foreign += 1
        elif name in _NOT_NESTING and not (foreign and name not in VOID_TAGS):
            continue
        depth += 1
        if depth > PARSE_DEPTH_LIMIT:
            raise TooDeep(f"the markup opens more than {PARSE_DEPTH_LIMIT} nested elements")


def simplify(
    html: str, config: SimplifyConfig | None = None, utf8: bytes | None = None
) -> SimplifiedDocument:
    """Simplify decoded HTML into aligned simplified and mapping blocks. ``utf8``, when
    given, must be ``html`` encoded as UTF-8 (the page's own bytes, ``DecodedHtml``): the
    parser reads it instead of encoding ``html`` again.

    Raises TooLarge, TooDeep, TooManyElements or PageTimeout; an input without content
    yields a document with zero blocks (the caller decides what that means).
    """
    config = config or SimplifyConfig()
    if len(html) > config.max_input_chars:
        raise TooLarge(f"{len(html)} characters, limit {config.max_input_chars}")
    check_markup(html, config, utf8)
    tree = LexborHTMLParser(html if utf8 is None else utf8)
    hints = page_hints(tree)
    root = tree.body or tree.root
    if root is None:
        return SimplifiedDocument(_title(tree), "", [], [], [], hints)
    walker = _Walker(config, root)
    if _STREAMED_SEGMENT in html:
        walker.place_segments(root)
    piece = walker.element(root, root.tag or "body", 0, False, False, False)
    items = piece if isinstance(piece, list) else [piece] if piece is not None else []
    simplified_parts: list[str] = []
    simplified_blocks: list[str] = []
    mapping_blocks: list[str] = []
    marked: list[bool] = []
    for item in items:
        if isinstance(item, str):
            simplified_parts.append(item)
            continue
        if isinstance(item, _Inline):  # only when the root is not a block-level tag
            wrapped = walker._wrap_inline("p", {}, [item], item.marked)
            if wrapped is None:
                continue
            item = walker._make_block(wrapped)
        block = item
        item_id = f' _item_id="{len(mapping_blocks) + 1}"'
        simp = block.simp_head + item_id + block.simp_tail
        simplified_blocks.append(simp)
        simplified_parts.append(simp)
        mapping_blocks.append(block.map_head + item_id + block.map_tail)
        marked.append(block.marked)
    return SimplifiedDocument(
        title=_title(tree),
        simplified_html="".join(simplified_parts),
        simplified_blocks=simplified_blocks,
        mapping_blocks=mapping_blocks,
        marked=marked,
        hints=hints,
    )


def flat_items(simplified_html: str) -> str:
    """The blocks alone, one after another in a minimal document, without the containers
    around them: the form the published Dripper models were trained on."""
    items = LexborHTMLParser(simplified_html).css("[_item_id]")
    body = "".join(node.html or "" for node in items)
    return f'<html><head><meta charset="utf-8"></head><body>{body}</body></html>'
