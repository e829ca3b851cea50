"""Quality over a dataset: the paper's ROUGE-5 F1 and WCXB's word F1, per page and mean.

A dataset is JSONL with ``id``, ``url``, ``html``, ``gold_markdown_or_text`` and an
optional ``meta`` (``subset``; WCXB's ``page_type`` and its ``with`` / ``without``
snippets). Annotation marks are stripped from every page before it is simplified,
whatever the labeller; the oracle reads its labels from the marks first. Word F1 and the
snippet rates are WCXB's own metric (``training/wordf1.py``), reported per page type so
figures compare with WCXB's published ones.

With a ``TemplateCascade`` labeller the pages go in file order (the cache learns in crawl
order; within a batch it decides a site's pages in order, see ``templates.cascade``), and
the report adds the cache's share and its agreement with the teacher on the pages it
served (audited: an ``AuditedCascade``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from dripstream.processors.extract.sandbox import PageRunner
from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.base import AnnotationReader, Labeller
from dripstream.processors.label.templates import TEMPLATE_LABELLER, TemplateCascade
from dripstream.processors.pipeline import Outcome, PipelineSettings, extract_pages
from dripstream.processors.training.annotations import strip_annotation_marks
from dripstream.processors.training.scoring import score_page
from dripstream.processors.training.template_audit import AuditedCascade
from dripstream.processors.training.wordf1 import word_score
from dripstream.topics.records import page_id


@dataclass(frozen=True)
class PageScore:
    id: str
    subset: str | None
    f1: float
    precision: float
    recall: float
    extractor: str
    status: str
    page_type: str | None = None
    word_f1: float = 0.0
    with_found: float | None = None
    without_leaked: float | None = None


def _mean_of(pages: Sequence[PageScore], field: str) -> float | None:
    values = [getattr(page, field) for page in pages if getattr(page, field) is not None]
    return sum(values) / len(values) if values else None


def summary(pages: Sequence[PageScore]) -> dict[str, float | int | None]:
    """``page_count`` and the means over ``pages``: ROUGE-5 (``mean_f1``,
    ``mean_precision``, ``mean_recall``), word F1 (``mean_word_f1``) and the shares of
    snippets found and leaked (None where no page has snippets)."""
    return {
        "page_count": len(pages),
        "mean_f1": _mean_of(pages, "f1") or 0.0,
        "mean_precision": _mean_of(pages, "precision") or 0.0,
        "mean_recall": _mean_of(pages, "recall") or 0.0,
        "mean_word_f1": _mean_of(pages, "word_f1") or 0.0,
        "with_found": _mean_of(pages, "with_found"),
        "without_leaked": _mean_of(pages, "without_leaked"),
    }


@dataclass(frozen=True)
class EvalReport:
    labeller: str
    pages: list[PageScore]
    templates: dict[str, object] | None = None

    def by_page_type(self) -> dict[str, dict[str, float | int | None]]:
        """``summary`` of each ``meta.page_type``'s pages (pages without one are left out)."""
        groups: dict[str, list[PageScore]] = {}
        for page in self.pages:
            if page.page_type:
                groups.setdefault(page.page_type, []).append(page)
        return {kind: summary(pages) for kind, pages in sorted(groups.items())}

    def to_json(self) -> dict[str, object]:
        """``summary`` of every page, ``by_page_type``, the templates' share (with the cache
        on) and each page's scores: the same keys at the top and for each page type."""
        report: dict[str, object] = {
            "labeller": self.labeller,
            **summary(self.pages),
            "by_page_type": self.by_page_type(),
        }
        if self.templates is not None:
            report["templates"] = self.templates
        report["pages"] = [asdict(page) for page in self.pages]
        return report

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
    """Run the whole pipeline on every page and score it against its gold, in batches of
    ``batch_size`` in file order (a template cascade decides a site's pages of a batch in
    order, each after the teacher labels of the ones before)."""
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
    templates = (
        _template_report(labeller, scores) if isinstance(labeller, TemplateCascade) else None
    )
    return EvalReport(labeller.name, scores, templates)


def _template_report(cascade: TemplateCascade, scores: Sequence[PageScore]) -> dict[str, object]:
    served = sum(1 for page in scores if page.extractor.endswith(f":{TEMPLATE_LABELLER}"))
    audits = cascade.audits if isinstance(cascade, AuditedCascade) else []
    return {
        "served_pages": served,
        "served_share": served / len(scores) if scores else 0.0,
        "served_block_agreement": (
            sum(audit.agreement for audit in audits) / len(audits) if audits else None
        ),
        "served_exact_pages": sum(1 for audit in audits if audit.agreement == 1.0),
        "counts": dict(cascade.cache.counts),
    }


def _score(row: dict, outcome: Outcome) -> PageScore:
    markdown = outcome.record.markdown if outcome.record else ""
    gold = row.get("gold_markdown_or_text") or ""
    score = score_page(markdown, gold)
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    words = word_score(markdown, gold, meta.get("with") or (), meta.get("without") or ())
    extractor = outcome.record.extractor if outcome.record else f"error:{outcome.reason}"
    return PageScore(
        id=str(row["id"]),
        subset=_subset(row),
        f1=score.f1,
        precision=score.precision,
        recall=score.recall,
        extractor=extractor,
        status=outcome.status,
        page_type=meta.get("page_type"),
        word_f1=words.f1,
        with_found=words.with_found,
        without_leaked=words.without_leaked,
    )
