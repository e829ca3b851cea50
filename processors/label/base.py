"""The one small protocol every labeller (CPU or GPU) implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dripstream.topics.records import SimplifiedPage


@dataclass(frozen=True)
class LabelOutcome:
    """Labels for one page, or the reason there are none (the page then goes to fallback)."""

    labels: list[str] | None
    failure: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    confidence: float | None = None
    """Calibrated probability that the page's labels are right, when the labeller has one."""
    labeller: str | None = None
    """Who labelled this page when not the labeller itself (a cascade's ``template``)."""
    second_opinion: float | None = None
    """Set when the labeller is unsure: the fallback extractor also runs, and its Markdown
    replaces ours when it holds at least this many times our words (0: whenever any)."""

    @property
    def ok(self) -> bool:
        return self.labels is not None


@runtime_checkable
class Labeller(Protocol):
    """``label`` returns exactly one outcome per page, in order; a per-page failure is an
    outcome with ``failure`` set, never an exception (exceptions mean the labeller itself
    is broken and the caller retries the batch)."""

    name: str

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]: ...


@runtime_checkable
class AsyncLabeller(Labeller, Protocol):
    """A labeller that serves pages one at a time inside the caller's in-flight window
    (vLLM's continuous batching): a finished page frees its slot at once."""

    async def label_page(self, page: SimplifiedPage) -> LabelOutcome: ...


@runtime_checkable
class AnnotationReader(Protocol):
    """A labeller that reads its labels from an annotated copy of the page (the oracle);
    evaluation hands it each page's annotated HTML before the marks are stripped."""

    def read_annotations(self, page_id: str, annotated_html: str) -> None: ...
