"""One function per stage, the same code the stream agents and the offline CLI run.

simplify_page(RawPage)        -> SimplifiedPage | FallbackRequest   (raises PageError)
label_pages([SimplifiedPage]) -> [LabelledPage | FallbackRequest]
reconstruct_page(LabelledPage)-> PageRecord | FallbackRequest
fallback_page(FallbackRequest)-> PageRecord                         (raises PageError)
extract_page(RawPage)         -> Outcome  (all of the above, for offline use)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from processors.decode import check_html, decode_html
from processors.errors import PageError
from processors.fallback import EXTRACTOR as FALLBACK_EXTRACTOR
from processors.fallback import fallback_markdown
from processors.labellers.base import Labeller, LabelOutcome
from processors.reconstruct import reconstruct
from processors.simplify import SimplifyConfig, simplify
from processors.tokens import EstimatedTokenCounter, TokenBudget, TokenCounter
from topics.records import (
    FallbackRequest,
    LabelledPage,
    PageRecord,
    RawPage,
    SimplifiedPage,
    page_id,
)

DRIPPER_EXTRACTOR = "dripper"


@dataclass(frozen=True)
class PipelineSettings:
    simplify: SimplifyConfig = field(default_factory=SimplifyConfig)
    budget: TokenBudget = field(default_factory=TokenBudget)
    token_counter: TokenCounter = field(default_factory=EstimatedTokenCounter)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def simplify_page(raw: RawPage, settings: PipelineSettings) -> SimplifiedPage | FallbackRequest:
    """Decode, check and simplify; pages over the token budget or without blocks go to
    fallback. Unusable input raises a PageError subclass (-> dead letter)."""
    started = time.perf_counter()
    content_type = raw.content_type or raw.headers.get("content-type")
    text = decode_html(raw.html, raw.charset)
    check_html(raw.html, text, content_type)
    document = simplify(text, settings.simplify)
    pid = page_id(raw.url, raw.html)
    tokens = settings.token_counter.count(document.simplified_html)
    timings = {"simplify": _ms_since(started)}
    reason = None
    if not document.block_count:
        reason = "no_blocks"
    elif not settings.budget.fits(tokens, document.block_count):
        reason = "over_token_budget"
    if reason:
        return FallbackRequest(
            page_id=pid,
            url=raw.url,
            title=document.title,
            source_html=text,
            reason=reason,
            stage="simplify",
            token_count=tokens,
            timings_ms=timings,
        )
    return SimplifiedPage(
        page_id=pid,
        url=raw.url,
        title=document.title,
        simplified_html=document.simplified_html,
        mapping_blocks=document.mapping_blocks,
        token_count=tokens,
        tokenizer=settings.token_counter.name,
        source_html=text,
        timings_ms=timings,
    )


def to_fallback(page: SimplifiedPage | LabelledPage, reason: str, stage: str) -> FallbackRequest:
    return FallbackRequest(
        page_id=page.page_id,
        url=page.url,
        title=page.title,
        source_html=page.source_html,
        reason=reason,
        stage=stage,
        token_count=page.token_count,
        timings_ms=dict(page.timings_ms),
    )


def label_pages(
    pages: Sequence[SimplifiedPage], labeller: Labeller
) -> list[LabelledPage | FallbackRequest]:
    """Label a batch; a page the labeller could not label goes to fallback with the reason."""
    started = time.perf_counter()
    outcomes = labeller.label(pages)
    return apply_label_outcomes(pages, outcomes, labeller.name, _ms_since(started))


def apply_label_outcomes(
    pages: Sequence[SimplifiedPage],
    outcomes: Sequence[LabelOutcome],
    labeller_name: str,
    batch_ms: float = 0.0,
) -> list[LabelledPage | FallbackRequest]:
    """Pair each page with its outcome: labels -> LabelledPage, failure -> FallbackRequest."""
    if len(outcomes) != len(pages):
        raise RuntimeError(
            f"labeller {labeller_name} returned {len(outcomes)} outcomes for {len(pages)} pages"
        )
    results: list[LabelledPage | FallbackRequest] = []
    for page, outcome in zip(pages, outcomes, strict=True):
        if outcome.labels is None:
            results.append(to_fallback(page, outcome.failure or "labeller_failed", "label"))
            continue
        if len(outcome.labels) != page.block_count:
            results.append(to_fallback(page, "label_mismatch", "label"))
            continue
        timings = {**page.timings_ms, "label": outcome.latency_ms or batch_ms}
        results.append(
            LabelledPage(
                page_id=page.page_id,
                url=page.url,
                title=page.title,
                mapping_blocks=page.mapping_blocks,
                labels=outcome.labels,
                labeller=labeller_name,
                token_count=page.token_count,
                source_html=page.source_html,
                timings_ms=timings,
            )
        )
    return results


def reconstruct_page(page: LabelledPage) -> PageRecord | FallbackRequest:
    """Markdown from the main blocks; nothing selected -> fallback."""
    started = time.perf_counter()
    try:
        result = reconstruct(page.mapping_blocks, page.labels, base_url=page.url)
    except PageError as error:
        return to_fallback(page, error.reason, "reconstruct")
    return PageRecord(
        id=page.page_id,
        url=page.url,
        title=page.title,
        markdown=result.markdown,
        extractor=f"{DRIPPER_EXTRACTOR}:{page.labeller}",
        block_count=len(page.mapping_blocks),
        main_block_count=result.main_blocks,
        token_count=page.token_count,
        timings_ms={**page.timings_ms, "reconstruct": _ms_since(started)},
    )


def fallback_page(request: FallbackRequest) -> PageRecord:
    """trafilatura on the page; raises NothingSelected when it finds nothing either."""
    started = time.perf_counter()
    markdown = fallback_markdown(request.source_html, request.url)
    return PageRecord(
        id=request.page_id,
        url=request.url,
        title=request.title,
        markdown=markdown,
        extractor=FALLBACK_EXTRACTOR,
        fallback_reason=request.reason,
        token_count=request.token_count,
        timings_ms={**request.timings_ms, "fallback": _ms_since(started)},
    )


@dataclass(frozen=True)
class Outcome:
    """Offline result of one page: ``ok``, ``fallback`` (record + reason) or ``error``."""

    status: str
    record: PageRecord | None = None
    reason: str | None = None
    error_class: str | None = None
    message: str | None = None


def _finish(step: PageRecord | FallbackRequest) -> Outcome:
    if isinstance(step, PageRecord):
        return Outcome("ok", step)
    try:
        return Outcome("fallback", fallback_page(step), reason=step.reason)
    except PageError as error:
        return Outcome(
            "error",
            reason=error.reason,
            error_class=type(error).__name__,
            message=f"{step.reason}; fallback: {error}",
        )


def extract_pages(
    raws: Sequence[RawPage], labeller: Labeller, settings: PipelineSettings
) -> list[Outcome]:
    """The whole pipeline for a batch of pages, without Kafka."""
    outcomes: list[Outcome | None] = [None] * len(raws)
    to_label: list[tuple[int, SimplifiedPage]] = []
    for index, raw in enumerate(raws):
        try:
            step = simplify_page(raw, settings)
        except PageError as error:
            outcomes[index] = Outcome(
                "error", reason=error.reason, error_class=type(error).__name__, message=str(error)
            )
            continue
        if isinstance(step, FallbackRequest):
            outcomes[index] = _finish(step)
        else:
            to_label.append((index, step))
    if to_label:
        labelled = label_pages([page for _, page in to_label], labeller)
        for (index, _), item in zip(to_label, labelled, strict=True):
            outcomes[index] = _finish(
                reconstruct_page(item) if isinstance(item, LabelledPage) else item
            )
    missing = [index for index, outcome in enumerate(outcomes) if outcome is None]
    if missing:
        raise RuntimeError(f"pages {missing} got no outcome")
    return outcomes  # type: ignore[return-value]
