"""Block signatures: the keys under which a site template counts a teacher's labels.

- A block's **signature** is its path in the simplified DOM, one ``tag#id.class.class``
  step per element, from its fifth ancestor down to the block, ending in ``~links`` when
  its text is mostly link text (``LINKS_SHARE``) and ``~empty`` when it has none.
- An id counts only when it is one lowercase word (``content``, ``sidebar``) and not the
  slug of the heading that opens its element (a table-of-contents anchor).
- Class tokens are generalised (``generalise``: digit runs -> ``#``, machine-made parts ->
  ``*``, a token over ``MAX_TOKEN_CHARS`` -> ``*`` whole); tokens naming a state or a
  place in a row (``odd``, ``active``, ``is-*``) are dropped.
- Each block also has **back-off signatures** (``BACKOFF``, most specific first), starting
  with ``BACKOFF_MARK``.
- A page's **site** is its registrable domain (public suffix list, shipped snapshot).

``SIGNATURE_RULES`` versions these rules: bump it whenever a page's blocks would get other
keys, so that states learnt under the old rules are not loaded.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urlsplit

from selectolax.lexbor import LexborHTMLParser, LexborNode

from dripstream.processors.extract.html_tags import HEADING_TAGS, block_text

# The version of block_keys' rules (1: states written before the field existed).
SIGNATURE_RULES = 2
MAX_PATH_STEPS = 6  # a signature is the block and its 5 nearest ancestors
# Back-off signatures, most specific first: (steps left out below, steps kept). (0, 2): the
# block and its parent; (1, 2): any child of the block's parent and grandparent.
BACKOFF = ((0, 2), (1, 2))
BACKOFF_MARK = "*>"  # back-off signatures start with it (a CSS selector: any ancestors)
LINKS_MARK = "~links"  # ends the signature of a block whose text is mostly link text
LINKS_SHARE = 0.6
EMPTY_MARK = "~empty"  # ends the signature of a block without text (an image, a rule)
# A class token longer than this is machine-made: ``*`` whole, never cached or scanned by
# the patterns below (the longest in the shared data: 118 characters; no rules bump: a
# stored key with such a token is simply never matched again).
MAX_TOKEN_CHARS = 256
_LAYOUT_ID = re.compile(r"^[a-z]+$")  # an id that names a region: content, sidebar, footer
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")

_DIGITS = re.compile(r"\d+")
_CSS_MODULE = re.compile(r"^(.+?)__[A-Za-z0-9_-]{4,}$")  # Header_title__3xYz1
_CSS_IN_JS = re.compile(r"^(css|sc|jsx|emotion|svelte|tw)-[A-Za-z0-9_-]+$")  # css-1q2w3e
_ROOTS = frozenset(("body", "html", "-document"))
_SEPARATORS = re.compile(r"([-_]+)")
_LETTER = re.compile(r"[A-Za-z]")
# Class tokens that tell an element's state or place in a row, not its part in the layout:
# dropped from signatures, so a zebra row or an open menu is the same block as its siblings.
_STATE_WORDS = frozenset(
    """odd even first last active inactive selected unselected current open opened closed
    collapsed expanded collapse collapsible hidden visible show shown hide hover focus
    focused disabled enabled checked unchecked loaded loading lazyload lazyloaded lazy in
    out fade fadein fadeout animated animate on off""".split()
)
_STATE_PREFIX = re.compile(r"^(is|has)-.")  # is-active, has-children


_CAMEL_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_VOWEL = re.compile(r"[aeiouyAEIOUY]")


def _looks_random(part: str) -> bool:
    """A mixed-case run of letters that does not read as camelCase words (``cSNCliWjnECzm``,
    ``HdQgXObOdD``): most of its camel words are one or two letters or lack a vowel."""
    if len(part) < 8 or not part.isalpha() or part.islower() or part.isupper():
        return False
    words = _CAMEL_WORD.findall(part)
    odd = sum(1 for w in words if len(w) <= 2 or (not w.isupper() and not _VOWEL.search(w)))
    return odd >= 3 and 2 * odd >= len(words)


def generalise(token: str) -> str:
    """A class token without the parts that change from page to page or build to
    build: machine-made suffixes and letter-digit mixes -> ``*``, digit runs -> ``#``;
    a token over ``MAX_TOKEN_CHARS`` -> ``*`` (short tokens' results are cached)."""
    if len(token) > MAX_TOKEN_CHARS:
        return "*"
    return _generalise(token)


@lru_cache(maxsize=65536)
def _generalise(token: str) -> str:
    match = _CSS_IN_JS.match(token)
    if match:
        return f"{match.group(1)}-*"
    match = _CSS_MODULE.match(token)
    if match:
        return f"{match.group(1)}__*"
    parts = _SEPARATORS.split(token)
    for index, part in enumerate(parts):
        if index % 2:
            continue  # a separator
        mixed = len(part) >= 5 and _LETTER.search(part) and sum(c.isdigit() for c in part) >= 2
        if mixed or _looks_random(part):
            parts[index] = "*"
        else:
            parts[index] = _DIGITS.sub("#", part)
    return "".join(parts)


def _class_token(token: str) -> str | None:
    """A class token generalised, or None for a state word (``active``, ``odd``,
    ``is-open``): a token that says what state an element is in, not what it is."""
    lower = token.lower()
    if lower in _STATE_WORDS or _STATE_PREFIX.match(lower):
        return None
    return generalise(token)


def _anchor(node: LexborNode, element_id: str) -> bool:
    """The id is a table-of-contents anchor, the slug of the heading that opens the
    element (``<section id="sockets"><h2>Sockets</h2>``) or of the heading itself: it
    names a place in one page's text, not a region of the layout."""
    head = node if node.tag in HEADING_TAGS else next(node.iter(), None)
    if head is None or head.tag not in HEADING_TAGS:
        return False
    return _NOT_ALNUM.sub("", (head.text(deep=True) or "").lower()) == element_id


def _step(node: LexborNode) -> str:
    """The node's ``tag#id.class.class`` step."""
    attributes = node.attributes
    tag = node.tag or ""
    names = attributes.get("class") or ""
    element_id = attributes.get("id")
    if element_id and _LAYOUT_ID.match(element_id):
        if _anchor(node, element_id):
            element_id = None
        return _classes_step(f"{tag}#{element_id}" if element_id else tag, names)
    return _classes_step(tag, names)


@lru_cache(maxsize=65536)
def _classes_step(head: str, names: str) -> str:
    """``head`` and the step's class tokens, memoised: the same tags and class strings
    recur on every page of a site."""
    classes = sorted({name for t in names.split() if (name := _class_token(t))})
    return head + "".join(f".{name}" for name in classes)


def _link_chars(tree: LexborHTMLParser, blocks: set[int]) -> dict[int, int]:
    """Per block (by ``mem_id``), the link text it holds: each link's stripped text
    length, counted in every block it lies in (one pass over the page's links)."""
    chars: dict[int, int] = {}
    for anchor in tree.css("[_item_id] a"):
        length = len(anchor.text(strip=True))
        node: LexborNode | None = anchor.parent if length else None
        while node is not None:
            if node.mem_id in blocks:
                chars[node.mem_id] = chars.get(node.mem_id, 0) + length
            node = node.parent
    return chars


def _text_mark(block: LexborNode, links: int) -> str:
    """``EMPTY_MARK`` for a block without text, ``LINKS_MARK`` for one mostly of link
    text (``links``: its links' characters), else nothing."""
    text = len(block.text(strip=True))
    if not text:
        return EMPTY_MARK
    return LINKS_MARK if links >= LINKS_SHARE * text else ""


def block_keys(simplified_html: str) -> list[tuple[str, ...]]:
    """Per block, in block order (``_item_id`` 1..n): its signature, then its back-off
    signatures (``BACKOFF``, most specific first; those longer than the path left out).
    ``*>div.a>p`` is a ``p`` in a ``div.a``; ``*>ul.b>li.c>*`` any child of ``ul.b>li.c``."""
    tree = LexborHTMLParser(simplified_html)
    keys = []
    step_of: dict[int, str] = {}  # ancestors are shared by many blocks: one step each
    blocks = tree.css("[_item_id]")
    link_chars = _link_chars(tree, {block.mem_id for block in blocks})
    for block in blocks:
        steps: list[str] = []
        node: LexborNode | None = block
        while node is not None and node.tag not in _ROOTS and len(steps) < MAX_PATH_STEPS:
            step = step_of.get(node.mem_id)
            if step is None:
                step = step_of[node.mem_id] = _step(node)
            steps.append(step)
            node = node.parent
        steps.reverse()
        if steps:
            steps[-1] += _text_mark(block, link_chars.get(block.mem_id, 0))
        end = len(steps)
        backoff = (
            BACKOFF_MARK + ">".join(steps[end - skip - kept : end - skip]) + ">*" * skip
            for skip, kept in BACKOFF
            if skip + kept <= end
        )
        keys.append((">".join(steps), *backoff))
    return keys


def text_weight(mapping_block: str) -> int:
    """A block's weight in the agreement a page expects: its visible (non-space)
    characters, plus one, so that a block without text still counts."""
    return 1 + sum(map(len, block_text(mapping_block).split()))


def block_signatures(simplified_html: str) -> list[str]:
    """The signature of every block, in block order (``_item_id`` 1..n)."""
    return [keys[0] for keys in block_keys(simplified_html)]


@lru_cache(maxsize=1)
def _domain_extractor():
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)  # shipped snapshot


def load_public_suffixes() -> None:
    """Load the public suffix list now rather than on the first page's site."""
    registrable_domain("https://example.org/")


def registrable_domain(url: str) -> str:
    """``news.bbc.co.uk`` -> ``bbc.co.uk``; a host without a public suffix (an intranet
    name, ``.example``, an IP address) stays whole, less a leading ``www.``."""
    parts = _domain_extractor()(url)
    if parts.suffix and parts.domain:
        return f"{parts.domain}.{parts.suffix}".lower()
    host = urlsplit(url).hostname or url
    return host.lower().removeprefix("www.")
