"""Site templates learned online from a teacher labeller (PACE's idea, inside the stream).

Most crawled pages come from a few templates per site. A template remembers, for each
block *signature* of a site's layout, how often the teacher (the vLLM model, or a CPU
labeller) called that block main or other; once it has proven itself it labels the
site's next pages without the teacher.

- **Signature** of a block: its path in the simplified DOM, one ``tag#id.class.class``
  step per element, from its fifth ancestor down to the block (the steps above are the
  same for every block of a page: they add bytes, not information), plus ``~links`` when
  the block's text is mostly link text (``LINKS_SHARE``): a "see also" line of links and
  a paragraph of prose in the same place are different blocks to any teacher; and
  ``~empty`` when the block has no text: an image-only figure and a captioned one are
  too (a teacher calls the first main, where it costs nothing, and the caption other;
  one count for both made a blog's captions main). An id
  counts only when it is one lowercase word (``content``, ``sidebar``): other ids name
  one page's element (``sql-createtable-examples``, ``VIEW-PG-ROLES``, ``post-4711``),
  and with them no two pages of a site would share a section's signature. Nor does a
  one-word id that spells the heading opening its element (``<section id="sockets"><h2>
  Sockets</h2>``: a table-of-contents anchor, as documentation generators write them):
  on the Python documentation such anchors made 2,498 of 3,312 signatures unique to one
  page (BENCHMARKS.md, session 19). Class tokens
  are generalised first (``generalise``): digit runs become ``#`` and machine-made parts
  (CSS modules ``name__hash``, ``css-1q2w3e``, ``sc-AbCdE``, long letter-digit mixes, and
  mixed-case letter runs that do not read as camelCase words, such as ``cSNCliWjnECzm``)
  become ``*``, as PACE's aggregator does with CSS-module suffixes. Class tokens that
  name a state or a place in a row rather than a part of the layout (``odd``, ``even``,
  ``active``, ``open``, ``collapsed``, ``hidden``, ``is-*``, ``has-*``, ...) are dropped,
  so a zebra row or an expanded menu is the same block as its siblings.
- **Back-off signatures** (``BACKOFF``): each block also counts under two shorter paths,
  most specific first: the block and its parent (``*>div.card>p``), then "any child of"
  its parent and grandparent (``*>ul.list>li.row>*``). They let a template label a block
  whose full path it has not seen (a row one level deeper, a widget moved to another
  column) from what the teacher did in the same place on the site. (Also measured: the
  block with 2 ancestors, and with 3: no more pages covered, half as much state again; a single
  step: more covered, lower agreement with the teacher.)
- **Vote** of a block (``Cluster.vote``): the first of its signature and back-off
  signatures (in that order) seen ``min_support`` times decides, by majority: the label
  the teacher gave it most, and the share of the teacher's labels that agree (the chance
  that the teacher would label the block so). A block has no vote when no key was seen
  that often, when the deciding key's labels are tied (no majority: the template does
  not know the block; a tie used to go to main, and with it a "Subscribe now" button
  seen once each way was served main), or when a longer key, seen too rarely to decide,
  got the other label: the template backs off only for want of evidence, never over
  evidence against.
  (Measured and not adopted: a coarse shape of the block, text length and link share,
  in its signature. The learned teacher labels blocks of one path and one shape both ways
  too, so it split the counts without making them agree.)
- **Site**: the registrable domain (public suffix list, offline snapshot) plus a *layout
  cluster*: a page joins the domain's cluster that already knows most (``JOIN_SHARE``) of
  its distinct (full) signatures, or starts a new one, so article, video and listing
  pages of one domain keep separate templates.
- **Serving** (``Cluster.serve``) needs both: every block of the page has a vote and the
  votes' mean share, weighted by each block's text (``text_weight``: its visible
  characters, plus one), the agreement with the teacher to expect, is at least
  ``expected_agreement`` (0.9); and the cluster is *verified*: over its last
  ``verify_pages`` teacher-labelled pages that it could have served so, its labels agreed
  with the teacher's on at least ``agreement`` of the blocks (pooled: agreeing blocks over
  blocks, so one heading labelled the other way on a short page does not undo a whole
  verification; measured against "each page at least ``agreement``" on the same two
  documentation sites, full cascade: Python 224 pages served instead of 149, PostgreSQL
  479 instead of 477 at higher agreement; BENCHMARKS.md, session 18). Otherwise the teacher labels
  the page and the template learns. A teacher labels some blocks of one place both ways
  (the learned labeller decides by content: a "See also" heading is other, a "Synopsis"
  heading in the same place main); a template that asked every block for a 0.9 majority
  would never serve those pages, and one verified on pages it could not have served
  would measure what it does not claim. (Measured on two documentation sites, against the
  former rule, a 0.9 majority per block and verification on every teacher page: 231
  pages served instead of 115, with higher agreement; BENCHMARKS.md.) The expectation
  sits well under the verification bar: the votes' shares carry the teacher's own
  inconsistency, which the template's majority does not copy. Where the teacher labels
  one place both ways (a body paragraph other one page in twenty, a section heading
  other one page in three) the majority is the better guess: on four documentation
  sites, the pages that an expectation of 0.9 serves and 0.97 does not came out closer
  to what two independent extractors (trafilatura, rs-trafilatura) take from them than
  the teacher's labels did, on every site (BENCHMARKS.md, session 20). The shares are
  weighted by text because the Markdown is: a one-word heading labelled both ways (a man
  page's "NAME", a closing "GIT" section) changes a few characters of it, a paragraph
  labelled both ways a whole paragraph. Counted per block, Git's manual pages (ten to
  seventy blocks, a few of them short headings the teacher labels both ways) expected
  0.83-0.90 and 31% of them were served; weighted, 49.6%, with the served Markdown
  closer to the teacher's than before, and the judges again preferred the template's
  labels where they differed from the teacher's, on every site (BENCHMARKS.md, session
  21). A template that would label
  no block of a page main does not serve it: the teacher decides whether it has any.
- **Shadow checks**: a share of served pages (``shadow_rate``, chosen by a hash of the
  page id, so reruns choose the same pages) still goes to the teacher. The page joins the
  verification window; a disagreement, the window's pooled agreement falling under
  ``agreement``, suspends the template until it re-verifies on fresh teacher pages. (A
  check of the shadow page alone at ``agreement`` is stricter than the verification that
  let the template serve: on the Python documentation 8 of 13 shadow pages fell under it,
  each a suspension; pooled, 5 of 15 suspend; BENCHMARKS.md, session 19.)
- **Only sure labels teach**: teacher labels given with a confidence under
  ``min_teacher_confidence`` (0.5, the learned labeller's calibrated confidence and the
  floor of its ``learned+vllm`` cascade) neither teach a template nor count in its
  verification or shadow checks. On a page the teacher is unsure of, its labels are
  noise a template would otherwise learn: on Git's and Django's documentation, sites no
  rule was tuned on, taking every page at its word served 8 and 3 pages, this bar 16 and
  187 (BENCHMARKS.md, session 19). A teacher without a confidence (vLLM, heuristic) is
  taken at its word.
- **Bounded memory**: at most ``max_sites`` domains (least recently used evicted), at
  most ``max_clusters`` layouts per domain and ``max_signatures`` signatures per layout,
  and as many back-off signatures (the least seen dropped). Back-off signatures live in
  the same ``ClusterState.counts`` map as the signatures (they start with ``*>``), so the
  state format is unchanged and an older state loads as a template without back-off yet.

The cache is pure and synchronous; ``streams`` keeps it in a compacted Kafka topic
(``SiteState`` records) so every label worker shares it and a restart keeps it. A state
carries the version of the signature rules it was learnt under (``SIGNATURE_RULES``):
after an upgrade that changes what a block's signature is, a state of the old rules is
not loaded (its counts sit under keys that no longer mean the same blocks; the
``stale_state`` event), and the site is relearnt from the teacher.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

from selectolax.lexbor import LexborHTMLParser, LexborNode

from dripstream.processors.label.base import Labeller, LabelOutcome
from dripstream.processors.training.labels import block_text
from dripstream.topics.records import MAIN, OTHER, ClusterState, SimplifiedPage, SiteState

TEMPLATE_LABELLER = "template"
# The version of block_keys' rules: bump it whenever a page's blocks would get other keys.
# 1: states written before the field existed; 2: session 21 (the rules of session 20:
# heading anchors out of ids, the ~links and ~empty marks, two back-off paths).
SIGNATURE_RULES = 2
JOIN_SHARE = 0.6  # a page joins a layout cluster that knows this share of its signatures
MAX_PATH_STEPS = 6  # a signature is the block and its 5 nearest ancestors
# Back-off signatures, most specific first: (steps left out below, steps kept). (0, 2): the
# block and its parent; (1, 2): any child of the block's parent and grandparent.
BACKOFF = ((0, 2), (1, 2))
BACKOFF_MARK = "*>"  # back-off signatures start with it (a CSS selector: any ancestors)
LINKS_MARK = "~links"  # ends the signature of a block whose text is mostly link text
LINKS_SHARE = 0.6
EMPTY_MARK = "~empty"  # ends the signature of a block without text (an image, a rule)
_MARK_NOTES = {LINKS_MARK: "mostly link text", EMPTY_MARK: "no text"}  # in css_selector
_LAYOUT_ID = re.compile(r"^[a-z]+$")  # an id that names a region: content, sidebar, footer
_HEADINGS = frozenset(("h1", "h2", "h3", "h4", "h5", "h6"))
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


@lru_cache(maxsize=65536)
def generalise(token: str) -> str:
    """A class token without the parts that change from page to page or build to
    build: machine-made suffixes and letter-digit mixes -> ``*``, digit runs -> ``#``."""
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
    head = node if node.tag in _HEADINGS else next(node.iter(), None)
    if head is None or head.tag not in _HEADINGS:
        return False
    return _NOT_ALNUM.sub("", (head.text(deep=True) or "").lower()) == element_id


