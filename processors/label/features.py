"""Per-block features for the learned labeller, from both branches of a simplified page.

One pass: the simplified page is parsed once (lexbor) and walked over its *containers*
only (the markup the simplifier kept around the blocks, the blocks' roots; never inside a
block), which gives every block its ancestor chain; the block's text statistics come from
its mapping HTML with a few C-level string operations (full text, not the truncated
simplified text). Everything else is plain Python over the page's block lists (compiled),
written into one float32 row-major matrix (``array``): serving imports no numpy. Sums of
fractions add in numpy's order (``pairwise_sum``): every value equals, to the last bit,
what the numpy implementation that trained the shipped boosters computed.

Feature groups (``FEATURE_NAMES`` lists them in column order):

* block: tag (categorical), text length, words, link text share, links, images, list
  items, line breaks, punctuation / digit / currency density;
* tag path: tag of the parent and grandparent container (categorical), depth, inside
  ``article`` / ``main`` / a layout table cell, generic class/id words that name
  boilerplate or content (the same word lists as the heuristic labeller) on the block and
  on its ancestors;
* class/id tokens, hashed (CRC-32, stable across processes) into buckets: the block root's
  own tokens, the tokens of elements inside the block, the tokens of its three nearest
  ancestors;
* position: block index and text offset as page fractions, distance to the page's longest
  block;
* neighbours: text length, link share and tag of the blocks one and two before / after,
  text-weighted link share and text over windows of 3 and 7 blocks;
* containers: blocks, text and link share under the parent and grandparent container
  (share of the page), how often the parent's class string repeats on the page (cards of
  listings / collections), same-tag siblings; the card the block sits in (a container
  whose tag / class path recurs on the page: how often, its blocks per card, the text and
  link share of all its copies, whether it is the page's largest card group); the
  readability-style best container (text-rich, link-poor blocks vote for their ancestors
  with decaying weight): inside it or not, its share of the page text;
* page context (the same for every block of a page; page-type signals): block count, text
  length, link share, shares of list items / table cells / headings / link-dominated
  blocks, currency symbols, ``article`` / ``main`` present, the block's text matching the
  page title; what the page declares it is (``og:type``, JSON-LD ``@type``:
  :mod:`dripstream.processors.extract.page_hints`), one column per hint.

The context pass (``context_features``, ``CONTEXT_NAMES``): a second model reads these
columns plus what the first model thought of the block's surroundings (its neighbours'
main probabilities, window and container means, the mean over the blocks of its
*signature*, the page's share of main text), so a block's label can follow the region it
sits in, and the paragraphs of one place on the page (one tag / class path, numbers left
out: a body's paragraphs, a teaser list's items) lean the same way.

No feature names a site, a URL or a string from the training data: the only words used are
the generic class/id vocabularies below, and class/id tokens are hashed.
"""

from __future__ import annotations

import math
import re
import zlib
from array import array
from collections.abc import Sequence
from typing import NamedTuple

from selectolax.lexbor import LexborHTMLParser, LexborNode

from dripstream.processors.extract.page_hints import HINTS

FEATURE_VERSION = 5  # 3: the context pass (model files carry its booster); 4: signatures; 5: cards
_HINT_SET = frozenset(HINTS)

_CARD_MIN = 3  # a card's tag / class path recurs at least this often on the page

_TAG_LIST = (
    "p div span a li ul ol dl dt dd h1 h2 h3 h4 h5 h6 table tr td th tbody thead pre code "
    "figure figcaption blockquote img section article main form label strong b em i small "
    "time address caption summary details hr br center font header footer aside nav body"
).split()
TAG_CODES = {tag: code for code, tag in enumerate(_TAG_LIST, 1)}  # 0 = other

NEGATIVE_WORDS = frozenset(
    "comment comments sidebar widget share sharing social related promo ad ads advert "
    "advertisement banner menu breadcrumb breadcrumbs cookie cookies subscribe newsletter "
    "footer header nav navbar navigation popup modal login signup signin tags tag copyright "
    "disclaimer recommended recommend trending popular sponsor sponsored byline author meta "
    "toolbar pagination pager caption credit teaser more next prev previous skip".split()
)
POSITIVE_WORDS = frozenset(
    "article content post entry story body main text prose blog news paragraph articlebody "
    "storybody richtext markdown description product detail details review answer question "
    "documentation docs thread message".split()
)

