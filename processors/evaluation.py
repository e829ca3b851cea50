"""The paper's quality metric over a dataset: ROUGE-5 F1 per page and mean.

A dataset is JSONL with ``id``, ``url``, ``html``, ``gold_markdown_or_text`` and an
optional ``meta.subset``. Annotation marks are stripped from every page before it is
simplified, whatever the labeller; the oracle reads its labels from the marks first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from processors.annotations import strip_annotation_marks
from processors.labellers.base import AnnotationReader, Labeller
from processors.pipeline import Outcome, PipelineSettings, extract_pages
from processors.sandbox import PageRunner
from processors.scoring import score_page
from processors.sources import raw_page_from_row
from topics.records import page_id


@dataclass(frozen=True)
class PageScore:
    id: str
    subset: str | None
    f1: float
    precision: float
    recall: float
    extractor: str
    status: str


@dataclass(frozen=True)
class EvalReport:
    labeller: str
    pages: list[PageScore]

    def _mean(self, field: str) -> float:
        values = [getattr(page, field) for page in self.pages]
        return sum(values) / len(values) if values else 0.0

    @property
    def mean_f1(self) -> float:
        return self._mean("f1")

    def to_json(self) -> dict[str, object]:
        return {
            "labeller": self.labeller,
            "mean_f1": self.mean_f1,
            "mean_precision": self._mean("precision"),
            "mean_recall": self._mean("recall"),
            "pages": [asdict(page) for page in self.pages],
        }

    def by_subset(self) -> dict[str | None, float]:
        groups: dict[str | None, list[float]] = {}
        for page in self.pages:
            groups.setdefault(page.subset, []).append(page.f1)
        return {subset: sum(v) / len(v) for subset, v in groups.items()}


def _subset(row: dict) -> str | None:
    meta = row.get("meta")
    return meta.get("subset") if isinstance(meta, dict) else None


def evaluate(
    rows: Sequence[dict],
    labeller: Labeller,
    settings: PipelineSettings,
    batch_size: int = 16,
    progress: Callable[[int], None] | None = None,
    runner: PageRunner | None = None,
) -> EvalReport:
    """Run the whole pipeline on every page and score it against its gold."""
    scores: list[PageScore] = []
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        raws = []
        for row in batch:
            raw = raw_page_from_row(row, html=strip_annotation_marks(row["html"]))
            if isinstance(labeller, AnnotationReader):
                labeller.read_annotations(page_id(raw.url, raw.html), row["html"])
            raws.append(raw)
        outcomes = extract_pages(raws, labeller, settings, runner)
        for row, outcome in zip(batch, outcomes, strict=True):
            scores.append(_score(row, outcome))
        if progress is not None:
            progress(len(batch))
    return EvalReport(labeller.name, scores)


def _score(row: dict, outcome: Outcome) -> PageScore:
    markdown = outcome.record.markdown if outcome.record else ""
    score = score_page(markdown, row.get("gold_markdown_or_text") or "")
    extractor = outcome.record.extractor if outcome.record else f"error:{outcome.reason}"
    return PageScore(
        id=str(row["id"]),
        subset=_subset(row),
        f1=score.f1,
        precision=score.precision,
        recall=score.recall,
        extractor=extractor,
        status=outcome.status,
    )
