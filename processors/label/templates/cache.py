"""The site-template cache: per site and layout, the teacher's labels counted per block
signature, and the rules for serving a page without the teacher.

- **Layout cluster**: a page joins the site's cluster that already knows ``JOIN_SHARE`` of
  its distinct signatures, or starts a new one.
- **Vote** of a block (``Cluster.vote``): the first of its keys (signature, then back-off
  signatures) seen ``min_support`` times decides by majority, with the share of the
  teacher's labels that agree. No vote on a tie, or when a longer key seen too rarely to
  decide got the other label.
- **Serving** (``Cluster.serve``): the votes' shares weighted by ``text_weight``, a block
  without a vote counted as a disagreement, reach ``expected_agreement``; a block without
  a vote takes the label of the voted blocks around it when they agree, else other; some
  block is main, and the cluster is verified: its pooled block agreement with the teacher
  over its last ``verify_pages`` servable teacher pages is at least ``agreement`` (and it
  is not suspended).
- **Shadow checks**: a ``shadow_rate`` share of served pages, drawn at random by the cache
  (a process secret: no page can choose to be left out), still goes to the teacher; when
  the window's pooled agreement falls under ``agreement`` the cluster is suspended until
  it re-verifies.
- **Content checks** (``Cluster.departs``): a page whose served labels would give a main
  text share under ``departure`` times the lowest, or an other text mass over the
  highest divided by ``departure`` (plus ``OTHER_SLACK``), of the layout's last
  ``profile_pages`` teacher pages goes to the teacher, which checks the template on it
  like a shadow page (``departs``).
- **Probation**: a site loaded from the shared store, and not yet checked here, serves
  nothing until the teacher agrees (``expected_agreement``) with the template on one
  of its pages here (``probation``); a disagreement suspends the layout.
- Teacher labels with a confidence under ``min_teacher_confidence`` neither teach nor check.
- **Bounded memory**: ``max_sites`` sites and ``max_bytes`` of accounted memory
  (``cluster_bytes``; least recently used sites evicted), ``max_site_bytes`` a site
  (least used layouts, then least seen signatures dropped), ``max_clusters`` layouts per
  site, ``max_signatures`` signatures and as many back-off signatures per layout; a page
  with a signature over ``max_key_chars`` is left to the teacher (``oversized``).

The cache is pure and synchronous. Its state per site is a ``SiteState`` record
(``state``/``load``); a state learnt under other ``SIGNATURE_RULES`` is not loaded, and
one over the bounds above is refused (``rejected_state``).
See docs/template-cache-design.md for the reasons behind these rules.
"""

from __future__ import annotations

import random
import sys
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from dripstream.processors.label.templates.signatures import (
    BACKOFF_MARK,
    SIGNATURE_RULES,
    block_keys,
    registrable_domain,
    text_weight,
)
from dripstream.topics.records import MAIN, OTHER, ClusterState, SimplifiedPage, SiteState

UNKNOWN_LABEL = OTHER  # a block without a vote between a main and an other block
JOIN_SHARE = 0.6  # a page joins a layout cluster that knows this share of its signatures
MIB = 1024 * 1024
PROFILE_MIN_PAGES = 3  # teacher pages a layout's text profile needs before it checks
OTHER_SLACK = 200  # visible characters of other text a page may add to the profile's highest
# Accounted memory (``cluster_bytes``): a signature's string plus its dict slot and counts
# list, a layout's fixed objects, a site's entry. Calibrated against tracemalloc
# (tests/processors/test_templates.py).
ENTRY_BYTES = 150
CLUSTER_BYTES = 2_000
SITE_BYTES = 300


@dataclass(frozen=True)
class TemplateSettings:
    """The cache's bars and bounds (the module docstring says what each one does)."""

    agreement: float = 0.98
    expected_agreement: float = 0.9
    verify_pages: int = 3
    min_support: int = 2
    shadow_rate: float = 0.05
    min_teacher_confidence: float = 0.5
    max_sites: int = 3_000
    max_clusters: int = 8
    max_signatures: int = 400
    max_bytes: int = 256 * MIB
    max_site_bytes: int = 1 * MIB
    max_key_chars: int = 2_048
    departure: float = 0.5
    profile_pages: int = 20


