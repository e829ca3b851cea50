"""Block labels derived from a page's gold text (training data for learned labellers).

The rule (``derive_block_labels``), applied to the blocks of ``simplify(html)``:

1. Text. Gold and every mapping block (tags removed, entities unescaped) become lower-
   cased word tokens: ``\\w+`` runs, except that Han / kana characters are one token each
   (Chinese and Japanese have no spaces). ``n = 3``.
2. Coverage. A token of a block is *covered* when one of the block's token 3-grams that
   contains it occurs in the gold. ``coverage = covered / tokens``. A block of >= 3 tokens
   with ``coverage >= 0.5`` is an *anchor*. Its place in the gold is the alignment diagonal
   (gold position - block position) most of its matching 3-grams agree on (ties: the
   earliest); its gold span runs from its first to its last matched token on that diagonal.
3. Order. The gold reads in document order, so among the anchors the heaviest chain
   (weight = covered tokens) whose gold spans start in increasing order is kept (a weighted
   longest increasing subsequence). An anchor off that chain is still main when at least
   half of its gold span is claimed by no chain anchor (the gold reordered unique text);
   otherwise it is a repeat of text the chain already placed (a teaser repeating the lead,
   a second copy of the title) and is ``other``.
4. Short blocks (1-2 tokens: headings, dates, prices, bylines) are main when their token
   sequence occurs in the gold between the gold spans of the main anchors just before and
   after them in the page (+- 3 tokens), i.e. exactly where the gold has them.
5. Blocks without any token (images, rules) are main when the nearest blocks with text on
   both sides are main (an image inside the article, not one around it).
6. Everything else is ``other``.

``derive_labels(rows, out_path)`` writes one JSON object per page, the shape of the
labelled topic's records (page + block labels): ``page_id, url, title, simplified_html,
mapping_blocks, hints, labels, labeller="gold"``; plus ``meta`` (page type, domain,
source file) for grouping folds. ``page_id`` is :func:`dripstream.topics.records.page_id` of the URL
and the (mark-stripped) HTML bytes, as in the stream, so labels from a live GPU labeller
can train the student the same way.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dripstream.processors.errors import PageError
from dripstream.processors.extract.html_tags import block_text
from dripstream.processors.extract.simplify import SimplifyConfig, simplify
from dripstream.processors.training.annotations import strip_annotation_marks
from dripstream.topics.records import MAIN, OTHER, page_id

__all__ = [
    "DeriveReport",
    "derive_block_labels",
    "derive_labels",
    "label_tokens",
]

N = 3
MIN_COVERAGE = 0.5
SHORT_SLACK = 3

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")


def label_tokens(text: str) -> list[str]:
    """Lower-cased word tokens; Han / kana characters one token each."""
    return _TOKEN.findall(text.lower())


@dataclass
class _Anchor:
    index: int
    start: int
    end: int
    weight: int


def _anchor(tokens: list[str], gold_index: dict[tuple[str, ...], list[int]]) -> _Anchor | None:
    covered = [False] * len(tokens)
    votes: dict[int, int] = defaultdict(int)
    matches: list[tuple[int, list[int]]] = []
    for j in range(len(tokens) - N + 1):
        positions = gold_index.get(tuple(tokens[j : j + N]))
        if positions is None:
            continue
        covered[j : j + N] = [True] * N
        matches.append((j, positions))
        for position in positions[:50]:
            votes[position - j] += 1
    count = sum(covered)
    if count < MIN_COVERAGE * len(tokens):
        return None
    diagonal = min(votes, key=lambda d: (-votes[d], d))
    on_diagonal = [j for j, positions in matches if diagonal + j in positions[:50]]
    start = diagonal + on_diagonal[0]
    end = diagonal + on_diagonal[-1] + N
    return _Anchor(-1, start, end, count)


def _chain(anchors: list[_Anchor]) -> set[int]:
    """Indices (into anchors) of the heaviest chain with increasing gold starts."""
    if not anchors:
        return set()
    starts = sorted({a.start for a in anchors})
    rank = {s: i + 1 for i, s in enumerate(starts)}
    size = len(starts)
    tree = [(0, -1)] * (size + 1)  # Fenwick tree of (best weight, anchor) prefix maxima

    def query(i: int) -> tuple[int, int]:
        best = (0, -1)
        while i > 0:
            best = max(best, tree[i])
            i -= i & -i
        return best

    def update(i: int, value: tuple[int, int]) -> None:
        while i <= size:
            if value > tree[i]:
                tree[i] = value
            i += i & -i

    parent = [-1] * len(anchors)
    score = [0] * len(anchors)
    for k, anchor in enumerate(anchors):
        best, prev = query(rank[anchor.start])  # starts <= this one (ties allowed)
        score[k] = best + anchor.weight
        parent[k] = prev
        update(rank[anchor.start], (score[k], k))
    k = max(range(len(anchors)), key=lambda i: score[i])
    chain = set()
    while k != -1:
        chain.add(k)
        k = parent[k]
    return chain


def derive_block_labels(mapping_blocks: Sequence[str], gold: str) -> list[str]:
    """One label per block by how much of its text the gold contains, in order."""
    gold_tokens = label_tokens(gold)
    gold_index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i in range(len(gold_tokens) - N + 1):
        gold_index[tuple(gold_tokens[i : i + N])].append(i)
    word_positions: dict[str, list[int]] = defaultdict(list)
    for i, token in enumerate(gold_tokens):
        word_positions[token].append(i)

    tokens = [label_tokens(block_text(block)) for block in mapping_blocks]
    anchors: list[_Anchor] = []
    for index, block_tokens in enumerate(tokens):
        if len(block_tokens) >= N:
            anchor = _anchor(block_tokens, gold_index)
            if anchor is not None:
                anchor.index = index
                anchors.append(anchor)
    chain = _chain(anchors)
    claimed = [False] * (len(gold_tokens) + 1)
    for k in chain:
        a = anchors[k]
        claimed[a.start : a.end] = [True] * (a.end - a.start)
    main_anchors: list[_Anchor] = []
    for k, a in enumerate(anchors):
        span = claimed[a.start : a.end]
        if k in chain or sum(span) < 0.5 * max(len(span), 1):
            main_anchors.append(a)
    labels = [OTHER] * len(mapping_blocks)
    for a in main_anchors:
        labels[a.index] = MAIN

    # Short blocks: where the gold has them, between the main anchors around them.
    anchor_at = sorted((a.index, a.start, a.end) for a in main_anchors)
    anchor_indices = [entry[0] for entry in anchor_at]
    for index, block_tokens in enumerate(tokens):
        if not 0 < len(block_tokens) < N:
            continue
        k = bisect.bisect_left(anchor_indices, index)
        low = anchor_at[k - 1][2] - SHORT_SLACK if k > 0 else 0
        high = anchor_at[k][1] + SHORT_SLACK if k < len(anchor_at) else len(gold_tokens)
        for position in word_positions.get(block_tokens[0], ()):
            if position < low:
                continue
            if position + len(block_tokens) > high:
                break
            if gold_tokens[position : position + len(block_tokens)] == block_tokens:
                labels[index] = MAIN
                break

    # Blocks without text: main when the nearest text blocks on both sides are main.
    texty = [index for index, block_tokens in enumerate(tokens) if block_tokens]
    for index, block_tokens in enumerate(tokens):
        if block_tokens:
            continue
        k = bisect.bisect_left(texty, index)
        if 0 < k < len(texty) and labels[texty[k - 1]] == MAIN and labels[texty[k]] == MAIN:
            labels[index] = MAIN
    return labels


@dataclass
class DeriveReport:
    """What ``derive_labels`` wrote: pages, blocks, main blocks, pages it skipped."""

    pages: int = 0
    blocks: int = 0
    main_blocks: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> pages
    out_path: str = ""


def _meta(row: dict) -> dict:
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    return {
        key: meta[key]
        for key in ("page_type", "domain", "publisher", "subset", "with", "without")
        if key in meta
    }


def derive_page(row: dict, config: SimplifyConfig | None = None) -> dict | None:
    """Labelled record of one dataset row, or None when the page has no block."""
    html = strip_annotation_marks(row["html"])
    url = row.get("url") or str(row["id"])
    document = simplify(html, config)
    if not document.block_count:
        return None
    labels = derive_block_labels(document.mapping_blocks, row.get("gold_markdown_or_text") or "")
    return {
        "page_id": page_id(url, html.encode("utf-8")),
        "id": str(row.get("id", "")),
        "url": url,
        "title": document.title,
        "simplified_html": document.simplified_html,
        "mapping_blocks": document.mapping_blocks,
        "labels": labels,
        "labeller": "gold",
        "hints": list(document.hints),
        "meta": _meta(row),
    }


def derive_labels(
    rows: Iterable[dict], out_path: str | Path, source: str | None = None
) -> DeriveReport:
    """Derive block labels for every row (``id, url, html, gold_markdown_or_text``) and
    write them as JSONL to ``out_path``; ``source`` (e.g. the file name) goes into each
    record's ``meta.source``. Pages that cannot be simplified are counted, not written."""
    report = DeriveReport(out_path=str(out_path))
    with open(out_path, "w", encoding="utf-8") as out:
        for row in rows:
            try:
                record = derive_page(row)
            except PageError as error:
                reason = type(error).__name__
                report.skipped[reason] = report.skipped.get(reason, 0) + 1
                continue
            if record is None:
                report.skipped["no_blocks"] = report.skipped.get("no_blocks", 0) + 1
                continue
            if source is not None:
                record["meta"]["source"] = source
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            report.pages += 1
            report.blocks += len(record["labels"])
            report.main_blocks += record["labels"].count(MAIN)
    return report


