"""Per-block features for the learned labeller, from both branches of a simplified page.

One pass: the simplified page is parsed once (lexbor) and walked over its *containers*
only (the markup the simplifier kept around the blocks, the blocks' roots; never inside a
block), which gives every block its ancestor chain; the block's text statistics come from
its mapping HTML with a few C-level string operations (full text, not the truncated
simplified text). Everything else is numpy over the page's block vectors.

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

import re
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
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


_DIGIT, _PUNCT, _CURRENCY, _INVISIBLE = 1, 2, 4, 8
_LUT = np.zeros(0x10000, dtype=np.uint8)
_LUT[ord("0") : ord("9") + 1] = _DIGIT
_LUT[[ord(c) for c in ".,;:!?。，、；：！？"]] = _PUNCT
_LUT[[ord(c) for c in "$€£¥₹"]] = _CURRENCY
_LUT[: ord(" ") + 1] = _INVISIBLE
_LUT[[0xA0, 0x3000, 0x200B, 0xFEFF]] = _INVISIBLE


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


def _char_stats(text: str, n: int, full: bool = True) -> tuple[np.ndarray, ...]:
    """Per block (blocks separated by NUL in ``text``): visible characters and, with
    ``full``, words, digits, punctuation marks and currency symbols (numpy over the UTF-16
    code units)."""
    codes = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    # Block b runs from its NUL (none for the first) to the next; a NUL counts in no mask.
    starts = np.concatenate(([0], np.flatnonzero(codes == 0)))
    flags = _LUT.take(codes)
    visible = (flags & _INVISIBLE) == 0

    def count(mask: np.ndarray) -> np.ndarray:
        out = np.zeros(n)
        if len(mask):
            sums = np.add.reduceat(mask, starts, dtype=np.int64)[:n]
            out[: len(sums)] = sums
        return out

    if not full:
        return (count(visible),)
    word_start = visible.copy()
    word_start[1:] &= ~visible[:-1]
    return (
        count(visible),
        count(word_start),
        count((flags & _DIGIT) > 0),
        count((flags & _PUNCT) > 0),
        count((flags & _CURRENCY) > 0),
    )


_LINK_JOINED = re.compile(r"<a\b[^>\x00]*>[^\x00]*?</a>", re.IGNORECASE)
_TAG_JOINED = re.compile(r"<[^>\x00]*>")


class PageFeatures(NamedTuple):
    """A page's feature matrix and where each block sits: the index of its parent and
    grandparent container (-1: none) and its signature (a code shared by the blocks of one
    tag / class path from the root, numbers in class and id left out; -1: unplaced), which
    the context pass averages over."""

    matrix: np.ndarray
    parent: np.ndarray
    grandparent: np.ndarray
    signature: np.ndarray


def page_features(
    simplified_html: str,
    mapping_blocks: Sequence[str],
    title: str = "",
    hints: Sequence[str] = (),
) -> np.ndarray:
    """Feature matrix of one page: one row per block, ``N_FEATURES`` float32 columns;
    ``hints`` are the page's ``dripstream.processors.extract.page_hints`` names."""
    return block_features(simplified_html, mapping_blocks, title, hints).matrix