@dataclass
class Cluster:
    """One layout of one site: label counts per signature, its verification record and
    its text profile (main text share and other text mass of its last teacher pages)."""

    verify_pages: int
    counts: dict[str, list[int]] = field(default_factory=dict)  # signature -> [main, other]
    recent: deque[float] = field(init=False)  # agreement on the last servable teacher pages
    recent_blocks: deque[int] = field(init=False)  # and their blocks
    suspended: bool = False
    served: int = 0
    taught: int = 0
    profile_pages: int = 20
    main_shares: deque[float] = field(init=False)  # teacher pages: main share of the text
    other_text: deque[int] = field(init=False)  # and their other text (visible characters)
    probation: bool = False  # loaded from the shared store, not yet checked here

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.verify_pages)
        self.recent_blocks = deque(maxlen=self.verify_pages)
        self.main_shares = deque(maxlen=self.profile_pages)
        self.other_text = deque(maxlen=self.profile_pages)

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
        ``NOT_SERVED`` key): less agreement with the teacher to expect than
        ``expected_agreement`` (the votes' shares weighted by ``weights``, per block its
        ``text_weight``, without them every block alike; a block without a vote counts as
        a disagreement and takes its neighbours' label, ``_fill_unknown``). Verification
        is the caller's."""
        votes = [self.vote(block, settings) for block in keys]
        if weights is None or len(weights) != len(votes):
            weights = [1] * len(votes)
        known = [(vote, weight) for vote, weight in zip(votes, weights, strict=True) if vote]
        if not known:
            return None, "unknown_blocks"
        expected = sum(share * weight for (_, share), weight in known)
        if expected < settings.expected_agreement * sum(weights):
            return None, "unknown_blocks" if len(known) < len(votes) else "mixed_labels"
        labels = _fill_unknown([vote[0] if vote else None for vote in votes])
        if MAIN not in labels:
            return None, "nothing_main"
        return labels, ""

    def departs(
        self, labels: Sequence[str], weights: Sequence[int], settings: TemplateSettings
    ) -> bool:
        """The page, labelled ``labels``, is unlike the layout's last teacher pages: its
        main text share is under ``departure`` times their lowest, or its other text is
        over their highest divided by ``departure``, plus ``OTHER_SLACK`` (text the
        teacher would take as main put in a place the template learned as boilerplate).
        Fewer than ``PROFILE_MIN_PAGES`` profiled pages, or ``departure`` 0: no check."""
        if len(self.main_shares) < PROFILE_MIN_PAGES or settings.departure <= 0:
            return False
        share, other = _text_profile(labels, weights)
        return (
            share < settings.departure * min(self.main_shares)
            or other > max(self.other_text) / settings.departure + OTHER_SLACK
        )

    def profile(self, labels: Sequence[str], weights: Sequence[int]) -> None:
        """Add a teacher page's main share and other text to the layout's text profile."""
        if len(weights) != len(labels):
            return
        share, other = _text_profile(labels, weights)
        self.main_shares.append(share)
        self.other_text.append(other)

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
        weights: Sequence[int] = (),
    ) -> None:
        """Count the teacher's labels under each block's keys (and, with ``weights``,
        profile the page's text)."""
        for block, label in zip(keys, labels, strict=True):
            for key in block:
                counts = self.counts.setdefault(key, [0, 0])
                counts[0 if label == MAIN else 1] += 1
        if len(self.counts) > settings.max_signatures:
            self.counts = _most_seen(self.counts, settings.max_signatures)
        if weights:
            self.profile(labels, weights)
        self.taught += 1

    def to_state(self) -> ClusterState:
        return ClusterState(
            counts={s: (c[0], c[1]) for s, c in self.counts.items()},
            recent=list(self.recent),
            recent_blocks=list(self.recent_blocks),
            suspended=self.suspended,
            served=self.served,
            taught=self.taught,
            main_shares=list(self.main_shares),
            other_text=list(self.other_text),
        )

    @classmethod
    def from_state(cls, state: ClusterState, settings: TemplateSettings) -> Cluster:
        cluster = cls(
            settings.verify_pages,
            counts={s: [c[0], c[1]] for s, c in state.counts.items()},
            suspended=state.suspended,
            served=state.served,
            taught=state.taught,
            profile_pages=settings.profile_pages,
        )
        cluster.recent.extend(state.recent)
        if len(state.recent_blocks) == len(state.recent):
            cluster.recent_blocks.extend(state.recent_blocks)
        if len(state.main_shares) == len(state.other_text):
            cluster.main_shares.extend(state.main_shares)
            cluster.other_text.extend(state.other_text)
        return cluster


