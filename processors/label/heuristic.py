"""A model-free block labeller, so the whole pipeline runs without a GPU.

Readability-style: every text-rich, link-poor block adds its weight to its enclosing
containers (decaying with distance); the best-scoring container is the main region.
Blocks inside it are main unless they look like boilerplate (link lists, names such as
``share`` or ``related``); headings just before it and long link-poor paragraphs
elsewhere join it. Signals: text length, link density, tag, class/id words, position.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser, LexborNode

from dripstream.processors.extract.html_tags import HEADING_TAGS
from dripstream.processors.label.base import LabelOutcome
from dripstream.topics.records import MAIN, OTHER, SimplifiedPage

_WORDS = re.compile(r"[a-z]+")
_NEGATIVE = frozenset(
    [
        "comment",
        "comments",
        "sidebar",
        "widget",
        "share",
        "sharing",
        "social",
        "related",
        "promo",
        "ad",
        "ads",
        "advert",
        "advertisement",
        "banner",
        "menu",
        "breadcrumb",
        "breadcrumbs",
        "cookie",
        "cookies",
        "subscribe",
        "newsletter",
        "footer",
        "header",
        "nav",
        "navbar",
        "navigation",
        "popup",
        "modal",
        "login",
        "signup",
        "signin",
        "tags",
        "tag",
        "copyright",
        "disclaimer",
        "recommended",
        "recommend",
        "trending",
        "popular",
        "outbrain",
        "taboola",
        "sponsor",
        "sponsored",
        "byline",
        "author",
        "meta",
        "toolbar",
        "pagination",
        "pager",
        "caption",
        "credit",
        "teaser",
    ]
)
_POSITIVE = frozenset(
    [
        "article",
        "content",
        "post",
        "entry",
        "story",
        "body",
        "main",
        "text",
        "prose",
        "blog",
        "news",
        "paragraph",
        "articlebody",
        "storybody",
        "richtext",
        "markdown",
    ]
)
_MIN_SCORING_CHARS = 40
_ANCESTOR_DECAY = (1.0, 0.5, 0.33, 0.25, 0.2)


@dataclass
class _Block:
    node: LexborNode
    tag: str
    text_len: int
    link_len: int
    has_media: bool
    ancestors: list[LexborNode]
    own_negative: bool
    negative_ancestors: frozenset[int]

    @property
    def link_density(self) -> float:
        return self.link_len / self.text_len if self.text_len else 1.0

    @property
    def weight(self) -> float:
        if self.text_len < _MIN_SCORING_CHARS or self.link_density > 0.5:
            return 0.0
        return self.text_len * (1.0 - self.link_density)


def _visible_len(text: str) -> int:
    return len("".join(text.split()))


def _names(node: LexborNode) -> set[str]:
    attributes = node.attributes
    names = f"{attributes.get('class') or ''} {attributes.get('id') or ''}".lower()
    return set(_WORDS.findall(names))


def _class_weight(node: LexborNode) -> float:
    names = _names(node)
    weight = 1.0
    if names & _POSITIVE:
        weight *= 1.25
    if names & _NEGATIVE:
        weight *= 0.25
    return weight


def _blocks(page: SimplifiedPage) -> list[_Block]:
    tree = LexborHTMLParser(page.simplified_html)
    blocks = []
    for node in tree.css("[_item_id]"):
        text_len = _visible_len(node.text(deep=True) or "")
        link_len = sum(_visible_len(a.text(deep=True) or "") for a in node.css("a"))
        ancestors = []
        negative = set()
        parent = node.parent
        while parent is not None and parent.tag not in ("body", "html", None):
            ancestors.append(parent)
            if _names(parent) & _NEGATIVE:
                negative.add(parent.mem_id)
            parent = parent.parent
        blocks.append(
            _Block(
                node=node,
                tag=node.tag or "",
                text_len=text_len,
                link_len=link_len,
                has_media=node.tag == "img" or node.css_first("img") is not None,
                ancestors=ancestors,
                own_negative=bool(_names(node) & _NEGATIVE),
                negative_ancestors=frozenset(negative),
            )
        )
    return blocks


def _main_region(blocks: list[_Block]) -> int | None:
    """mem_id of the container that gathers the most weighted text, if any."""
    scores: dict[int, float] = defaultdict(float)
    class_weights: dict[int, float] = {}
    for block in blocks:
        weight = block.weight
        if not weight:
            continue
        for ancestor, decay in zip(block.ancestors, _ANCESTOR_DECAY, strict=False):
            key = ancestor.mem_id
            if key not in class_weights:
                class_weights[key] = _class_weight(ancestor)
            scores[key] += weight * decay
    if not scores:
        return None
    return max(scores, key=lambda key: scores[key] * class_weights[key])


def _boilerplate(block: _Block) -> bool:
    return (
        block.own_negative
        or (block.text_len < 200 and block.link_density > 0.5)
        or (block.text_len == 0 and not block.has_media)
    )


def label_blocks(page: SimplifiedPage) -> list[str]:
    blocks = _blocks(page)
    region = _main_region(blocks)
    if region is None:  # no text-rich block anywhere: keep all that is not boilerplate
        return [OTHER if _boilerplate(block) else MAIN for block in blocks]
    in_region = [any(a.mem_id == region for a in block.ancestors) for block in blocks]
    first_in_region = next((i for i, inside in enumerate(in_region) if inside), len(blocks))
    labels = []
    for index, block in enumerate(blocks):
        if _boilerplate(block):
            main = False
        elif in_region[index]:  # inside the region, unless under a boilerplate container
            main = not any(
                a.mem_id in block.negative_ancestors
                for a in block.ancestors[: _depth_of(block, region)]
            )
        else:  # outside: long link-poor text, or a heading just before the region
            main = (
                block.weight >= 150 and block.link_density < 0.2 and not block.negative_ancestors
            ) or (block.tag in HEADING_TAGS and 0 < first_in_region - index <= 3)
        labels.append(MAIN if main else OTHER)
    return labels


def _depth_of(block: _Block, region: int) -> int:
    for depth, ancestor in enumerate(block.ancestors):
        if ancestor.mem_id == region:
            return depth
    return len(block.ancestors)


class HeuristicLabeller:
    name = "heuristic"

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        outcomes = []
        for page in pages:
            started = time.perf_counter()
            labels = label_blocks(page)
            outcomes.append(LabelOutcome(labels, latency_ms=(time.perf_counter() - started) * 1000))
        return outcomes
