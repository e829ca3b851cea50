"""Two labellers in a row: the cheap one first, the second for the pages it gave up on.

``learned+vllm`` (``dripstream.gpu_worker.labeller.learned_then_vllm``) runs the learned CPU
labeller with a confidence floor (``DRIPSTREAM_LEARNED_MIN_CONFIDENCE``, default 0.5
there) and hands the pages below it (``failure="low_confidence"``) to the vLLM labeller
of the profile; every other page keeps the first labeller's answer. Each page's record
says which labeller served it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dripstream.processors.label.base import Labeller, LabelOutcome
from dripstream.topics.records import SimplifiedPage

ESCALATE = frozenset({"low_confidence"})


class CascadeLabeller:
    """``first``, then ``second`` for the pages ``first`` failed with a reason in
    ``escalate``."""

    def __init__(
        self, first: Labeller, second: Labeller, escalate: frozenset[str] = ESCALATE
    ) -> None:
        self.first, self.second, self.escalate = first, second, escalate
        self.name = f"{first.name}+{second.name}"

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        outcomes = [
            replace(outcome, labeller=outcome.labeller or self.first.name)
            for outcome in self.first.label(pages)
        ]
        again = [
            i for i, o in enumerate(outcomes) if o.labels is None and o.failure in self.escalate
        ]
        if again:
            answers = self.second.label([pages[i] for i in again])
            for index, answer in zip(again, answers, strict=True):
                outcomes[index] = replace(answer, labeller=answer.labeller or self.second.name)
        return outcomes