def _step(node: LexborNode) -> str:
    attributes = node.attributes
    classes = sorted(
        {name for t in (attributes.get("class") or "").split() if (name := _class_token(t))}
    )
    element_id = attributes.get("id")
    step = node.tag
    if element_id and _LAYOUT_ID.match(element_id) and not _anchor(node, element_id):
        step += f"#{element_id}"
    return step + "".join(f".{name}" for name in classes)


def _text_mark(block: LexborNode) -> str:
    """``EMPTY_MARK`` for a block without text, ``LINKS_MARK`` for one mostly of link
    text, else nothing."""
    text = len(block.text(strip=True))
    if not text:
        return EMPTY_MARK
    links = sum(len(a.text(strip=True)) for a in block.css("a"))
    return LINKS_MARK if links >= LINKS_SHARE * text else ""


def block_keys(simplified_html: str) -> list[tuple[str, ...]]:
    """Per block, in block order (``_item_id`` 1..n): its signature, then its back-off
    signatures (``BACKOFF``, most specific first; those longer than the path left out).
    ``*>div.a>p`` is a ``p`` in a ``div.a``; ``*>ul.b>li.c>*`` any child of ``ul.b>li.c``."""
    tree = LexborHTMLParser(simplified_html)
    keys = []
    step_of: dict[int, str] = {}  # ancestors are shared by many blocks: one step each
    for block in tree.css("[_item_id]"):
        steps = []
        node: LexborNode | None = block
        while node is not None and node.tag not in _ROOTS and len(steps) < MAX_PATH_STEPS:
            step = step_of.get(node.mem_id)
            if step is None:
                step = step_of[node.mem_id] = _step(node)
            steps.append(step)
            node = node.parent
        steps.reverse()
        if steps:
            steps[-1] += _text_mark(block)
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