OWN_BUCKETS = 48
INNER_BUCKETS = 32
ANCESTOR_BUCKETS = 96
_ANCESTOR_LEVELS = 3
_DECAY = (1.0, 0.5, 0.33, 0.25, 0.2)

_CLASS_RE = re.compile(r' class="([^"]*)"')
_NAME_SPLIT = re.compile(r"[^a-z0-9]+")
_DIGITS = re.compile(r"[0-9]+")

_SCALAR_NAMES = [
    "tag",
    "parent_tag",
    "grandparent_tag",
    "log_text",
    "log_words",
    "link_share",
    "links",
    "images",
    "list_items",
    "breaks",
    "punct_per_word",
    "digit_share",
    "currency",
    "is_heading",
    "depth",
    "in_article",
    "in_cell",
    "own_negative",
    "own_positive",
    "anc_negative",
    "anc_positive",
    "inner_negative",
    "pos_index",
    "pos_text",
    "dist_longest",
    "rel_text",
    "prev_log_text",
    "prev2_log_text",
    "next_log_text",
    "next2_log_text",
    "prev_link_share",
    "next_link_share",
    "prev_tag",
    "next_tag",
    "win3_link",
    "win7_link",
    "win3_log_text",
    "win7_log_text",
    "parent_blocks",
    "parent_text_share",
    "parent_link_share",
    "grand_blocks",
    "grand_text_share",
    "grand_link_share",
    "parent_class_repeat",
    "same_tag_siblings",
    "card_repeat",
    "card_blocks",
    "card_text_share",
    "card_link_share",
    "card_top",
    "in_best",
    "best_text_share",
    "best_depth_delta",
    "title_match",
    "page_blocks",
    "page_log_text",
    "page_link_share",
    "page_li_share",
    "page_cell_share",
    "page_heading_share",
    "page_linky_share",
    "page_currency",
    "page_has_article",
    "page_has_main",
    *(f"hint_{name}" for name in HINTS),
]
CATEGORICAL = ("tag", "parent_tag", "grandparent_tag", "prev_tag", "next_tag")
FEATURE_NAMES = (
    _SCALAR_NAMES
    + [f"own_h{i}" for i in range(OWN_BUCKETS)]
    + [f"inner_h{i}" for i in range(INNER_BUCKETS)]
    + [f"anc_h{i}" for i in range(ANCESTOR_BUCKETS)]
)
N_FEATURES = len(FEATURE_NAMES)
_COL = {name: i for i, name in enumerate(_SCALAR_NAMES)}
_OWN0 = len(_SCALAR_NAMES)
_INNER0 = _OWN0 + OWN_BUCKETS
_ANC0 = _INNER0 + INNER_BUCKETS

_NO_CLASS: tuple = ((), (), (), 0, 0)
_class_cache: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int]] = {}
_CACHE_LIMIT = 100_000


def _class_info(names: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int]:
    """Of a class/id string: the feature columns of its hashed tokens as the block's own,
    as inner elements', as an ancestor's; its boilerplate words; its content words."""
    info = _class_cache.get(names)
    if info is None:
        hashes = []
        negative = positive = 0
        for word in _NAME_SPLIT.split(names.lower()):
            if not word or word.isdigit() or len(word) > 40:
                continue
            hashes.append(zlib.crc32(word.encode()))
            negative += word in NEGATIVE_WORDS
            positive += word in POSITIVE_WORDS
        info = (
            tuple(_OWN0 + h % OWN_BUCKETS for h in hashes),
            tuple(_INNER0 + h % INNER_BUCKETS for h in hashes),
            tuple(_ANC0 + h % ANCESTOR_BUCKETS for h in hashes),
            negative,
            positive,
        )
        if len(_class_cache) < _CACHE_LIMIT:
            _class_cache[names] = info
    return info


_undigited: dict[str, str] = {}


def _without_digits(names: str) -> str:
    """A class/id string without its digits (a signature step), memoised: the same strings
    recur on every page of a site."""
    if not names:
        return names
    found = _undigited.get(names)
    if found is None:
        found = _DIGITS.sub("", names)
        if len(_undigited) < _CACHE_LIMIT:
            _undigited[names] = found
    return found


