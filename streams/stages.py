"""What each stage does with a message, without Kafka: one input -> exactly one output.

Every function here returns one ``Outbound`` per input message: the next stage's record,
a fallback request, an output record or a dead letter. Nothing raises for bad input;
the agents in ``streams.app`` only move these between topics.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from processors.errors import PageError
from processors.labellers.base import Labeller, LabelOutcome
from processors.pipeline import (
    PipelineSettings,
    apply_label_outcomes,
    fallback_page,
    reconstruct_page,
    simplify_page,
    to_fallback,
)
from streams import metrics
from streams.adapter import MalformedInput, parse_raw_page
from topics.codecs import SchemaVersionError, from_msgpack, to_json, to_msgpack
from topics.records import DeadLetter, FallbackRequest, LabelledPage, PageRecord, SimplifiedPage
from topics.topics import DEAD_LETTERS, FALLBACK, LABELLED, PAGES, RECORDS, SIMPLIFIED

STAGES = ("simplify", "label", "reconstruct", "fallback")
INPUT_TOPIC = {
    "simplify": PAGES,
    "label": SIMPLIFIED,
    "reconstruct": LABELLED,
    "fallback": FALLBACK,
}
SOURCE_HEADER = "dripstream-source"  # the pages-topic key an output descends from
ATTEMPTS_HEADER = "dripstream-attempts"
ERROR_HEADER = "dripstream-error"  # on dead letters: the error class

log = logging.getLogger("dripstream.stages")


@dataclass(frozen=True)
class Inbound:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)

    def source(self) -> bytes:
        """The original input's identity, carried through every stage in a header."""
        if SOURCE_HEADER in self.headers:
            return self.headers[SOURCE_HEADER]
        if self.key:
            return self.key
        return f"{self.topic}/{self.partition}/{self.offset}".encode()

    def attempts(self) -> int:
        try:
            return int(self.headers.get(ATTEMPTS_HEADER, b"0")) + 1
        except ValueError:
            return 1


@dataclass(frozen=True)
class Outbound:
    topic: str  # short name, without prefix
    key: bytes
    value: bytes
    route: str  # simplified | labelled | fallback | record | deadletter
    headers: dict[str, bytes] = field(default_factory=dict)


# Errors that mean "this input is unusable" (dead letter), as opposed to bugs.
INPUT_ERRORS = (
    PageError,
    MalformedInput,
    msgspec.DecodeError,
    msgspec.ValidationError,
    SchemaVersionError,
)


def dead_letter(
    stage: str,
    message: Inbound,
    error: BaseException,
    payload_limit: int,
    attempts: int | None = None,
) -> Outbound:
    value = message.value or b""
    now = time.time()
    letter = DeadLetter(
        stage=stage,
        error_class=type(error).__name__,
        message=str(error)[:2000],
        attempts=attempts or message.attempts(),
        first_failure_at=now,
        last_failure_at=now,
        source_topic=message.topic,
        key=message.key,
        payload=value if len(value) <= payload_limit else None,
        payload_size=len(value),
        payload_sha256=hashlib.sha256(value).hexdigest(),
    )
    headers = {SOURCE_HEADER: message.source(), ERROR_HEADER: letter.error_class.encode()}
    return Outbound(DEAD_LETTERS, message.source(), to_msgpack(letter), "deadletter", headers)


def _forward(message: Inbound, record: msgspec.Struct) -> Outbound:
    headers = {SOURCE_HEADER: message.source()}
    if isinstance(record, PageRecord):
        return Outbound(RECORDS, record.id.encode(), to_json(record), "record", headers)
    page_key = record.page_id.encode()  # type: ignore[attr-defined]
    if isinstance(record, FallbackRequest):
        return Outbound(FALLBACK, page_key, to_msgpack(record), "fallback", headers)
    if isinstance(record, SimplifiedPage):
        return Outbound(SIMPLIFIED, page_key, to_msgpack(record), "simplified", headers)
    return Outbound(LABELLED, page_key, to_msgpack(record), "labelled", headers)