def registrable_domain(url: str) -> str:
    """``news.bbc.co.uk`` -> ``bbc.co.uk``; a host without a public suffix (an intranet
    name, ``.example``, an IP address) stays whole, less a leading ``www.``."""
    parts = _domain_extractor()(url)
    if parts.suffix and parts.domain:
        return f"{parts.domain}.{parts.suffix}".lower()
    host = urlsplit(url).hostname or url
    return host.lower().removeprefix("www.")


@dataclass(frozen=True)
class TemplateSettings:
    agreement: float = 0.98
    expected_agreement: float = 0.9
    verify_pages: int = 3
    min_support: int = 2
    shadow_rate: float = 0.05
    min_teacher_confidence: float = 0.5
    max_sites: int = 3_000
    max_clusters: int = 8
    max_signatures: int = 400


@dataclass
class Cluster:
    """One layout of one site: label counts per signature and its verification record."""

    verify_pages: int
    counts: dict[str, list[int]] = field(default_factory=dict)  # signature -> [main, other]
    recent: deque[float] = field(init=False)  # agreement on the last servable teacher pages
    recent_blocks: deque[int] = field(init=False)  # and their blocks
    suspended: bool = False
    served: int = 0
    taught: int = 0

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.verify_pages)
        self.recent_blocks = deque(maxlen=self.verify_pages)

    def knows(self, signatures: set[str]) -> float:
        return (
            sum(1 for s in signatures if s in self.counts) / len(signatures) if signatures else 0.0
        )

    def vote(
        self, keys: str | Sequence[str], settings: TemplateSettings
    ) -> tuple[str, float] | None:
        """A block's label from its keys (``block_keys``: signature first, then shorter
        ones) and the share of the deciding key's teacher labels that agree with it, or
        None (see the module docstring)."""
        if isinstance(keys, str):
            keys = (keys,)
        seen_main = seen_other = 0  # labels of longer keys seen too rarely to decide
        for key in keys:
            main, other = self.counts.get(key, (0, 0))
            total = main + other
            if total >= settings.min_support:
                if main == other:
                    return None  # no majority: the template does not know the block
                if main > other:
                    return None if seen_other else (MAIN, main / total)
                return None if seen_main else (OTHER, other / total)
            seen_main += main
            seen_other += other
        return None

    def serve(
        self,
        keys: Sequence[Sequence[str]],
        settings: TemplateSettings,
        weights: Sequence[int] | None = None,
    ) -> tuple[list[str] | None, str]:
        """The labels the template would give the page, or None and why not (a
        ``NOT_SERVED`` key): a block without a vote, or less agreement with the teacher
        to expect than ``expected_agreement`` (the votes' shares weighted by ``weights``,
        per block its ``text_weight``; without them every block alike). Verification is
        the caller's."""
        votes = [vote for block in keys if (vote := self.vote(block, settings)) is not None]
        if not votes or len(votes) < len(keys):
            return None, "unknown_blocks"
        if weights is None or len(weights) != len(votes):
            weights = [1] * len(votes)
        expected = sum(share * weight for (_, share), weight in zip(votes, weights, strict=True))
        if expected < settings.expected_agreement * sum(weights):
            return None, "mixed_labels"
        if all(label != MAIN for label, _ in votes):
            return None, "nothing_main"
        return [label for label, _ in votes], ""

    def remember(self, agreement: float, blocks: int) -> None:
        """A servable teacher page's agreement with the template, over ``blocks`` blocks."""
        self.recent.append(agreement)
        self.recent_blocks.append(blocks)

    def forget(self) -> None:
        self.recent.clear()
        self.recent_blocks.clear()

    def recent_agreement(self) -> float:
        """The block agreement over the last servable teacher pages, pooled: agreeing
        blocks over blocks (a state saved without block counts: each page counts once)."""
        blocks = list(self.recent_blocks)
        if len(blocks) != len(self.recent):
            blocks = [1] * len(self.recent)
        total = sum(blocks)
        return (
            sum(a * b for a, b in zip(self.recent, blocks, strict=True)) / total if total else 0.0
        )

    def verified(self, settings: TemplateSettings) -> bool:
        return (
            not self.suspended
            and len(self.recent) >= settings.verify_pages
            and self.recent_agreement() >= settings.agreement
        )

    def learn(
        self,
        keys: Sequence[Sequence[str]],
        labels: Sequence[str],
        settings: TemplateSettings,
    ) -> None:
        for block, label in zip(keys, labels, strict=True):
            for key in block:
                counts = self.counts.setdefault(key, [0, 0])
                counts[0 if label == MAIN else 1] += 1
        if len(self.counts) > settings.max_signatures:
            self.counts = _most_seen(self.counts, settings.max_signatures)
        self.taught += 1

    def to_state(self) -> ClusterState:
        return ClusterState(
            counts={s: (c[0], c[1]) for s, c in self.counts.items()},
            recent=list(self.recent),
            recent_blocks=list(self.recent_blocks),
            suspended=self.suspended,
            served=self.served,
            taught=self.taught,
        )

    @classmethod
    def from_state(cls, state: ClusterState, settings: TemplateSettings) -> Cluster:
        cluster = cls(
            settings.verify_pages,
            counts={s: [c[0], c[1]] for s, c in state.counts.items()},
            suspended=state.suspended,
            served=state.served,
            taught=state.taught,
        )
        cluster.recent.extend(state.recent)
        if len(state.recent_blocks) == len(state.recent):
            cluster.recent_blocks.extend(state.recent_blocks)
        return cluster


