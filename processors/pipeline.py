"""One function per stage, the same code the stream agents and the offline CLI run.

simplify_page(RawPage)                 -> SimplifiedPage | FallbackRequest  (raises PageError)
                                          | PageRecord (gone: HTTP 404/410)
label_pages([SimplifiedPage])          -> [LabelledPage | FallbackRequest]
reconstruct_page(LabelledPage)         -> PageRecord | FallbackRequest
fallback_page(FallbackRequest, RawPage)-> PageRecord                        (raises PageError)
extract_pages([RawPage])               -> [Outcome]  (all of the above, for offline use)

Records after simplification do not carry the page: the fallback gets it from the caller
(offline) or from the pages topic by the record's ``source`` pointer (stream).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from dripstream.processors.errors import (
    ErrorStatus,
    NothingSelected,
    PageError,
    TooLarge,
    decoding,
)
from dripstream.processors.extract.budget import PipelineSettings
from dripstream.processors.extract.fallback import EXTRACTOR as FALLBACK_EXTRACTOR
from dripstream.processors.extract.fallback import fallback_markdown, load_extractor
from dripstream.processors.extract.language import detect_language, load_detector
from dripstream.processors.extract.reconstruct import reconstruct
from dripstream.processors.extract.sandbox import InProcess, PageRunner
from dripstream.processors.extract.simplify import simplify
from dripstream.processors.ingest.crawl import charset_param, header_dict, http_body
from dripstream.processors.ingest.decode import DecodedHtml, check_html, decode_html_utf8
from dripstream.processors.label.base import Labeller, LabelOutcome
from dripstream.topics.records import (
    GONE_STATUSES,
    MAX_CLOCK_SKEW_S,
    CrawlInfo,
    FallbackRequest,
    LabelledPage,
    PageRecord,
    RawPage,
    SimplifiedPage,
    SourceRef,
    document_id,
    load_canonicalizer,
    page_id,
)

DRIPPER_EXTRACTOR = "dripper"
SECOND_OPINION = "second_opinion"  # the fallback reason of a page the labeller was unsure of


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def decoded_page(raw: RawPage, max_chars: int | None = None) -> str:
    """The page as text, checked: raises a PageError for input that is not a page (see
    decoded_page_utf8)."""
    return decoded_page_utf8(raw, max_chars).text


def decoded_page_utf8(raw: RawPage, max_chars: int | None = None) -> DecodedHtml:
    """The page as text, checked, with its UTF-8 bytes when it has them (``DecodedHtml``);
    raises a PageError for input that is not a page.

    The HTTP body's framing and content codings are undone first (``http_body``); the
    charset is the byte-order mark's, else the record's, else the Content-Type's, else
    the page's own or detected (``decode_html``). An ASCII body (no NUL: not UTF-16) over
    ``max_chars`` bytes is that many characters in any codec, so it is refused before the
    decode copies it."""
    headers = raw.headers
    if any(not name.islower() for name in headers):
        headers = header_dict(headers)
    content_type = raw.content_type or headers.get("content-type")
    body = http_body(raw.html, headers)
    if max_chars is not None and len(body) > max_chars and body.isascii() and b"\0" not in body:
        raise TooLarge(f"{len(body)} characters, limit {max_chars}")
    decoded = decode_html_utf8(body, raw.charset or charset_param(content_type))
    check_html(body, decoded.text, content_type)
    return decoded


def crawl_info(raw: RawPage, now: float | None = None) -> CrawlInfo | None:
    """The crawl metadata a record carries (None when the input has none). A
    ``fetched_at`` more than ``MAX_CLOCK_SKEW_S`` after ``now`` (default: the clock) is
    clamped to ``now``, the crawler's value kept as ``claimed_fetched_at``."""
    if (
        raw.fetched_at is None
        and raw.crawl_id is None
        and raw.status is None
        and raw.truncated is None
    ):
        return None
    fetched_at, claimed = raw.fetched_at, None
    if fetched_at is not None:
        now = time.time() if now is None else now
        if fetched_at > now + MAX_CLOCK_SKEW_S:
            fetched_at, claimed = now, raw.fetched_at
    return CrawlInfo(
        fetched_at=fetched_at,
        crawl_id=raw.crawl_id,
        status=raw.status,
        claimed_fetched_at=claimed,
        truncated=raw.truncated,
    )


def _record_fields(url: str, version: str, crawl: CrawlInfo | None) -> dict[str, object]:
    """The identity and crawl fields every record has."""
    crawl = crawl or CrawlInfo()
    return {
        "id": document_id(url),
        "version": version,
        "url": url,
        "fetched_at": crawl.fetched_at,
        "claimed_fetched_at": crawl.claimed_fetched_at,
        "crawl_id": crawl.crawl_id,
        "http_status": crawl.status,
        "truncated": crawl.truncated,
    }