def _walk(root: LexborNode) -> tuple[list[tuple], dict[int, tuple]]:
    """Containers as (tag, class/id string, parent index, depth), parents before children,
    and per block id (tag, class/id string, parent container index)."""
    containers: list[tuple] = []
    found: dict[int, tuple] = {}
    stack = [(root, -1, 0)]
    while stack:
        node, parent, depth = stack.pop()
        for child in node.iter():
            attrs = child.attributes
            names = f"{attrs.get('class') or ''} {attrs.get('id') or ''}".strip()
            item = attrs.get("_item_id")
            if item is not None:
                if item.isdigit():
                    found[int(item)] = (child.tag or "", names, parent)
                continue
            containers.append((child.tag or "", names, parent, depth + 1))
            stack.append((child, len(containers) - 1, depth + 1))
    return containers, found


def _cards(c_path: list[int], c_parent: list[int], sub_blocks: list[float]) -> list[int]:
    """Per container, the path code of the card it sits in (-1: none). A card is a
    container whose tag / class path recurs at least ``_CARD_MIN`` times on the page and
    holds two blocks or more on average (a grid's products, a thread's posts; a menu's
    one-link items are not cards); of nested cards, the most repeated one counts, the outer
    one on a tie."""
    count: dict[int, int] = {}
    blocks: dict[int, float] = {}
    for c, path in enumerate(c_path):
        count[path] = count.get(path, 0) + 1
        blocks[path] = blocks.get(path, 0.0) + sub_blocks[c]
    card = [-1] * len(c_path)
    for c, path in enumerate(c_path):
        p = c_parent[c]
        outer = card[p] if p >= 0 else -1
        n = count[path]
        is_card = n >= _CARD_MIN and blocks[path] >= 2 * n
        card[c] = path if is_card and (outer < 0 or n > count[outer]) else outer
    return card


def _char_stats(text: str, n: int, full: bool = True) -> list[list[float]]:
    """Per block (blocks separated by NUL in ``text``): visible characters (UTF-16 code
    units: a character outside the BMP counts twice) and, with ``full``, words (runs of
    visible characters), digits, punctuation marks and currency symbols. Each character
    becomes one class byte (``_CLASS`` over its UTF-8 lead byte; the non-ASCII members of
    a class are first replaced by an ASCII one), so counting is bytes.count."""
    data = text.encode("utf-8", "surrogatepass")
    if not text.isascii():
        for character in set(_SAME_CLASS_CHARACTER.findall(text)):
            data = data.replace(character.encode("utf-8"), _SAME_CLASS[character])
    visible = [0.0] * n
    words = [0.0] * n
    digits = [0.0] * n
    punct = [0.0] * n
    currency = [0.0] * n
    for i, piece in enumerate(data.translate(_CLASS, _CONTINUATION).split(b"|")[:n]):
        visible[i] = float(len(piece) - piece.count(b" ") + piece.count(b"y"))
        if full:
            runs = piece.translate(_ANY_VISIBLE)
            words[i] = float(runs.count(b" x") + runs.startswith(b"x"))
            digits[i] = float(piece.count(b"d"))
            punct[i] = float(piece.count(b"p"))
            currency[i] = float(piece.count(b"c"))
    return [visible, words, digits, punct, currency] if full else [visible]


def _class_of(byte: int) -> int:
    """The class of a UTF-8 byte (see ``_char_stats``): ``|`` NUL (between blocks), `` ``
    invisible, ``d`` digit, ``p`` punctuation, ``c`` currency, ``y`` the lead byte of a
    character outside the BMP, ``x`` any other visible character's (lead) byte."""
    if byte == 0:
        return ord("|")
    if byte <= 0x20:
        return ord(" ")
    if ord("0") <= byte <= ord("9"):
        return ord("d")
    if chr(byte) in ".,;:!?":
        return ord("p")
    if byte == ord("$"):
        return ord("c")
    return ord("y") if 0xF0 <= byte <= 0xF7 else ord("x")


_CLASS = bytes(_class_of(byte) for byte in range(256))
_CONTINUATION = bytes(range(0x80, 0xC0))  # deleted: one class byte per character
_ANY_VISIBLE = bytes.maketrans(b"ydpc", b"xxxx")
_SAME_CLASS = {
    character: same
    for characters, same in (
        ("\xa0\u3000\u200b\ufeff", b" "),  # no-break, ideographic, zero-width space; BOM
        ("。，、；：！？", b"."),
        ("€£¥₹", b"$"),
    )
    for character in characters
}
_SAME_CLASS_CHARACTER = re.compile(f"[{''.join(_SAME_CLASS)}]")