def _most_seen(counts: dict[str, list[int]], limit: int) -> dict[str, list[int]]:
    """The ``limit`` most seen signatures and the ``limit`` most seen back-off signatures
    (ties: the first learned), in their order."""
    ranked = sorted(counts.items(), key=lambda item: -sum(item[1]))
    full = [item for item in ranked if not item[0].startswith(BACKOFF_MARK)][:limit]
    backoff = [item for item in ranked if item[0].startswith(BACKOFF_MARK)][:limit]
    keep = {key for key, _ in full} | {key for key, _ in backoff}
    return {key: value for key, value in counts.items() if key in keep}


# Why ``TemplateCache.consider`` left a page to the teacher.
NOT_SERVED = {
    "new_layout": "no layout cluster of the site knows the page yet",
    "unverified": "its cluster is not verified on its last teacher pages (or suspended)",
    "unknown_blocks": "a block of the page has no vote (too little evidence, or against)",
    "mixed_labels": "the teacher labelled the page's blocks too inconsistently to expect "
    "the agreement a served page needs",
    "nothing_main": "the template would label no block of the page main (the teacher "
    "decides whether it has any)",
}


@dataclass
class Decision:
    """What the cache did with one page (for metrics and the record's extractor)."""

    site: str
    cluster: int
    keys: list[tuple[str, ...]]  # per block: signature, then back-off signatures
    weights: list[int]  # per block: its text_weight
    labels: list[str] | None  # the template's labels when it serves the page
    shadow: bool = False
    why_not: str = ""  # when not served: a NOT_SERVED key


