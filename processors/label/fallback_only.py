"""The fallback-only labeller (``fallback``): it labels nothing, so every page takes the
pipeline's fallback route and is extracted by the fallback extractor
(``dripstream.processors.extract.fallback``, trafilatura). It runs that extractor through
the same pipeline as the labellers, for comparison; it is not the fallback stage or topic.
"""

from __future__ import annotations

from collections.abc import Sequence

from dripstream.processors.label.base import LabelOutcome
from dripstream.topics.records import SimplifiedPage


class FallbackOnlyLabeller:
    name = "fallback"

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        return [LabelOutcome(None, failure="fallback_only") for _ in pages]
