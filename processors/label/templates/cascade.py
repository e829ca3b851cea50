"""The template cascade: a labeller that serves pages from the site-template cache and
asks its teacher labeller for the rest (and for shadow checks), teaching the cache the
teacher's labels. Served pages carry the labeller name ``TEMPLATE_LABELLER``."""

from __future__ import annotations

from collections.abc import Sequence

from dripstream.processors.label.base import Labeller, LabelOutcome
from dripstream.processors.label.templates.cache import Decision, TemplateCache
from dripstream.topics.records import SimplifiedPage

TEMPLATE_LABELLER = "template"


class TemplateCascade:
    """A labeller: the site-template cache first, the teacher for the pages it does not
    serve and for shadow checks. The teacher's labels teach the cache; served pages carry
    the labeller name ``TEMPLATE_LABELLER`` and confidence 1."""

    def __init__(self, teacher: Labeller, cache: TemplateCache | None = None) -> None:
        self.teacher = teacher
        self.cache = cache or TemplateCache()
        self.name = teacher.name

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        return self.label_with_decisions(pages)[0]

    def label_with_decisions(
        self, pages: Sequence[SimplifiedPage]
    ) -> tuple[list[LabelOutcome], list[Decision]]:
        """``label``'s outcomes, and the cache's decision for each page."""
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
        return outcomes, decisions  # type: ignore[return-value]