class TemplateCache:
    """Per-site templates (see the module docstring): ``consider`` a page, then ``teach``
    it the teacher's labels when it was not served (or was a shadow check)."""

    def __init__(self, settings: TemplateSettings | None = None) -> None:
        self.settings = settings or TemplateSettings()
        self.sites: OrderedDict[str, list[Cluster]] = OrderedDict()
        self.changed: set[str] = set()
        self.counts = {
            "template": 0,
            "teacher": 0,
            "shadow": 0,
            "disagreement": 0,
            "suspended": 0,
            "unsure_teacher": 0,
            "stale_state": 0,
        }

    def _clusters(self, site: str) -> list[Cluster]:
        clusters = self.sites.get(site)
        if clusters is None:
            clusters = self.sites[site] = []
            while len(self.sites) > self.settings.max_sites:
                self.sites.popitem(last=False)
        self.sites.move_to_end(site)
        return clusters

    def consider(self, page: SimplifiedPage) -> Decision:
        """The template's labels for the page when a verified template knows every block."""
        site = registrable_domain(page.url)
        keys = block_keys(page.simplified_html)
        weights = [text_weight(block) for block in page.mapping_blocks]
        clusters = self._clusters(site)
        distinct = {block[0] for block in keys}
        best = max(range(len(clusters)), key=lambda i: clusters[i].knows(distinct), default=-1)
        if best < 0 or clusters[best].knows(distinct) < JOIN_SHARE:
            return Decision(site, -1, keys, weights, None, why_not="new_layout")
        cluster = clusters[best]
        if not cluster.verified(self.settings):
            return Decision(site, best, keys, weights, None, why_not="unverified")
        labels, why_not = cluster.serve(keys, self.settings, weights)
        if labels is None:
            return Decision(site, best, keys, weights, None, why_not=why_not)
        cluster.served += 1
        self.changed.add(site)
        shadow = _shadow(page.page_id, self.settings.shadow_rate)
        self.counts["shadow" if shadow else "template"] += 1
        return Decision(site, best, keys, weights, labels, shadow)

    def teach(
        self, decision: Decision, labels: Sequence[str], confidence: float | None = None
    ) -> None:
        """Learn the teacher's labels for a page ``consider`` did not serve, or check a
        shadow-served page against them (a disagreement suspends the template). Labels
        the teacher gave with a ``confidence`` under ``min_teacher_confidence`` neither
        teach nor check (a teacher without a confidence is always taken at its word)."""
        if len(labels) != len(decision.keys):
            return
        if not decision.shadow:
            self.counts["teacher"] += 1
        if confidence is not None and confidence < self.settings.min_teacher_confidence:
            self.counts["unsure_teacher"] += 1
            return
        clusters = self._clusters(decision.site)
        if decision.cluster < 0:
            clusters.append(Cluster(self.settings.verify_pages))
            if len(clusters) > self.settings.max_clusters:
                clusters.remove(min(clusters, key=lambda c: c.served + c.taught))
            cluster = clusters[-1]
        else:
            cluster = clusters[decision.cluster]
        # Verification counts the pages the template could have served (a shadow page
        # was served): on the others it claims nothing.
        guess = (
            decision.labels
            if decision.shadow
            else cluster.serve(decision.keys, self.settings, decision.weights)[0]
        )
        if guess is not None:
            agreement = sum(a == b for a, b in zip(guess, labels, strict=True)) / len(labels)
            if cluster.suspended and not decision.shadow:
                cluster.forget()
                cluster.suspended = False
            cluster.remember(agreement, len(labels))
            # A shadow page joins the verification window: the template fails its check
            # when it no longer passes the bar that let it serve.
            if decision.shadow and cluster.recent_agreement() < self.settings.agreement:
                self.counts["disagreement"] += 1
                self.counts["suspended"] += 1
                cluster.suspended = True
                cluster.forget()
        cluster.learn(decision.keys, labels, self.settings)
        self.changed.add(decision.site)

    def drain_changed(self) -> list[str]:
        changed, self.changed = sorted(self.changed), set()
        return changed

    def state(self, site: str) -> SiteState | None:
        clusters = self.sites.get(site)
        if clusters is None:
            return None
        return SiteState(
            site=site,
            clusters=[cluster.to_state() for cluster in clusters],
            signature_rules=SIGNATURE_RULES,
        )

    def load(self, state: SiteState | None, site: str) -> None:
        """Take a site's state from the shared store (None: the site was dropped; a state
        of other signature rules is left out, see the module docstring)."""
        if state is None:
            self.sites.pop(site, None)
            return
        if stale(state):
            self.counts["stale_state"] += 1
            return
        self._clusters(site)[:] = [
            Cluster.from_state(cluster, self.settings) for cluster in state.clusters
        ]

    def drop(self, site: str) -> None:
        self.sites.pop(site, None)
        self.changed.add(site)