def gone_record(raw: RawPage) -> PageRecord:
    """The record of a page the crawler found gone (HTTP 404/410): no content."""
    return PageRecord(
        **_record_fields(raw.url, page_id(raw.url, raw.html), crawl_info(raw)),  # type: ignore[arg-type]
        title="",
        markdown="",
        extractor="gone",
        gone=True,
    )


def simplify_page(
    raw: RawPage, settings: PipelineSettings, source: SourceRef | None = None
) -> SimplifiedPage | FallbackRequest | PageRecord:
    """Decode, check and simplify; pages over the token budget or without blocks go to
    fallback. Unusable input raises a PageError subclass (-> dead letter). ``source``
    says where the page lies on the pages topic, for a later fallback. A page the crawler
    found gone (HTTP 404/410) is its record at once (``gone``: sinks delete it)."""
    if raw.status in GONE_STATUSES:
        return gone_record(raw)
    if raw.status is not None and not 200 <= raw.status < 300:
        raise ErrorStatus(f"HTTP status {raw.status}: a redirect or error page, not content")
    started = time.perf_counter()
    crawl = crawl_info(raw)
    with decoding("the page"):
        text, utf8 = decoded_page_utf8(raw, settings.simplify.max_input_chars)
    document = simplify(text, settings.simplify, utf8)
    pid = page_id(raw.url, raw.html)
    tokens = settings.token_counter.count(document.simplified_html)
    timings = {"simplify": _ms_since(started)}
    reason = (
        settings.budget.refusal(tokens, document.block_count)
        if document.block_count
        else "no_blocks"
    )
    if reason:
        return FallbackRequest(
            page_id=pid,
            url=raw.url,
            title=document.title,
            reason=reason,
            stage="simplify",
            source=source,
            token_count=tokens,
            timings_ms=timings,
            crawl=crawl,
        )
    return SimplifiedPage(
        page_id=pid,
        url=raw.url,
        title=document.title,
        simplified_html=document.simplified_html,
        mapping_blocks=document.mapping_blocks,
        token_count=tokens,
        tokenizer=settings.token_counter.name,
        source=source,
        timings_ms=timings,
        crawl=crawl,
        hints=list(document.hints),
    )


def to_fallback(page: SimplifiedPage | LabelledPage, reason: str, stage: str) -> FallbackRequest:
    return FallbackRequest(
        page_id=page.page_id,
        url=page.url,
        title=page.title,
        reason=reason,
        stage=stage,
        source=page.source,
        token_count=page.token_count,
        timings_ms=dict(page.timings_ms),
        crawl=page.crawl,
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
                labeller=outcome.labeller or labeller_name,
                token_count=page.token_count,
                confidence=outcome.confidence,
                second_opinion=outcome.second_opinion,
                source=page.source,
                timings_ms=timings,
                crawl=page.crawl,
            )
        )
    return results


def reconstruct_page(page: LabelledPage) -> PageRecord | FallbackRequest:
    """Markdown from the main blocks; nothing selected -> fallback; a page the labeller
    asked a second opinion on -> fallback with this record as the candidate."""
    started = time.perf_counter()
    try:
        result = reconstruct(page.mapping_blocks, page.labels, base_url=page.url)
    except PageError as error:
        return to_fallback(page, error.reason, "reconstruct")
    record = PageRecord(
        **_record_fields(page.url, page.page_id, page.crawl),  # type: ignore[arg-type]
        title=page.title,
        markdown=result.markdown,
        language=detect_language(f"{page.title}\n{result.markdown}"),
        extractor=f"{DRIPPER_EXTRACTOR}:{page.labeller}",
        block_count=len(page.mapping_blocks),
        main_block_count=result.main_blocks,
        token_count=page.token_count,
        timings_ms={**page.timings_ms, "reconstruct": _ms_since(started)},
    )
    if page.second_opinion is None:
        return record
    return msgspec.structs.replace(
        to_fallback(page, SECOND_OPINION, "reconstruct"),
        candidate=record,
        second_opinion=page.second_opinion,
    )


def fallback_page(request: FallbackRequest, raw: RawPage) -> PageRecord:
    """trafilatura on the page; raises NothingSelected when it finds nothing either. On a
    second opinion (trafilatura in its fast mode), the candidate stays unless trafilatura's
    Markdown has at least ``second_opinion`` times its words."""
    started = time.perf_counter()
    candidate = request.candidate
    try:
        markdown = fallback_markdown(decoded_page(raw), request.url, fast=candidate is not None)
    except NothingSelected:
        if candidate is None:
            raise
        markdown = ""
    if candidate is not None and (
        not markdown
        or len(markdown.split()) < (request.second_opinion or 0.0) * len(candidate.markdown.split())
    ):
        timings = {**candidate.timings_ms, "second_opinion": _ms_since(started)}
        return msgspec.structs.replace(candidate, timings_ms=timings)
    return PageRecord(
        **_record_fields(request.url, request.page_id, request.crawl),  # type: ignore[arg-type]
        title=request.title,
        markdown=markdown,
        language=detect_language(f"{request.title}\n{markdown}"),
        extractor=FALLBACK_EXTRACTOR,
        fallback_reason=request.reason,
        token_count=request.token_count,
        timings_ms={**request.timings_ms, "fallback": _ms_since(started)},
    )