_LINK_JOINED = re.compile(r"<a\b[^>\x00]*>[^\x00]*?</a>", re.IGNORECASE)
_TAG_JOINED = re.compile(r"<[^>\x00]*>")


class PageFeatures(NamedTuple):
    """A page's feature matrix (``rows`` x ``N_FEATURES`` float32, row-major: the buffer
    the booster reads) and where each block sits: the index of its parent and grandparent
    container (-1: none) and its signature (a code shared by the blocks of one tag / class
    path from the root, numbers in class and id left out; -1: unplaced), which the
    context pass averages over."""

    matrix: array
    parent: list[int]
    grandparent: list[int]
    signature: list[int]


def float32_matrix(rows: int, columns: int) -> array:
    """A zero float32 matrix, row-major."""
    return array("f", bytes(4 * rows * columns))


def page_features(
    simplified_html: str,
    mapping_blocks: Sequence[str],
    title: str = "",
    hints: Sequence[str] = (),
) -> array:
    """Feature matrix of one page: one row per block, ``N_FEATURES`` float32 columns,
    row-major; ``hints`` are the page's ``dripstream.processors.extract.page_hints`` names."""
    return block_features(simplified_html, mapping_blocks, title, hints).matrix


def pairwise_sum(values: Sequence[float], start: int = 0, count: int = -1) -> float:
    """The sum of ``values[start:start + count]`` (all: -1) added in pairs, eight running
    sums per run of 128 (how numpy sums an array: its rounding, to the last bit)."""
    if count < 0:
        count = len(values) - start
    if count == 0:
        return 0.0
    if count < 8:
        total = -0.0
        for i in range(start, start + count):
            total += values[i]
        return total
    if count <= 128:
        r = [values[start + j] for j in range(8)]
        i = 8
        while i < count - count % 8:
            for j in range(8):
                r[j] += values[start + i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < count:
            total += values[start + i]
            i += 1
        return total
    half = count // 2
    half -= half % 8
    return pairwise_sum(values, start, half) + pairwise_sum(values, start + half, count - half)


def block_features(
    simplified_html: str,
    mapping_blocks: Sequence[str],
    title: str = "",
    hints: Sequence[str] = (),
) -> PageFeatures:
    """``page_features`` with each block's parent and grandparent container."""
    n = len(mapping_blocks)
    if n == 0:
        return PageFeatures(float32_matrix(0, N_FEATURES), [], [], [])
    tree = LexborHTMLParser(simplified_html)
    root = tree.body or tree.root
    raw_containers, found = _walk(root) if root is not None else ([], {})
    n_cont = len(raw_containers)
    matrix = float32_matrix(n, N_FEATURES)

    # -- containers: cumulative ancestor properties, parents first -----------------------
    c_parent: list[int] = [c[2] for c in raw_containers]
    c_tag: list[str] = [c[0] for c in raw_containers]
    c_key: list[str] = [c[1] for c in raw_containers]
    c_depth: list[int] = [c[3] for c in raw_containers]
    c_neg = [0] * n_cont
    c_pos = [0] * n_cont
    c_article = [False] * n_cont
    c_cell = [False] * n_cont
    c_cols: list[tuple[int, ...]] = [()] * n_cont  # own + 2 nearest ancestors' tokens
    own_cols: list[tuple[int, ...]] = [()] * n_cont
    key_count: dict[str, int] = {}
    for c in range(n_cont):
        _own, _inner, cols, negative, positive = _class_info(c_key[c]) if c_key[c] else _NO_CLASS
        own_cols[c] = cols
        p = c_parent[c]
        tag = c_tag[c]
        if p >= 0:
            c_neg[c] = c_neg[p] + negative
            c_pos[c] = c_pos[p] + positive
            c_article[c] = c_article[p] or tag in ("article", "main")
            c_cell[c] = c_cell[p] or tag == "td"
            gp = c_parent[p]
            c_cols[c] = cols + own_cols[p] + (own_cols[gp] if gp >= 0 else ())
        else:
            c_neg[c], c_pos[c] = negative, positive
            c_article[c] = tag in ("article", "main")
            c_cell[c] = tag == "td"
            c_cols[c] = cols
        if c_key[c]:
            key_count[c_key[c]] = key_count.get(c_key[c], 0) + 1

    # -- block text statistics from the mapping branch, on the joined page ---------------
    joined = "\x00".join(mapping_blocks)
    text_len, words, digits, punct, currency = _char_stats(_TAG_JOINED.sub(" ", joined), n)
    link_len = [0.0] * n
    if "<a" in joined:
        nonlink = _char_stats(_TAG_JOINED.sub(" ", _LINK_JOINED.sub(" ", joined)), n, False)[0]
        link_len = [max(text_len[i] - nonlink[i], 0.0) for i in range(n)]
    inner_negative = [0] * n
    for i, block in enumerate(mapping_blocks):
        if ' class="' in block:
            _own, inner, _anc, inner_negative[i], _positive = _class_info(
                " ".join(_CLASS_RE.findall(block))
            )
            _add_tokens(matrix, i, inner)

    # -- blocks in the simplified tree: tag path and class words ------------------------
    tags = [0] * n
    parents = [-1] * n
    signature = [-1] * n
    paths: dict[tuple[int, str, str], int] = {}  # (parent's path, tag, class/id) -> code
    c_path = [0] * n_cont
    for c in range(n_cont):
        p = c_parent[c]
        step = (c_path[p] if p >= 0 else -1, c_tag[c], _without_digits(c_key[c]))
        c_path[c] = paths.setdefault(step, len(paths))
    own_negative = [0] * n
    own_positive = [0] * n
    for item, (tag, names, parent) in found.items():
        i = item - 1
        if not 0 <= i < n:
            continue
        tags[i] = TAG_CODES.get(tag, 0)
        parents[i] = parent
        step = (c_path[parent] if parent >= 0 else -1, tag, _without_digits(names))
        signature[i] = paths.setdefault(step, len(paths))
        if names:
            own, _inner, _anc, own_negative[i], own_positive[i] = _class_info(names)
            _add_tokens(matrix, i, own)
        if parent >= 0:
            _add_tokens(matrix, i, c_cols[parent])
    grandparents = [c_parent[p] if p >= 0 else -1 for p in parents]

    c_tag_code = [TAG_CODES.get(tag, 0) for tag in c_tag]
    heading = [TAG_CODES["h1"] <= tag <= TAG_CODES["h6"] for tag in tags]
    title_match = [0.0] * n
    if title:
        title_words = set(title.lower().split())
        for i in range(n):
            if heading[i]:
                block_words = set(_TAG_JOINED.sub(" ", mapping_blocks[i]).lower().split())
                union = title_words | block_words
                title_match[i] = len(block_words & title_words) / len(union) if union else 0.0

    total_text = sum(text_len) or 1.0  # whole numbers: exact in any order
    link_share = [link_len[i] / text_len[i] if text_len[i] > 0 else 1.0 for i in range(n)]
    log_text = [math.log1p(value) for value in text_len]

    # -- container aggregates (subtree sums) and the best container ----------------------
    sub_blocks = [0.0] * n_cont
    sub_text = [0.0] * n_cont
    sub_link = [0.0] * n_cont
    score = [0.0] * n_cont
    if n_cont:
        for i, p in enumerate(parents):
            if p >= 0:
                sub_blocks[p] += 1.0
                sub_text[p] += text_len[i]
                sub_link[p] += link_len[i]
        for c in range(n_cont - 1, -1, -1):
            p = c_parent[c]
            if p >= 0:
                sub_blocks[p] += sub_blocks[c]
                sub_text[p] += sub_text[c]
                sub_link[p] += sub_link[c]
        for i in range(n):
            if text_len[i] < 40 or link_share[i] > 0.5:
                continue
            w = text_len[i] * (1 - link_share[i])
            c = parents[i]
            if w <= 0:
                continue
            for decay in _DECAY:
                if c < 0:
                    break
                score[c] += w * decay
                c = c_parent[c]
    best = max(range(n_cont), key=score.__getitem__, default=-1)
    if best >= 0 and score[best] <= 0:
        best = -1
    under_best = [False] * n_cont
    if best >= 0:
        for c in range(best, n_cont):
            under_best[c] = c == best or (c_parent[c] >= 0 and under_best[c_parent[c]])
    # -- cards: per block, the repeated container it sits in, and that card's group -------
    card_of = _cards(c_path, c_parent, sub_blocks)
    group_count: dict[int, float] = {}
    group_blocks: dict[int, float] = {}
    group_text: dict[int, float] = {}
    group_link: dict[int, float] = {}
    for c in range(n_cont):
        if card_of[c] == c_path[c]:  # a card itself (nested inner ones carry the outer code)
            path = c_path[c]
            group_count[path] = group_count.get(path, 0.0) + 1
            group_blocks[path] = group_blocks.get(path, 0.0) + sub_blocks[c]
            group_text[path] = group_text.get(path, 0.0) + sub_text[c]
            group_link[path] = group_link.get(path, 0.0) + sub_link[c]
    top_card = max(group_text, key=group_text.__getitem__, default=-1)
    group_row: dict[int, tuple[float, float, float, float, float]] = {}
    for path, count in group_count.items():
        text = group_text[path]
        group_row[path] = (
            math.log1p(count),
            group_blocks[path] / count,
            text / total_text,
            group_link[path] / text if text > 0 else 1.0,
            float(path == top_card),
        )
    no_card = (0.0, 0.0, 0.0, 0.0, 0.0)
    cards = [group_row.get(card_of[p], no_card) if p >= 0 else no_card for p in parents]
    same_tag: dict[tuple[int, int], int] = {}
    for key in zip(parents, tags, strict=True):
        same_tag[key] = same_tag.get(key, 0) + 1
    c_link_share = [sub_link[c] / sub_text[c] if sub_text[c] > 0 else 1.0 for c in range(n_cont)]
    in_best = _per_container(parents, under_best)
    best_depth = c_depth[best] if best >= 0 else 0
    parent_depth = _per_container(parents, c_depth)

    # -- columns ------------------------------------------------------------------------
    longest = max(range(n), key=text_len.__getitem__)
    longest_text = max(text_len[longest], 1.0)
    li_share = sum(tag == TAG_CODES["li"] for tag in tags) / n
    heading_share = sum(heading) / n
    linky_share = sum(share > 0.5 for share in link_share) / n
    page_values = [
        ("page_blocks", math.log1p(n)),
        ("page_log_text", math.log1p(total_text)),
        ("page_link_share", sum(link_len) / total_text),
        ("page_li_share", li_share),
        ("page_heading_share", heading_share),
        ("page_linky_share", linky_share),
        ("page_currency", math.log1p(sum(currency))),
        ("page_has_article", float("article" in c_tag)),
        ("page_has_main", float("main" in c_tag)),
        ("best_text_share", sub_text[best] / total_text if best >= 0 else 0.0),
    ]
    # a newer producer's hints this model never saw: none
    page_values.extend((f"hint_{name}", 1.0) for name in sorted(set(hints) & _HINT_SET))
    columns: dict[str, list[float]] = {
        "tag": [float(tag) for tag in tags],
        "parent_tag": _per_container(parents, c_tag_code),
        "grandparent_tag": _per_container(grandparents, c_tag_code),
        "log_text": log_text,
        "log_words": [math.log1p(value) for value in words],
        "link_share": link_share,
        "links": [float(block.count("<a ")) for block in mapping_blocks],
        "images": [float(block.count("<img")) for block in mapping_blocks],
        "list_items": [float(block.count("<li")) for block in mapping_blocks],
        "breaks": [float(block.count("<br")) for block in mapping_blocks],
        "punct_per_word": [punct[i] / max(words[i], 1.0) for i in range(n)],
        "digit_share": [digits[i] / max(text_len[i], 1.0) for i in range(n)],
        "currency": currency,
        "is_heading": [float(flag) for flag in heading],
        "depth": parent_depth,
        "in_article": _per_container(parents, c_article),
        "in_cell": _per_container(parents, c_cell),
        "own_negative": [float(value) for value in own_negative],
        "own_positive": [float(value) for value in own_positive],
        "anc_negative": _per_container(parents, c_neg),
        "anc_positive": _per_container(parents, c_pos),
        "inner_negative": [float(value) for value in inner_negative],
        "pos_index": [i / n for i in range(n)],
        "dist_longest": [(i - longest) / n for i in range(n)],
        "rel_text": [value / longest_text for value in text_len],
        "parent_blocks": _per_container(parents, sub_blocks),
        "parent_text_share": [value / total_text for value in _per_container(parents, sub_text)],
        "parent_link_share": _per_container(parents, c_link_share, 1.0),
        "grand_blocks": _per_container(grandparents, sub_blocks),
        "grand_text_share": [
            value / total_text for value in _per_container(grandparents, sub_text)
        ],
        "grand_link_share": _per_container(grandparents, c_link_share, 1.0),
        "parent_class_repeat": _per_container(parents, [key_count.get(k, 0) for k in c_key]),
        "same_tag_siblings": [float(same_tag[key]) for key in zip(parents, tags, strict=True)],
        "card_repeat": [card[0] for card in cards],
        "card_blocks": [card[1] for card in cards],
        "card_text_share": [card[2] for card in cards],
        "card_link_share": [card[3] for card in cards],
        "card_top": [card[4] for card in cards],
        "in_best": in_best,
        "best_depth_delta": [
            parent_depth[i] - best_depth + 1 if in_best[i] > 0 else 0.0 for i in range(n)
        ],
        "title_match": title_match,
        "prev_log_text": [log_text[i - 1] if i >= 1 else 0.0 for i in range(n)],
        "prev2_log_text": [log_text[i - 2] if i >= 2 else 0.0 for i in range(n)],
        "next_log_text": [log_text[i + 1] if i + 1 < n else 0.0 for i in range(n)],
        "next2_log_text": [log_text[i + 2] if i + 2 < n else 0.0 for i in range(n)],
        "prev_link_share": [link_share[i - 1] if i >= 1 else 1.0 for i in range(n)],
        "next_link_share": [link_share[i + 1] if i + 1 < n else 1.0 for i in range(n)],
        "prev_tag": [float(tags[i - 1]) if i >= 1 else 0.0 for i in range(n)],
        "next_tag": [float(tags[i + 1]) if i + 1 < n else 0.0 for i in range(n)],
    }
    columns["page_cell_share"] = [sum(columns["in_cell"]) / n] * n
    cum_text = _running_sums(text_len)
    cum_link = _running_sums(link_len)
    columns["pos_text"] = [cum_text[i] / total_text for i in range(n)]
    for size in (3, 7):
        window_text = [0.0] * n
        window_link = [1.0] * n
        for i in range(n):
            low, high = max(i - size // 2, 0), min(i + size // 2 + 1, n)
            window_text[i] = cum_text[high] - cum_text[low]
            if window_text[i] > 0:
                window_link[i] = (cum_link[high] - cum_link[low]) / window_text[i]
        columns[f"win{size}_link"] = window_link
        columns[f"win{size}_log_text"] = [math.log1p(value) for value in window_text]
    for name, values in columns.items():
        matrix[_COL[name] :: N_FEATURES] = array("f", values)
    for name, value in page_values:
        matrix[_COL[name] :: N_FEATURES] = array("f", [value]) * n
    return PageFeatures(matrix, parents, grandparents, signature)


def _per_container(
    containers: Sequence[int], values: Sequence[float], default: float = 0.0
) -> list[float]:
    """Per block, the value of its container (``containers``: each block's parent or
    grandparent index), else ``default``."""
    return [float(values[c]) if c >= 0 else default for c in containers]


def _add_tokens(matrix: array, block: int, columns: tuple[int, ...]) -> None:
    """Count a block's hashed class/id tokens into its row."""
    row = block * N_FEATURES
    for column in columns:
        matrix[row + column] += 1.0


def _running_sums(values: Sequence[float]) -> list[float]:
    """0, then the sum of the first 1, 2, ... values (one more than ``values``)."""
    sums = [0.0] * (len(values) + 1)
    for i, value in enumerate(values):
        sums[i + 1] = sums[i] + value
    return sums


# -- the context pass: what the first pass thought of the block's surroundings ----------

CONTEXT_NAMES = (
    "first_p",
    "first_prev",
    "first_prev2",
    "first_next",
    "first_next2",
    "first_win3",
    "first_win7",
    "first_win15",
    "first_max_prev5",
    "first_max_next5",
    "first_between",
    "first_parent",
    "first_grandparent",
    "first_signature",
    "signature_text_share",
    "first_page_mean",
    "first_page_max",
    "first_page_main_share",
    "first_rank",
    "first_minus_page",
)
_LOG_TEXT = _COL["log_text"]
_REACH = 5  # blocks before / after whose largest first-pass probability is a column


def text_weights(matrix: array) -> list[float]:
    """Per block, its visible characters + 1, from the matrix's (float32) log_text."""
    return [math.expm1(matrix[i]) + 1.0 for i in range(_LOG_TEXT, len(matrix), N_FEATURES)]


def _container_mean(keys: Sequence[int], p: Sequence[float], w: Sequence[float]) -> list[float]:
    """Per block, the text-weighted mean of ``p`` over the blocks that share its container
    (its own ``p`` where it has none)."""
    total: dict[int, float] = {}
    weight: dict[int, float] = {}
    for i, key in enumerate(keys):
        if key >= 0:
            total[key] = total.get(key, 0.0) + p[i] * w[i]
            weight[key] = weight.get(key, 0.0) + w[i]
    return [total[key] / max(weight[key], 1e-9) if key >= 0 else p[i] for i, key in enumerate(keys)]


def _group_share(keys: Sequence[int], w: Sequence[float], w_total: float) -> list[float]:
    """Per block, the share of the page's weight ``w`` on the blocks that share its key
    (its own share where it has none)."""
    weight: dict[int, float] = {}
    for i, key in enumerate(keys):
        if key >= 0:
            weight[key] = weight.get(key, 0.0) + w[i]
    return [(weight[key] if key >= 0 else w[i]) / w_total for i, key in enumerate(keys)]


def context_features(p: Sequence[float], features: PageFeatures) -> array:
    """The context pass's extra columns (``CONTEXT_NAMES``, float32, row-major) of one
    page, from the first pass's main probability ``p`` of every block: the block's own,
    its neighbours' (one and two away; the largest within five before and after, and the
    smaller of those two: a block between main blocks), text-weighted means over windows
    of 3, 7 and 15 blocks and over the blocks of its parent and grandparent container and
    of its signature, the text share of its signature's blocks, the page's mean, maximum
    and main text share, and the block's rank on the page."""
    n = len(p)
    width = len(CONTEXT_NAMES)
    if n == 0:
        return float32_matrix(0, width)
    w = text_weights(features.matrix)
    w_total = pairwise_sum(w)
    padded = [0.0] * _REACH + list(p) + [0.0] * (_REACH + 1)
    # the largest p over each run of _REACH blocks: before block i starts at i, after at i+6
    reach = [max(padded[j : j + _REACH]) for j in range(n + _REACH + 1)]
    weighted = [p[i] * w[i] for i in range(n)]
    cum_pw = _running_sums(weighted)
    cum_w = _running_sums(w)
    windows: list[list[float]] = []
    for size in (3, 7, 15):
        window = [0.0] * n
        for i in range(n):
            low, high = max(i - size // 2, 0), min(i + size // 2 + 1, n)
            window[i] = (cum_pw[high] - cum_pw[low]) / (cum_w[high] - cum_w[low])
        windows.append(window)
    rank = [0.0] * n
    for position, i in enumerate(sorted(range(n), key=p.__getitem__)):
        rank[i] = position / max(n - 1, 1)
    mean = pairwise_sum(weighted) / w_total
    main_share = pairwise_sum([w[i] for i in range(n) if p[i] >= 0.5]) / w_total
    top = max(p)
    parent = _container_mean(features.parent, p, w)
    grandparent = _container_mean(features.grandparent, p, w)
    signature = _container_mean(features.signature, p, w)
    signature_share = _group_share(features.signature, w, w_total)
    flat = [0.0] * (n * width)
    for i in range(n):
        before, after = reach[i], reach[i + _REACH + 1]
        flat[i * width : (i + 1) * width] = [
            p[i],
            padded[i + _REACH - 1],
            padded[i + _REACH - 2],
            padded[i + _REACH + 1],
            padded[i + _REACH + 2],
            windows[0][i],
            windows[1][i],
            windows[2][i],
            before,
            after,
            min(before, after),
            parent[i],
            grandparent[i],
            signature[i],
            signature_share[i],
            mean,
            top,
            main_share,
            rank[i],
            p[i] - mean,
        ]
    return array("f", flat)
