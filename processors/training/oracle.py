"""The oracle: labels read from WebMainBench's ``cc-select`` annotations.

It measures how faithful simplification + reconstruction are on their own. A block is
main when it lies inside, is, or contains an element a person selected. The oracle reads
the selection from the annotated page *before* the marks are stripped; the pipeline then
simplifies the stripped page, and the oracle checks that both segmentations align.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dripstream.processors.errors import NotAnnotated
from dripstream.processors.extract.simplify import SimplifyConfig, simplify
from dripstream.processors.label.base import LabelOutcome
from dripstream.processors.training.annotations import (
    SELECT_ATTR,
    has_annotation,
    strip_annotation_marks,
)
from dripstream.topics.records import MAIN, OTHER, SimplifiedPage


class OracleLabeller:
    name = "oracle"

    def __init__(self, config: SimplifyConfig | None = None) -> None:
        self._config = dataclasses.replace(config or SimplifyConfig(), mark_attr=SELECT_ATTR)
        self._labels: dict[str, list[str]] = {}

    def read_annotations(self, page_id: str, annotated_html: str) -> None:
        """Learn the labels of one annotated page; raises NotAnnotated without marks."""
        if not has_annotation(annotated_html):
            raise NotAnnotated(f"page {page_id} carries no {SELECT_ATTR} annotation")
        document = simplify(
            strip_annotation_marks(annotated_html, keep_selection=True), self._config
        )
        self._labels[page_id] = [MAIN if marked else OTHER for marked in document.marked]

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        outcomes = []
        for page in pages:
            labels = self._labels.get(page.page_id)
            if labels is None:
                raise NotAnnotated(f"the oracle has no annotation for page {page.page_id}")
            if len(labels) != page.block_count:
                outcomes.append(LabelOutcome(None, failure="label_mismatch"))
            else:
                outcomes.append(LabelOutcome(list(labels)))
        return outcomes