def _shadow(page_id: str, rate: float) -> bool:
    try:
        return int(page_id[:8], 16) / 0xFFFFFFFF < rate
    except ValueError:
        return False


@dataclass(frozen=True)
class Audit:
    """A served page with the teacher's labels beside the template's (measurement only)."""

    page: SimplifiedPage
    template: list[str]
    teacher: list[str]

    @property
    def agreement(self) -> float:
        pairs = list(zip(self.template, self.teacher, strict=True))
        return sum(a == b for a, b in pairs) / len(pairs) if pairs else 1.0


class TemplateCascade:
    """A labeller: the site-template cache first, the teacher for what it cannot serve
    (and for shadow checks). Served pages carry the labeller name ``template``.

    With ``audit``, the teacher also labels every served page, only to record both
    labellings in ``audits`` (what ``eval --template-cache`` reports); the cache learns
    nothing from it, so audited and unaudited runs serve the same pages.
    """

    def __init__(
        self, teacher: Labeller, cache: TemplateCache | None = None, audit: bool = False
    ) -> None:
        self.teacher = teacher
        self.cache = cache or TemplateCache()
        self.name = teacher.name
        self.audit = audit
        self.audits: list[Audit] = []

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        decisions = [self.cache.consider(page) for page in pages]
        outcomes: list[LabelOutcome | None] = [
            LabelOutcome(list(d.labels), labeller=TEMPLATE_LABELLER, confidence=1.0)
            if d.labels is not None
            else None
            for d in decisions
        ]
        asked = [i for i, d in enumerate(decisions) if d.labels is None or d.shadow]
        if asked:
            answers = self.teacher.label([pages[i] for i in asked])
            for index, answer in zip(asked, answers, strict=True):
                if answer.labels is not None:
                    self.cache.teach(decisions[index], answer.labels, answer.confidence)
                if outcomes[index] is None:
                    outcomes[index] = answer
        if self.audit:
            self._audit(pages, decisions)
        return outcomes  # type: ignore[return-value]

    def _audit(self, pages: Sequence[SimplifiedPage], decisions: Sequence[Decision]) -> None:
        served = [i for i, d in enumerate(decisions) if d.labels is not None]
        if not served:
            return
        answers = self.teacher.label([pages[i] for i in served])
        for index, answer in zip(served, answers, strict=True):
            if answer.labels is not None:
                self.audits.append(Audit(pages[index], decisions[index].labels, answer.labels))


