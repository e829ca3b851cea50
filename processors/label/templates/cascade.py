"""The template cascade: a labeller that serves pages from the site-template cache and
asks its teacher labeller for the rest (and for shadow checks), teaching the cache the
teacher's labels. Served pages carry the labeller name ``TEMPLATE_LABELLER``.

A batch is labelled in rounds, so that a batch never hides a page's teacher labels from
the next page of its site: the pages are grouped by site (``registrable_domain``, the
cache's key), in batch order. Each round takes every site's undecided pages in order,
serving them from the cache until one needs the teacher (not served, or a shadow
check); those pages, one a site, go to the teacher as one batch, and the cache learns
each answer before the next round decides the site's next page. Per site, the cache
thus decides as if the pages came one at a time; pages of different sites still share
the teacher's batches."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from dripstream.processors.label.base import Labeller, LabelOutcome
from dripstream.processors.label.templates.cache import Decision, TemplateCache
from dripstream.processors.label.templates.signatures import registrable_domain
from dripstream.topics.records import SimplifiedPage

TEMPLATE_LABELLER = "template"


class TemplateCascade:
    """A labeller: the site-template cache first, the teacher for the pages it does not
    serve and for shadow checks. The teacher's labels teach the cache; served pages carry
    the labeller name ``TEMPLATE_LABELLER`` and confidence 1. A batch is decided in
    rounds (see the module docstring); when the teacher raises, the rounds before stay
    learned, as a redelivered page would be."""

    def __init__(self, teacher: Labeller, cache: TemplateCache | None = None) -> None:
        self.teacher = teacher
        self.cache = cache or TemplateCache()
        self.name = teacher.name
        self.teacher_batches = 0  # calls to the teacher (a batch of pages each)

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        return self.label_with_decisions(pages)[0]

    def label_with_decisions(
        self, pages: Sequence[SimplifiedPage]
    ) -> tuple[list[LabelOutcome], list[Decision]]:
        """``label``'s outcomes, and the cache's decision for each page."""
        outcomes: list[LabelOutcome | None] = [None] * len(pages)
        decisions: list[Decision | None] = [None] * len(pages)
        waiting: dict[str, deque[int]] = {}
        for index, page in enumerate(pages):
            waiting.setdefault(registrable_domain(page.url), deque()).append(index)
        while waiting:
            asked: list[int] = []
            for site in list(waiting):
                queue = waiting[site]
                while queue:
                    index = queue.popleft()
                    decision = decisions[index] = self.cache.consider(pages[index])
                    if decision.labels is not None:
                        outcomes[index] = LabelOutcome(
                            list(decision.labels), labeller=TEMPLATE_LABELLER, confidence=1.0
                        )
                    if decision.labels is None or decision.shadow:
                        asked.append(index)
                        break
                if not queue:
                    del waiting[site]
            if asked:
                self._ask(pages, asked, decisions, outcomes)
        return outcomes, decisions  # type: ignore[return-value]

    def _ask(
        self,
        pages: Sequence[SimplifiedPage],
        asked: list[int],
        decisions: list[Decision | None],
        outcomes: list[LabelOutcome | None],
    ) -> None:
        """One teacher batch: teach the cache each answer, keep it where not served."""
        answers = self.teacher.label([pages[i] for i in asked])
        self.teacher_batches += 1
        for index, answer in zip(asked, answers, strict=True):
            decision = decisions[index]
            if answer.labels is not None and decision is not None:
                self.cache.teach(decision, answer.labels, answer.confidence)
            if outcomes[index] is None:
                outcomes[index] = answer