@dataclass
class MarkAgreement:
    """Derived labels against WebMainBench's human ``cc-select`` marks (the oracle)."""

    pages: int = 0
    blocks: int = 0
    agree: int = 0
    both_main: int = 0
    derived_main: int = 0
    marked_main: int = 0
    per_page: list[dict] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.agree / self.blocks if self.blocks else 0.0

    @property
    def main_precision(self) -> float:
        return self.both_main / self.derived_main if self.derived_main else 0.0

    @property
    def main_recall(self) -> float:
        return self.both_main / self.marked_main if self.marked_main else 0.0


def agreement_with_marks(rows: Iterable[dict]) -> MarkAgreement:
    """Block-level agreement of the derived labels with the ``cc-select`` marks, on the
    same segmentation (the oracle's: marks kept while simplifying, never in the output)."""
    import dataclasses

    from dripstream.processors.training.annotations import SELECT_ATTR, has_annotation

    config = dataclasses.replace(SimplifyConfig(), mark_attr=SELECT_ATTR)
    report = MarkAgreement()
    for row in rows:
        if not has_annotation(row["html"]):
            continue
        document = simplify(strip_annotation_marks(row["html"], keep_selection=True), config)
        derived = derive_block_labels(
            document.mapping_blocks, row.get("gold_markdown_or_text") or ""
        )
        marked = [MAIN if flag else OTHER for flag in document.marked]
        agree = sum(a == b for a, b in zip(derived, marked, strict=True))
        both = sum(a == MAIN and b == MAIN for a, b in zip(derived, marked, strict=True))
        report.pages += 1
        report.blocks += len(marked)
        report.agree += agree
        report.both_main += both
        report.derived_main += derived.count(MAIN)
        report.marked_main += marked.count(MAIN)
        meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
        report.per_page.append(
            {
                "id": str(row.get("id")),
                "subset": meta.get("subset"),
                "blocks": len(marked),
                "agree": agree,
                "derived_main": derived.count(MAIN),
                "marked_main": marked.count(MAIN),
                "both_main": both,
            }
        )
    return report