def css_selector(signature: str) -> str:
    """A signature as a CSS selector a person can read and a browser can run: generalised
    tokens become prefix attribute matches, wholly machine-made ones are left out."""
    steps = []
    mark = next((m for m in _MARK_NOTES if signature.endswith(m)), "")
    for step in signature.removesuffix(mark).split(">"):
        head, *classes = step.split(".")  # a generalised class may hold "#": the id leads
        tag, _, element_id = head.partition("#")
        selector = tag
        for token in classes:
            selector += _class_selector(token)
        if element_id:  # one lowercase word (``_LAYOUT_ID``): exact
            selector += f"#{element_id}"
        steps.append(selector)
    return " > ".join(steps) + (f" /* {_MARK_NOTES[mark]} */" if mark else "")


def _class_selector(token: str) -> str:
    cut = min((i for i in (token.find("#"), token.find("*")) if i >= 0), default=-1)
    if cut < 0:
        return f".{token}"
    return f'[class*="{token[:cut]}"]' if cut else ""


def export_site(state: SiteState, settings: TemplateSettings | None = None) -> dict[str, object]:
    """A site's templates as a reviewable configuration, like PACE's per-publisher one:
    per layout, CSS selectors of the main region and of the excluded regions (the teacher
    labelled them so with at least ``agreement`` of its labels), of the uncertain ones
    (labelled both ways: the template gives them the majority label, only on pages whose
    other blocks make up for it), and (``*_backoff``) the shorter selectors used only for
    a block no full selector knows."""
    settings = settings or TemplateSettings()
    layouts = []
    for number, cluster_state in enumerate(state.clusters):
        cluster = Cluster.from_state(cluster_state, settings)
        groups: dict[str, list[str]] = {
            "main": [],
            "exclude": [],
            "uncertain": [],
            "main_backoff": [],
            "exclude_backoff": [],
        }
        for key in sorted(cluster.counts):
            vote = cluster.vote(key, settings)
            label = vote[0] if vote is not None and vote[1] >= settings.agreement else None
            backoff = key.startswith(BACKOFF_MARK)
            if backoff and label is None:
                continue
            group = "main" if label == MAIN else "exclude" if label == OTHER else "uncertain"
            groups[f"{group}_backoff" if backoff else group].append(css_selector(key))
        layouts.append(
            {
                "layout": number,
                "verified": cluster.verified(settings),
                "suspended": cluster.suspended,
                "pages_taught": cluster.taught,
                "pages_served": cluster.served,
                "recent_agreement": [round(value, 3) for value in cluster.recent],
                **{key: sorted(set(values)) for key, values in groups.items()},
            }
        )
    return {"site": state.site, "stale": stale(state), "layouts": layouts}


def stale(state: SiteState) -> bool:
    """The state was learnt under other signature rules: workers do not load it."""
    return state.signature_rules != SIGNATURE_RULES


def site_summary(state: SiteState) -> str:
    """A site's line in ``templates list``: layouts, pages taught and served, ``stale``
    for a state the workers will relearn."""
    taught = sum(cluster.taught for cluster in state.clusters)
    served = sum(cluster.served for cluster in state.clusters)
    line = f"{state.site}\tlayouts={len(state.clusters)}\ttaught={taught}\tserved={served}"
    return line + ("\tstale" if stale(state) else "")