def _fill_unknown(labels: Sequence[str | None]) -> list[str]:
    """Each missing label (None) from the nearest labelled blocks around it: their label
    when they agree, else ``UNKNOWN_LABEL``."""
    filled = list(labels)
    before: str | None = None
    for index, label in enumerate(labels):
        if label is None:
            after = next((later for later in labels[index + 1 :] if later is not None), None)
            sides = {side for side in (before, after) if side is not None}
            filled[index] = sides.pop() if len(sides) == 1 else UNKNOWN_LABEL
        else:
            before = label
    return filled  # type: ignore[return-value]


def _text_profile(labels: Sequence[str], weights: Sequence[int]) -> tuple[float, int]:
    """(main share of the page's text, its other text), by ``text_weight``."""
    total = sum(weights)
    main = sum(weight for label, weight in zip(labels, weights, strict=True) if label == MAIN)
    return (main / total if total else 0.0), total - main


def cluster_bytes(cluster: Cluster) -> int:
    """A layout's accounted memory: its signatures' strings (``sys.getsizeof``) plus
    ``ENTRY_BYTES`` each, plus ``CLUSTER_BYTES``."""
    return CLUSTER_BYTES + sum(sys.getsizeof(key) + ENTRY_BYTES for key in cluster.counts)


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
    "unknown_blocks": "blocks without a vote (too little evidence, or against) hold more of "
    "the page's text than its votes make up for",
    "mixed_labels": "the teacher labelled the page's blocks too inconsistently to expect "
    "the agreement a served page needs",
    "nothing_main": "the template would label no block of the page main (the teacher "
    "decides whether it has any)",
    "departs": "the page's main text share or other text is unlike the layout's last "
    "teacher pages (the teacher checks the template on it)",
    "probation": "the site's state came from the shared store and has not been checked "
    "here yet (the teacher checks the template on it)",
    "oversized": "a block's signature is longer than the cache keeps",
}
CHECKED = frozenset(("departs", "probation"))  # not served: the teacher checks the guess


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
    guess: list[str] | None = None  # the template's labels on a page in ``CHECKED``
    layout: Cluster | None = None  # the cluster (``cluster`` is its index at the time)


