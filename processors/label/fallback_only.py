"""A labeller that labels nothing: every page takes the fallback route.

Used to measure the fallback extractor (trafilatura) through the very same pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence

from dripstream.processors.label.base import LabelOutcome
from dripstream.topics.records import SimplifiedPage


class FallbackOnlyLabeller:
    name = "fallback"

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        return [LabelOutcome(None, failure="fallback_only") for _ in pages]