@dataclass
class StageContext:
    """What the stages need besides the message: settings and the labeller."""

    pipeline: PipelineSettings
    labeller: Labeller | None = None
    payload_limit: int = 1024 * 1024
    label_retries: int = 3
    retry_backoff_s: float = 0.2
    label_timeout_s: float = 300.0


def _guarded(
    stage: str, message: Inbound, context: StageContext, step: Callable[[], msgspec.Struct]
) -> Outbound:
    try:
        return _forward(message, step())
    except INPUT_ERRORS as error:
        return dead_letter(stage, message, error, context.payload_limit)
    except Exception as error:  # a bug must not stall the partition: park the input
        log.exception("unexpected error in stage %s", stage)
        return dead_letter(stage, message, error, context.payload_limit)


def simplify_message(message: Inbound, context: StageContext) -> Outbound:
    def step() -> msgspec.Struct:
        raw = parse_raw_page(message.key, message.value, message.headers)
        return simplify_page(raw, context.pipeline)

    return _guarded("simplify", message, context, step)


def reconstruct_message(message: Inbound, context: StageContext) -> Outbound:
    return _guarded(
        "reconstruct",
        message,
        context,
        lambda: reconstruct_page(from_msgpack(message.value or b"", LabelledPage)),
    )


def fallback_message(message: Inbound, context: StageContext) -> Outbound:
    return _guarded(
        "fallback",
        message,
        context,
        lambda: fallback_page(from_msgpack(message.value or b"", FallbackRequest)),
    )


async def _label_with_retries(
    pages: list[SimplifiedPage], context: StageContext
) -> tuple[list[LabelOutcome] | None, str]:
    """Bounded retries with exponential backoff and a timeout per attempt."""
    labeller = context.labeller
    assert labeller is not None, "the label stage needs a labeller"
    last_error = ""
    for attempt in range(context.label_retries):
        try:
            if hasattr(labeller, "label_page"):
                call = asyncio.gather(*(labeller.label_page(page) for page in pages))
            else:
                call = asyncio.to_thread(labeller.label, pages)
            return list(await asyncio.wait_for(call, context.label_timeout_s)), ""
        except Exception as error:  # any labeller failure is retried
            last_error = f"{type(error).__name__}: {error}"
            log.warning(
                "labeller %s failed (attempt %d/%d): %s",
                labeller.name,
                attempt + 1,
                context.label_retries,
                last_error,
            )
            if attempt + 1 < context.label_retries:
                await asyncio.sleep(context.retry_backoff_s * 2**attempt)
    return None, last_error


async def label_messages(messages: Sequence[Inbound], context: StageContext) -> list[Outbound]:
    """Label a micro-batch; returns one output per message, in order."""
    outputs: list[Outbound | None] = [None] * len(messages)
    pages: list[SimplifiedPage] = []
    slots: list[int] = []
    for index, message in enumerate(messages):
        try:
            pages.append(from_msgpack(message.value or b"", SimplifiedPage))
            slots.append(index)
        except INPUT_ERRORS as error:
            outputs[index] = dead_letter("label", message, error, context.payload_limit)
    if pages:
        started = time.perf_counter()
        outcomes, error = await _label_with_retries(pages, context)
        labeller_name = context.labeller.name if context.labeller else "none"
        if outcomes is None:
            results: list[LabelledPage | FallbackRequest] = [
                to_fallback(page, "labeller_failed", "label") for page in pages
            ]
            log.error("labeller gave up on %d pages: %s", len(pages), error)
        else:
            batch_ms = (time.perf_counter() - started) * 1000
            results = apply_label_outcomes(pages, outcomes, labeller_name, batch_ms)
            metrics.LABEL_TOKENS.labels("in").inc(sum(o.tokens_in for o in outcomes))
            metrics.LABEL_TOKENS.labels("out").inc(sum(o.tokens_out for o in outcomes))
        for index, result in zip(slots, results, strict=True):
            outputs[index] = _forward(messages[index], result)
    return [output for output in outputs if output is not None]


SYNC_STAGES = {
    "simplify": simplify_message,
    "reconstruct": reconstruct_message,
    "fallback": fallback_message,
}