class TemplateCache:
    """Per-site templates (see the module docstring): ``consider`` a page, then ``teach``
    it the teacher's labels when it was not served (or was a shadow check). ``seed`` fixes
    the shadow draw (benchmarks); by default it is a process secret."""

    def __init__(self, settings: TemplateSettings | None = None, seed: int | None = None) -> None:
        self.settings = settings or TemplateSettings()
        self.sites: OrderedDict[str, list[Cluster]] = OrderedDict()
        self.changed: set[str] = set()
        self.bytes = 0  # accounted memory of every site (``site_bytes``)
        self._site_bytes: dict[str, int] = {}
        self._random = random.Random(seed)  # None: seeded from os.urandom
        self.counts = {
            "template": 0,
            "teacher": 0,
            "shadow": 0,
            "disagreement": 0,
            "suspended": 0,
            "unsure_teacher": 0,
            "stale_state": 0,
            "departs": 0,
            "probation": 0,
            "oversized": 0,
            "rejected_state": 0,
            "unauthenticated_state": 0,
            "unpublishable_state": 0,
            "evicted": 0,
        }

    def _clusters(self, site: str) -> list[Cluster]:
        clusters = self.sites.get(site)
        if clusters is None:
            clusters = self.sites[site] = []
            self._account(site)
            while len(self.sites) > self.settings.max_sites:
                self._evict(next(iter(self.sites)))
        self.sites.move_to_end(site)
        return clusters

    def _evict(self, site: str, counted: bool = True) -> None:
        """Forget a site (``counted``: to keep a bound, an ``evicted`` event)."""
        if self.sites.pop(site, None) is not None and counted:
            self.counts["evicted"] += 1
        self.bytes -= self._site_bytes.pop(site, 0)

    def site_bytes(self, site: str) -> int:
        """A site's accounted memory: ``SITE_BYTES`` and its key, plus ``cluster_bytes``
        of each layout."""
        clusters = self.sites.get(site)
        if clusters is None:
            return 0
        return SITE_BYTES + sys.getsizeof(site) + sum(map(cluster_bytes, clusters))

    def _account(self, site: str) -> None:
        """Re-count a changed site's memory and keep the bounds: the site within
        ``max_site_bytes`` (least used layouts dropped, then a lone layout's least seen
        signatures), the cache within ``max_bytes`` (least recently used sites evicted)."""
        clusters = self.sites.get(site)
        if clusters is None:
            return
        size = self.site_bytes(site)
        while size > self.settings.max_site_bytes and clusters:
            if len(clusters) > 1:
                clusters.remove(min(clusters, key=lambda c: c.served + c.taught))
            else:
                [cluster] = clusters
                keep = len(cluster.counts) // 4  # of each kind: about half the signatures
                if keep:
                    cluster.counts = _most_seen(cluster.counts, keep)
                else:
                    clusters.clear()
            size = self.site_bytes(site)
        self.bytes += size - self._site_bytes.get(site, 0)
        self._site_bytes[site] = size
        while self.bytes > self.settings.max_bytes and len(self.sites) > 1:
            oldest = next(iter(self.sites))
            self._evict(oldest if oldest != site else list(self.sites)[1])

    def _shadow(self) -> bool:
        return self._random.random() < self.settings.shadow_rate

    def consider(self, page: SimplifiedPage) -> Decision:
        """The template's labels for the page when a verified template knows every block."""
        site = registrable_domain(page.url)
        keys = block_keys(page.simplified_html)
        weights = [text_weight(block) for block in page.mapping_blocks]
        if any(len(block[0]) > self.settings.max_key_chars for block in keys):
            self.counts["oversized"] += 1
            return Decision(site, -1, [], weights, None, why_not="oversized")
        clusters = self._clusters(site)
        distinct = {block[0] for block in keys}
        best = max(range(len(clusters)), key=lambda i: clusters[i].knows(distinct), default=-1)
        if best < 0 or clusters[best].knows(distinct) < JOIN_SHARE:
            return Decision(site, -1, keys, weights, None, why_not="new_layout")
        cluster = clusters[best]
        if not cluster.verified(self.settings):
            return Decision(site, best, keys, weights, None, why_not="unverified", layout=cluster)
        labels, why_not = cluster.serve(keys, self.settings, weights)
        if labels is None:
            return Decision(site, best, keys, weights, None, why_not=why_not, layout=cluster)
        for why_not, check in (
            ("probation", cluster.probation),
            ("departs", cluster.departs(labels, weights, self.settings)),
        ):
            if check:
                self.counts[why_not] += 1
                return Decision(
                    site, best, keys, weights, None, why_not=why_not, guess=labels, layout=cluster
                )
        cluster.served += 1
        self.changed.add(site)
        shadow = self._shadow()
        self.counts["shadow" if shadow else "template"] += 1
        return Decision(site, best, keys, weights, labels, shadow, layout=cluster)

    def teach(
        self, decision: Decision, labels: Sequence[str], confidence: float | None = None
    ) -> None:
        """Learn the teacher's labels for a page ``consider`` did not serve, or check a
        shadow-served page against them (a disagreement suspends the template). Labels
        the teacher gave with a ``confidence`` under ``min_teacher_confidence`` neither
        teach nor check (a teacher without a confidence is always taken at its word).
        A page that ``departs`` is checked like a shadow page; a page on ``probation``
        lifts it from the site when the teacher agrees with the template on at least
        ``expected_agreement`` of its blocks, and suspends its layout when not."""
        if not decision.shadow:
            self.counts["teacher"] += 1
        if len(labels) != len(decision.keys) or decision.why_not == "oversized":
            return
        if confidence is not None and confidence < self.settings.min_teacher_confidence:
            self.counts["unsure_teacher"] += 1
            return
        clusters = self._clusters(decision.site)
        if decision.cluster < 0:
            clusters.append(
                Cluster(self.settings.verify_pages, profile_pages=self.settings.profile_pages)
            )
            if len(clusters) > self.settings.max_clusters:
                clusters.remove(min(clusters, key=lambda c: c.served + c.taught))
            cluster = clusters[-1]
        elif decision.layout is not None and any(c is decision.layout for c in clusters):
            cluster = decision.layout
        else:
            return  # its layout was replaced (a store update) or dropped meanwhile
        checked = decision.shadow or decision.why_not in CHECKED
        # Verification counts the pages the template could have served (a shadow page
        # was served, a checked one would have been): on the others it claims nothing.
        guess = (
            decision.labels
            if decision.shadow
            else decision.guess
            if checked
            else cluster.serve(decision.keys, self.settings, decision.weights)[0]
        )
        if guess is not None:
            agreement = sum(a == b for a, b in zip(guess, labels, strict=True)) / len(labels)
            if decision.why_not == "probation":
                trusted = agreement >= self.settings.expected_agreement
                for layout in clusters:
                    layout.probation = layout.probation and not trusted
                if not trusted:
                    self._suspend(cluster)
            else:
                if cluster.suspended and not checked:
                    cluster.forget()
                    cluster.suspended = False
                cluster.remember(agreement, len(labels))
                # A checked page joins the verification window: the template fails its
                # check when it no longer passes the bar that let it serve.
                if checked and cluster.recent_agreement() < self.settings.agreement:
                    self._suspend(cluster)
        cluster.learn(decision.keys, labels, self.settings, decision.weights)
        self.changed.add(decision.site)
        self._account(decision.site)

    def _suspend(self, cluster: Cluster) -> None:
        self.counts["disagreement"] += 1
        self.counts["suspended"] += 1
        cluster.suspended = True
        cluster.forget()

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

    def refused(self, state: SiteState, site: str) -> str:
        """Why a state from the shared store is not loaded ('' when it may be): another
        site's, or over the bounds (layouts, signatures, signature length)."""
        limits = self.settings
        if state.site != site:
            return "the state is another site's"
        if len(state.clusters) > limits.max_clusters:
            return f"{len(state.clusters)} layouts"
        for cluster in state.clusters:
            if len(cluster.counts) > 2 * limits.max_signatures:
                return f"{len(cluster.counts)} signatures in a layout"
            if any(len(key) > limits.max_key_chars for key in cluster.counts):
                return "a signature over the length a page may have"
            if any(min(counts) < 0 for counts in cluster.counts.values()):
                return "a negative count"
        return ""

    def load(self, state: SiteState | None, site: str, remote: bool = False) -> str:
        """Take a site's state from the shared store (None: the site was dropped; a state
        of other signature rules is left out, see the module docstring). A ``remote``
        state (another worker's) puts the site's layouts on probation unless the site's
        layouts here already passed it. Returns why the state was refused ('' when
        loaded); a refused state leaves the site as it was and counts ``rejected_state``."""
        if state is None:
            self._evict(site, counted=False)
            return ""
        if stale(state):
            self.counts["stale_state"] += 1
            return "stale"
        why = self.refused(state, site)
        clusters = [] if why else [Cluster.from_state(c, self.settings) for c in state.clusters]
        if not why:
            probe = SITE_BYTES + sys.getsizeof(site) + sum(map(cluster_bytes, clusters))
            if probe > self.settings.max_site_bytes:
                why = f"{probe} bytes in memory"
        if why:
            self.counts["rejected_state"] += 1
            return why
        known = self.sites.get(site)
        probation = remote and (known is None or not known or any(c.probation for c in known))
        for cluster in clusters:
            cluster.probation = probation
        self._clusters(site)[:] = clusters
        self._account(site)
        return ""

    def drop(self, site: str) -> None:
        self._evict(site, counted=False)
        self.changed.add(site)


def stale(state: SiteState) -> bool:
    """The state was learnt under other signature rules: workers do not load it."""
    return state.signature_rules != SIGNATURE_RULES