@dataclass(frozen=True)
class Outcome:
    """Offline result of one page: ``ok``, ``fallback`` (record + reason), ``gone`` (the
    record of a page the crawler found gone: sinks delete it) or ``error``."""

    status: str
    record: PageRecord | None = None
    reason: str | None = None
    error_class: str | None = None
    message: str | None = None


def page_error(error: PageError, context: str = "") -> Outcome:
    """The outcome of a page that ``error`` stopped."""
    return Outcome(
        "error",
        reason=error.reason,
        error_class=type(error).__name__,
        message=f"{context}{error}",
    )


def warm_up_page_work() -> None:
    """Load what every page's work loads on first use (the language model, the URL
    canonicalizer): a sandbox's zygote runs it once, so every child it forks starts warm."""
    load_detector()
    load_canonicalizer()


def warm_up() -> None:
    """``warm_up_page_work`` and the fallback extractor (what a stream's children meet
    sooner or later)."""
    warm_up_page_work()
    load_extractor()


def simplify_step(
    settings: PipelineSettings, raw: RawPage
) -> SimplifiedPage | FallbackRequest | PageRecord:
    """``simplify_page`` as a runner step (context first)."""
    return simplify_page(raw, settings)


def finish_step(
    settings: PipelineSettings, item: tuple[LabelledPage | FallbackRequest, RawPage | None]
) -> Outcome | FallbackRequest:
    """Reconstruct a labelled page, or run the fallback, into an offline Outcome. Without
    the raw page (most pages never need it again), a page that needs the fallback comes
    back as its FallbackRequest, for the caller to send again with the page."""
    step, raw = item
    if isinstance(step, LabelledPage):
        step = reconstruct_page(step)
    if isinstance(step, PageRecord):
        return Outcome("ok", step)
    if raw is None:
        return step
    try:
        record = fallback_page(step, raw)
    except PageError as error:
        return page_error(error, f"{step.reason}; fallback: ")
    if record.fallback_reason is None:  # the second opinion kept our record
        return Outcome("ok", record)
    return Outcome("fallback", record, reason=step.reason)


def _raw_if(step: LabelledPage | FallbackRequest, raw: RawPage) -> RawPage | None:
    return raw if isinstance(step, FallbackRequest) else None


def extract_pages(
    raws: Sequence[RawPage],
    labeller: Labeller,
    settings: PipelineSettings,
    runner: PageRunner | None = None,
) -> list[Outcome]:
    """The whole pipeline for a batch of pages, without Kafka.

    The CPU steps run through ``runner``, whose context must be ``settings`` (a
    ``Sandbox`` bounds each page's time and memory; default: in this process); labelling
    runs here, in one batch.
    """
    runner = runner or InProcess(settings)
    outcomes: list[Outcome | None] = [None] * len(raws)
    finishing: list[tuple[int, LabelledPage | FallbackRequest]] = []
    to_label: list[tuple[int, SimplifiedPage]] = []
    for index, step in enumerate(runner.map(simplify_step, raws)):
        if isinstance(step, PageError):
            outcomes[index] = page_error(step)
        elif isinstance(step, PageRecord):
            outcomes[index] = Outcome("gone", step)
        elif isinstance(step, FallbackRequest):
            finishing.append((index, step))
        else:
            to_label.append((index, step))
    if to_label:
        labelled = label_pages([page for _, page in to_label], labeller)
        finishing.extend((index, item) for (index, _), item in zip(to_label, labelled, strict=True))
    # The raw page travels again only with a page known to need the fallback, or found to.
    finished = runner.map(
        finish_step,
        [(item, _raw_if(item, raws[index])) for index, item in finishing],
    )
    again = [(i, out) for i, out in enumerate(finished) if isinstance(out, FallbackRequest)]
    redone = runner.map(finish_step, [(out, raws[finishing[i][0]]) for i, out in again])
    for (i, _), outcome in zip(again, redone, strict=True):
        finished[i] = outcome
    for (index, _), outcome in zip(finishing, finished, strict=True):
        outcomes[index] = page_error(outcome) if isinstance(outcome, PageError) else outcome
    missing = [index for index, outcome in enumerate(outcomes) if outcome is None]
    if missing:
        raise RuntimeError(f"pages {missing} got no outcome")
    return outcomes  # type: ignore[return-value]
