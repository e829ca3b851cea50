"""The site-template cache: per site and layout, the teacher's labels counted per block
signature, and the rules for serving a page without the teacher.

- **Layout cluster**: a page joins the site's cluster that already knows ``JOIN_SHARE`` of
  its distinct signatures, or starts a new one.
- **Vote** of a block (``Cluster.vote``): the first of its keys (signature, then back-off
  signatures) seen ``min_support`` times decides by majority, with the share of the
  teacher's labels that agree. No vote on a tie, or when a longer key seen too rarely to
  decide got the other label.
- **Serving** (``Cluster.serve``): every block has a vote, the votes' shares weighted by
  ``text_weight`` reach ``expected_agreement``, some block is main, and the cluster is
  verified: its pooled block agreement with the teacher over its last ``verify_pages``
  servable teacher pages is at least ``agreement`` (and it is not suspended).
- **Shadow checks**: a ``shadow_rate`` share of served pages (chosen by page id) still goes
  to the teacher; when the window's pooled agreement falls under ``agreement`` the cluster
  is suspended until it re-verifies.
- Teacher labels with a confidence under ``min_teacher_confidence`` neither teach nor check.
- **Bounded memory**: ``max_sites`` sites (least recently used evicted), ``max_clusters``
  layouts per site, ``max_signatures`` signatures and as many back-off signatures per layout.

The cache is pure and synchronous. Its state per site is a ``SiteState`` record
(``state``/``load``); a state learnt under other ``SIGNATURE_RULES`` is not loaded.
See docs/template-cache-design.md for the reasons behind these rules.
"""

from __future__ import annotations

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

JOIN_SHARE = 0.6  # a page joins a layout cluster that knows this share of its signatures


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


def stale(state: SiteState) -> bool:
    """The state was learnt under other signature rules: workers do not load it."""
    return state.signature_rules != SIGNATURE_RULES
