"""The template cascade audited (measurement only, never in the stream): the teacher also
labels every page the templates served, and both labellings are kept in ``audits`` (what
``eval --template-cache`` and the template benchmarks report). The cache learns nothing
from an audit, so audited and unaudited runs serve the same pages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dripstream.processors.label.base import Labeller, LabelOutcome
from dripstream.processors.label.templates import Decision, TemplateCache, TemplateCascade
from dripstream.topics.records import SimplifiedPage


@dataclass(frozen=True)
class Audit:
    """A served page with the teacher's labels beside the template's."""

    page: SimplifiedPage
    template: list[str]
    teacher: list[str]

    @property
    def agreement(self) -> float:
        pairs = list(zip(self.template, self.teacher, strict=True))
        return sum(a == b for a, b in pairs) / len(pairs) if pairs else 1.0


class AuditedCascade(TemplateCascade):
    """A ``TemplateCascade`` that, with ``audit``, records an ``Audit`` per served page."""

    def __init__(
        self, teacher: Labeller, cache: TemplateCache | None = None, audit: bool = True
    ) -> None:
        super().__init__(teacher, cache)
        self.audit = audit
        self.audits: list[Audit] = []

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        outcomes, decisions = self.label_with_decisions(pages)
        if self.audit:
            self._audit(pages, decisions)
        return outcomes

    def _audit(self, pages: Sequence[SimplifiedPage], decisions: Sequence[Decision]) -> None:
        served = [i for i, d in enumerate(decisions) if d.labels is not None]
        if not served:
            return
        answers = self.teacher.label([pages[i] for i in served])
        for index, answer in zip(served, answers, strict=True):
            if answer.labels is not None:
                self.audits.append(Audit(pages[index], decisions[index].labels, answer.labels))