def block_features(
    simplified_html: str,
    mapping_blocks: Sequence[str],
    title: str = "",
    hints: Sequence[str] = (),
) -> PageFeatures:
    """``page_features`` with each block's parent and grandparent container."""
    n = len(mapping_blocks)
    X = np.zeros((n, N_FEATURES), dtype=np.float32)
    if n == 0:
        none = np.zeros(0, dtype=np.int64)
        return PageFeatures(X, none, none, none)
    tree = LexborHTMLParser(simplified_html)
    root = tree.body or tree.root
    raw_containers, found = _walk(root) if root is not None else ([], {})
    n_cont = len(raw_containers)

    # -- containers: cumulative ancestor properties, parents first -----------------------
    c_parent = [c[2] for c in raw_containers]
    c_tag = [c[0] for c in raw_containers]
    c_key = [c[1] for c in raw_containers]
    c_depth = [c[3] for c in raw_containers]
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
    if "<a" in joined:
        nonlink = _TAG_JOINED.sub(" ", _LINK_JOINED.sub(" ", joined))
        link_len = np.maximum(text_len - _char_stats(nonlink, n, full=False)[0], 0.0)
    else:
        link_len = np.zeros(n)
    col = _COL
    rows_hash: list[int] = []
    cols_hash: list[int] = []
    inner_negative = [0] * n
    for i, block in enumerate(mapping_blocks):
        if ' class="' in block:
            _own, inner, _anc, inner_negative[i], _positive = _class_info(
                " ".join(_CLASS_RE.findall(block))
            )
            rows_hash.extend([i] * len(inner))
            cols_hash.extend(inner)

    # -- blocks in the simplified tree: tag path and class words ------------------------
    tag_list = [0] * n
    parent_list = [-1] * n
    signature_list = [-1] * n
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
        tag_list[i] = TAG_CODES.get(tag, 0)
        parent_list[i] = parent
        step = (c_path[parent] if parent >= 0 else -1, tag, _without_digits(names))
        signature_list[i] = paths.setdefault(step, len(paths))
        if names:
            own, _inner, _anc, own_negative[i], own_positive[i] = _class_info(names)
            rows_hash.extend([i] * len(own))
            cols_hash.extend(own)
        if parent >= 0:
            anc = c_cols[parent]
            rows_hash.extend([i] * len(anc))
            cols_hash.extend(anc)
    tags = np.array(tag_list, dtype=np.int32)
    parents = np.array(parent_list, dtype=np.int64)
    has_parent = parents >= 0
    gather = np.where(has_parent, parents, n_cont)  # index n_cont: the "no parent" row

    def per_block(values: list, default: float = 0.0) -> np.ndarray:
        return np.array([*values, default], dtype=float)[gather]

    anc_negative = per_block(c_neg)
    anc_positive = per_block(c_pos)
    in_article = per_block(c_article)
    in_cell = per_block(c_cell)
    depth = per_block(c_depth)
    c_tag_code = [TAG_CODES.get(tag, 0) for tag in c_tag]
    parent_tag = per_block(c_tag_code)
    grand_tag = per_block([c_tag_code[p] if p >= 0 else 0 for p in c_parent])
    class_repeat = per_block([key_count.get(key, 0) if key else 0 for key in c_key])
    title_match = np.zeros(n)
    if title:
        title_words = set(title.lower().split())
        for i in np.flatnonzero((tags >= TAG_CODES["h1"]) & (tags <= TAG_CODES["h6"])).tolist():
            block_words = set(_TAG_JOINED.sub(" ", mapping_blocks[i]).lower().split())
            union = title_words | block_words
            title_match[i] = len(block_words & title_words) / len(union) if union else 0.0
    if rows_hash:
        flat = np.array(rows_hash) * N_FEATURES + np.array(cols_hash)
        X += np.bincount(flat, minlength=n * N_FEATURES).reshape(n, N_FEATURES)

    total_text = float(text_len.sum()) or 1.0
    link_share = np.divide(link_len, text_len, out=np.ones(n), where=text_len > 0)
    log_text = np.log1p(text_len)

    # -- container aggregates (subtree sums) and the best container ----------------------
    sub_blocks = [0.0] * n_cont
    sub_text = [0.0] * n_cont
    sub_link = [0.0] * n_cont
    score = [0.0] * n_cont
    if n_cont:
        direct = parents[has_parent]
        sub_blocks = np.bincount(direct, minlength=n_cont).astype(float).tolist()
        sub_text = np.bincount(direct, weights=text_len[has_parent], minlength=n_cont).tolist()
        sub_link = np.bincount(direct, weights=link_len[has_parent], minlength=n_cont).tolist()
        for c in range(n_cont - 1, -1, -1):
            p = c_parent[c]
            if p >= 0:
                sub_blocks[p] += sub_blocks[c]
                sub_text[p] += sub_text[c]
                sub_link[p] += sub_link[c]
        weight = np.where((text_len >= 40) & (link_share <= 0.5), text_len * (1 - link_share), 0)
        for i in np.flatnonzero(weight > 0).tolist():
            c = int(parents[i])
            w = float(weight[i])
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
            float(np.log1p(count)),
            group_blocks[path] / count,
            text / total_text,
            group_link[path] / text if text > 0 else 1.0,
            float(path == top_card),
        )
    no_card = (0.0, 0.0, 0.0, 0.0, 0.0)
    card_rows = [group_row.get(path, no_card) for path in card_of] + [no_card]
    card_repeat, card_blocks, card_text, card_link, card_top = np.array(card_rows)[gather].T
    same_tag: dict[tuple[int, int], int] = {}
    parent_tag_keys = list(zip(parent_list, tag_list, strict=True))
    for key in parent_tag_keys:
        same_tag[key] = same_tag.get(key, 0) + 1
    same_tag_siblings = np.array([same_tag[key] for key in parent_tag_keys])
    # per container (and a last "none" row): its subtree's blocks, text, link share
    c_blocks = np.array([*sub_blocks, 0.0])
    c_text = np.array([*sub_text, 0.0])
    c_link_share = np.divide(
        np.array([*sub_link, 0.0]), c_text, out=np.ones(n_cont + 1), where=c_text > 0
    )
    grandparents = np.array([*c_parent, -1], dtype=np.int64)[gather]
    grand_gather = np.where(grandparents >= 0, grandparents, n_cont)
    parent_blocks, grand_blocks = c_blocks[gather], c_blocks[grand_gather]
    parent_text, grand_text = c_text[gather], c_text[grand_gather]
    parent_link, grand_link = c_link_share[gather], c_link_share[grand_gather]
    in_best = np.array([*under_best, False])[gather].astype(float)
    best_depth = c_depth[best] if best >= 0 else 0
    best_delta = np.where(in_best > 0, np.array([*c_depth, 0])[gather] - best_depth + 1, 0)

    # -- columns ------------------------------------------------------------------------
    index = np.arange(n)
    safe_words = np.maximum(words, 1)
    safe_text = np.maximum(text_len, 1)
    columns = {
        "tag": tags,
        "parent_tag": parent_tag,
        "grandparent_tag": grand_tag,
        "log_text": log_text,
        "log_words": np.log1p(words),
        "link_share": link_share,
        "links": [b.count("<a ") for b in mapping_blocks],
        "images": [b.count("<img") for b in mapping_blocks],
        "list_items": [b.count("<li") for b in mapping_blocks],
        "breaks": [b.count("<br") for b in mapping_blocks],
        "punct_per_word": punct / safe_words,
        "digit_share": digits / safe_text,
        "currency": currency,
        "is_heading": (tags >= TAG_CODES["h1"]) & (tags <= TAG_CODES["h6"]),
        "depth": depth,
        "in_article": in_article,
        "in_cell": in_cell,
        "own_negative": own_negative,
        "own_positive": own_positive,
        "anc_negative": anc_negative,
        "anc_positive": anc_positive,
        "inner_negative": inner_negative,
        "pos_index": index / n,
        "pos_text": (np.cumsum(text_len) - text_len) / total_text,
        "dist_longest": (index - int(np.argmax(text_len))) / n,
        "rel_text": text_len / max(float(text_len.max()), 1.0),
        "parent_blocks": parent_blocks,
        "parent_text_share": parent_text / total_text,
        "parent_link_share": parent_link,
        "grand_blocks": grand_blocks,
        "grand_text_share": grand_text / total_text,
        "grand_link_share": grand_link,
        "parent_class_repeat": class_repeat,
        "same_tag_siblings": same_tag_siblings,
        "card_repeat": card_repeat,
        "card_blocks": card_blocks,
        "card_text_share": card_text,
        "card_link_share": card_link,
        "card_top": card_top,
        "in_best": in_best,
        "best_text_share": sub_text[best] / total_text if best >= 0 else 0.0,
        "best_depth_delta": best_delta,
        "title_match": title_match,
        "page_blocks": np.log1p(n),
        "page_log_text": np.log1p(total_text),
        "page_link_share": float(link_len.sum()) / total_text,
        "page_li_share": float(np.mean(tags == TAG_CODES["li"])),
        "page_cell_share": float(in_cell.mean()),
        "page_heading_share": float(np.mean((tags >= TAG_CODES["h1"]) & (tags <= TAG_CODES["h6"]))),
        "page_linky_share": float(np.mean(link_share > 0.5)),
        "page_currency": float(np.log1p(currency.sum())),
        "page_has_article": float(any(tag == "article" for tag in c_tag)),
        "page_has_main": float(any(tag == "main" for tag in c_tag)),
    }
    for name in set(hints) & _HINT_SET:  # a newer producer's hints this model never saw: none
        columns[f"hint_{name}"] = 1.0
    padded = np.concatenate(([0.0, 0.0], log_text, [0.0, 0.0]))
    columns["prev_log_text"] = padded[1 : n + 1]
    columns["prev2_log_text"] = padded[0:n]
    columns["next_log_text"] = padded[3 : n + 3]
    columns["next2_log_text"] = padded[4 : n + 4]
    padded = np.concatenate(([1.0], link_share, [1.0]))
    columns["prev_link_share"] = padded[0:n]
    columns["next_link_share"] = padded[2 : n + 2]
    padded_tags = np.concatenate(([0], tags, [0]))
    columns["prev_tag"] = padded_tags[0:n]
    columns["next_tag"] = padded_tags[2 : n + 2]
    cum_text = np.concatenate(([0.0], np.cumsum(text_len)))
    cum_link = np.concatenate(([0.0], np.cumsum(link_len)))
    for size in (3, 7):
        low = np.maximum(index - size // 2, 0)
        high = np.minimum(index + size // 2 + 1, n)
        window_text = cum_text[high] - cum_text[low]
        window_link = cum_link[high] - cum_link[low]
        columns[f"win{size}_link"] = np.divide(
            window_link, window_text, out=np.ones(n), where=window_text > 0
        )
        columns[f"win{size}_log_text"] = np.log1p(window_text)
    for name, values in columns.items():
        X[:, col[name]] = values
    return PageFeatures(X, parents, grandparents, np.array(signature_list, dtype=np.int64))


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


def _container_mean(keys: np.ndarray, p: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per block, the text-weighted mean of ``p`` over the blocks that share its container
    (its own ``p`` where it has none)."""
    out = p.copy()
    inside = keys >= 0
    if inside.any():
        k = keys[inside]
        total = np.bincount(k, weights=(p * w)[inside])
        weight = np.bincount(k, weights=w[inside])
        out[inside] = total[k] / np.maximum(weight[k], 1e-9)
    return out


def _group_share(keys: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per block, the share of the page's weight ``w`` on the blocks that share its key
    (its own share where it has none)."""
    out = w / w.sum()
    inside = keys >= 0
    if inside.any():
        k = keys[inside]
        out[inside] = np.bincount(k, weights=w[inside])[k] / w.sum()
    return out


def context_features(p: np.ndarray, features: PageFeatures) -> np.ndarray:
    """The context pass's extra columns (``CONTEXT_NAMES``) of one page, from the first
    pass's main probability ``p`` of every block: the block's own, its neighbours' (one
    and two away; the largest within five before and after, and the smaller of those two:
    a block between main blocks), text-weighted means over windows of 3, 7 and 15 blocks
    and over the blocks of its parent and grandparent container and of its signature, the
    text share of its signature's blocks, the page's mean, maximum and main text share, and
    the block's rank on the page."""
    n = len(p)
    if n == 0:
        return np.zeros((0, len(CONTEXT_NAMES)), dtype=np.float32)
    w = np.expm1(features.matrix[:, _LOG_TEXT].astype(float)) + 1.0
    padded = np.concatenate((np.zeros(_REACH), p, np.zeros(_REACH + 1)))
    # the largest p over each run of _REACH blocks: before block i starts at i, after at i+6
    starts = n + _REACH + 1
    reach = padded[:starts].copy()
    for shift in range(1, _REACH):
        np.maximum(reach, padded[shift : shift + starts], out=reach)
    max_before, max_after = reach[:n], reach[_REACH + 1 :]
    cum_pw = np.concatenate(([0.0], np.cumsum(p * w)))
    cum_w = np.concatenate(([0.0], np.cumsum(w)))
    index = np.arange(n)
    windows = []
    for size in (3, 7, 15):
        low = np.maximum(index - size // 2, 0)
        high = np.minimum(index + size // 2 + 1, n)
        windows.append((cum_pw[high] - cum_pw[low]) / (cum_w[high] - cum_w[low]))
    rank = np.empty(n)
    rank[np.argsort(p, kind="stable")] = index / max(n - 1, 1)
    mean = float(np.dot(p, w) / w.sum())
    columns: tuple[np.ndarray | float, ...] = (
        p,
        padded[_REACH - 1 : n + _REACH - 1],
        padded[_REACH - 2 : n + _REACH - 2],
        padded[_REACH + 1 : n + _REACH + 1],
        padded[_REACH + 2 : n + _REACH + 2],
        *windows,
        max_before,
        max_after,
        np.minimum(max_before, max_after),
        _container_mean(features.parent, p, w),
        _container_mean(features.grandparent, p, w),
        _container_mean(features.signature, p, w),
        _group_share(features.signature, w),
        mean,
        float(p.max()),
        float(w[p >= 0.5].sum() / w.sum()),
        rank,
        p - mean,
    )
    out = np.empty((n, len(columns)), dtype=np.float32)
    for j, column in enumerate(columns):
        out[:, j] = column
    return out
