"""The stages, declared once: name, input topic and batch handler (``STAGES``).

A handler turns a micro-batch of input messages into exactly one ``Outbound`` per
message (the next stage's record, a fallback request, an output record or a dead
letter) - except the ``sink`` stage, whose output is the sink's write. Nothing raises for
bad input. The per-page CPU work (``*_message``) runs in the worker's page runner: a
sandbox child process that bounds each page's time and memory, called from a thread so
the event loop keeps heartbeats and health checks answering. The agents in
``dripstream.streams.app`` only move these between topics.

Adding a stage: its handler here and one ``Stage`` line in ``STAGES``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from dripstream.processors.errors import OutputTooLarge, PageError, SourceExpired, TooLarge
from dripstream.processors.extract.sandbox import InProcess, PageRunner, memory_error_for
from dripstream.processors.label.base import AsyncLabeller, Labeller, LabelOutcome
from dripstream.processors.pipeline import (
    Outcome,
    PipelineSettings,
    apply_label_outcomes,
    fallback_page,
    reconstruct_page,
    simplify_page,
    to_fallback,
)
from dripstream.processors.sinks import DocumentRefused, Refusal, Sink
from dripstream.streams import metrics
from dripstream.streams.adapter import MalformedInput, check_envelope, parse_raw_page
from dripstream.topics.catalog import (
    DEAD_LETTERS,
    FALLBACK,
    LABELLED,
    MAX_MESSAGE_BYTES,
    PAGES,
    RECORDS,
    SIMPLIFIED,
)
from dripstream.topics.codecs import (
    SchemaVersionError,
    from_json,
    from_msgpack,
    to_json,
    to_msgpack,
)
from dripstream.topics.records import (
    DeadLetter,
    FallbackRequest,
    LabelledPage,
    PageRecord,
    SimplifiedPage,
    SourceRef,
)

SOURCE_HEADER = "dripstream-source"  # the identity of the input an output descends from
ATTEMPTS_HEADER = "dripstream-attempts"
ERROR_HEADER = "dripstream-error"  # on dead letters: the error class
MAX_SOURCE_BYTES = 512  # a longer input key is carried as its digest
OUTPUT_HEADROOM = 64 * 1024  # below the message limit: batch and header overhead

if TYPE_CHECKING:
    from dripstream.streams.template_store import TemplateStore

log = logging.getLogger("dripstream.stages")


def source_identity(key: bytes) -> bytes:
    """An input key as the bounded identity outputs carry (long keys as a digest)."""
    if len(key) <= MAX_SOURCE_BYTES:
        return key
    return b"sha256:" + hashlib.sha256(key).hexdigest().encode()


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
            return source_identity(self.key)
        return f"{self.topic}/{self.partition}/{self.offset}".encode()

    def attempts(self) -> int:
        try:
            return int(self.headers.get(ATTEMPTS_HEADER, b"0")) + 1
        except ValueError:
            return 1

    def ref(self) -> SourceRef:
        return SourceRef(self.topic, self.partition, self.offset)


@dataclass(frozen=True)
class Outbound:
    topic: str  # short name, without prefix
    key: bytes
    value: bytes
    route: str  # simplified | labelled | fallback | record | deadletter
    headers: dict[str, bytes] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return (
            len(self.key)
            + len(self.value)
            + sum(len(name) + len(value) for name, value in self.headers.items())
        )


# Errors that mean "this input is unusable" (dead letter), as opposed to bugs.
INPUT_ERRORS = (
    PageError,
    MalformedInput,
    msgspec.DecodeError,
    msgspec.ValidationError,
    SchemaVersionError,
)


def dead_letter(stage: str, message: Inbound, error: BaseException, payload_limit: int) -> Outbound:
    value = message.value or b""
    now = time.time()
    letter = DeadLetter(
        stage=stage,
        error_class=type(error).__name__,
        message=str(error)[:2000],
        attempts=message.attempts(),
        first_failure_at=now,
        last_failure_at=now,
        source_topic=message.topic,
        key=message.key if message.key is None or len(message.key) <= payload_limit else None,
        headers={name: header for name, header in message.headers.items() if len(header) <= 4096},
        payload=value if len(value) <= payload_limit else None,
        payload_size=len(value),
        payload_sha256=hashlib.sha256(value).hexdigest(),
    )
    source = message.source()
    headers = {SOURCE_HEADER: source, ERROR_HEADER: letter.error_class.encode()}
    return Outbound(DEAD_LETTERS, source, to_msgpack(letter), "deadletter", headers)


# Record type -> (topic, route, encoder); a record of any other type is a bug.
ROUTES: dict[type, tuple[str, str, Callable[[msgspec.Struct], bytes]]] = {
    SimplifiedPage: (SIMPLIFIED, "simplified", to_msgpack),
    LabelledPage: (LABELLED, "labelled", to_msgpack),
    FallbackRequest: (FALLBACK, "fallback", to_msgpack),
    PageRecord: (RECORDS, "record", to_json),
}


def forward(message: Inbound, record: msgspec.Struct, payload_limit: int) -> Outbound:
    """The record on its topic, keyed by page id; an output over the message limit
    becomes a dead letter (digest) instead of a send that can never succeed."""
    try:
        topic, route, encode = ROUTES[type(record)]
    except KeyError:
        raise TypeError(f"no topic routes a {type(record).__name__}") from None
    key = (record.id if isinstance(record, PageRecord) else record.page_id).encode()  # type: ignore[attr-defined]
    output = Outbound(topic, key, encode(record), route, {SOURCE_HEADER: message.source()})
    if output.size > MAX_MESSAGE_BYTES - OUTPUT_HEADROOM:
        error = OutputTooLarge(
            f"the {route} output is {output.size} bytes; a message may hold "
            f"{MAX_MESSAGE_BYTES - OUTPUT_HEADROOM}"
        )
        return dead_letter(route, message, error, payload_limit)
    return output


@dataclass(frozen=True)
class CpuContext:
    """What the per-page CPU work needs; sent once to the sandbox child."""

    pipeline: PipelineSettings
    payload_limit: int = 1024 * 1024


def _guarded(
    stage: str, message: Inbound, cpu: CpuContext, step: Callable[[], msgspec.Struct]
) -> Outbound:
    try:
        return forward(message, step(), cpu.payload_limit)
    except INPUT_ERRORS as error:
        return dead_letter(stage, message, error, cpu.payload_limit)
    except MemoryError:
        raise  # the sandbox reports it as PageMemoryExceeded
    except Exception as error:  # a bug must not stall the partition: park the input
        if memory := memory_error_for(error):
            raise memory from error  # a failed allocation, not a bug
        log.exception("unexpected error in stage %s", stage)
        return dead_letter(stage, message, error, cpu.payload_limit)


def simplify_message(cpu: CpuContext, message: Inbound) -> Outbound:
    def step() -> msgspec.Struct:
        raw = parse_raw_page(message.key, message.value, message.headers)
        return simplify_page(raw, cpu.pipeline, message.ref())

    return _guarded("simplify", message, cpu, step)


def reconstruct_message(cpu: CpuContext, message: Inbound) -> Outbound:
    return _guarded(
        "reconstruct",
        message,
        cpu,
        lambda: reconstruct_page(from_msgpack(message.value or b"", LabelledPage)),
    )


def fallback_message(cpu: CpuContext, item: tuple[Inbound, Inbound | None]) -> Outbound:
    """A fallback request with its source page (None: the page is gone from the topic)."""
    message, source = item

    def step() -> msgspec.Struct:
        request = from_msgpack(message.value or b"", FallbackRequest)
        if source is None:
            where = request.source
            raise SourceExpired(
                f"page {request.page_id} is no longer on "
                f"{where.topic}/{where.partition} at offset {where.offset}"
                if where
                else f"page {request.page_id} has no source pointer"
            )
        raw = parse_raw_page(source.key, source.value, source.headers)
        return fallback_page(request, raw)

    return _guarded("fallback", message, cpu, step)


SourceFetcher = Callable[[list[SourceRef]], Awaitable[dict[SourceRef, Inbound]]]


@dataclass
class StageContext:
    """What the stages need besides the message: the CPU context and its runner, the
    labeller, the source fetcher (fallback) and the sink."""

    cpu: CpuContext
    runner: PageRunner | None = None
    labeller: Labeller | None = None
    fetch_sources: SourceFetcher | None = None
    sink: Sink | None = None
    templates: TemplateStore | None = None
    label_retries: int = 3
    retry_backoff_s: float = 0.2
    label_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.runner is None:
            self.runner = InProcess(self.cpu)


async def run_pages(
    stage: str,
    function: Callable,
    items: Sequence,
    messages: Sequence[Inbound],
    context: StageContext,
) -> list[Outbound]:
    """``function`` over ``items`` in the page runner, off the event loop; a page the
    runner stopped (time, memory, crash) becomes a dead letter of that class."""
    assert context.runner is not None
    results = await asyncio.to_thread(context.runner.map, function, list(items))
    return [
        dead_letter(stage, message, result, context.cpu.payload_limit)
        if isinstance(result, PageError)
        else result
        for message, result in zip(messages, results, strict=True)
    ]


async def simplify_batch(messages: Sequence[Inbound], context: StageContext) -> list[Outbound]:
    """Simplify in the sandbox; an empty value, an oversized key and a value too big to
    be a page even at 4 bytes a character are refused here, before the child sees them."""
    limit = 4 * context.cpu.pipeline.simplify.max_input_chars
    outputs: list[Outbound | None] = [None] * len(messages)
    fitting = []
    for index, message in enumerate(messages):
        size = len(message.value or b"")
        try:
            check_envelope(message.key, message.value)
            if size > limit:
                raise TooLarge(f"{size} bytes, more than a {limit // 4}-character page can be")
        except (MalformedInput, TooLarge) as error:
            outputs[index] = dead_letter("simplify", message, error, context.cpu.payload_limit)
        else:
            fitting.append(index)
    done = await run_pages(
        "simplify",
        simplify_message,
        [messages[i] for i in fitting],
        [messages[i] for i in fitting],
        context,
    )
    for index, output in zip(fitting, done, strict=True):
        outputs[index] = output
    return [output for output in outputs if output is not None]


async def reconstruct_batch(messages: Sequence[Inbound], context: StageContext) -> list[Outbound]:
    return await run_pages("reconstruct", reconstruct_message, messages, messages, context)


async def fallback_batch(messages: Sequence[Inbound], context: StageContext) -> list[Outbound]:
    """Fetch each request's page from the pages topic, then run the fallback on it."""
    refs: list[SourceRef | None] = []
    for message in messages:
        try:
            refs.append(from_msgpack(message.value or b"", FallbackRequest).source)
        except INPUT_ERRORS:
            refs.append(None)  # fallback_message dead-letters it with the decode error
    wanted = [ref for ref in refs if ref is not None]
    found: dict[SourceRef, Inbound] = {}
    if wanted:
        if context.fetch_sources is None:
            raise RuntimeError("the fallback stage needs a source fetcher")
        found = await context.fetch_sources(wanted)
    items = [
        (message, found.get(ref) if ref else None)
        for message, ref in zip(messages, refs, strict=True)
    ]
    return await run_pages("fallback", fallback_message, items, messages, context)


async def _label_with_retries(
    pages: list[SimplifiedPage], context: StageContext
) -> tuple[list[LabelOutcome] | None, str]:
    """Bounded retries with exponential backoff and a timeout per attempt."""
    labeller = context.labeller
    if labeller is None:
        raise RuntimeError("the label stage needs a labeller")
    last_error = ""
    for attempt in range(context.label_retries):
        try:
            if isinstance(labeller, AsyncLabeller):
                call = asyncio.gather(*(labeller.label_page(page) for page in pages))
            else:  # CPU work: off the event loop
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


async def label_batch(messages: Sequence[Inbound], context: StageContext) -> list[Outbound]:
    """Label a micro-batch; returns one output per message, in order."""
    limit = context.cpu.payload_limit
    outputs: list[Outbound | None] = [None] * len(messages)
    pages: list[SimplifiedPage] = []
    slots: list[int] = []
    for index, message in enumerate(messages):
        try:
            pages.append(from_msgpack(message.value or b"", SimplifiedPage))
            slots.append(index)
        except INPUT_ERRORS as error:
            outputs[index] = dead_letter("label", message, error, limit)
    if pages:
        if context.templates is not None:
            await context.templates.ensure_started()
        metrics.BATCH_SIZE.observe(len(pages))
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
        if context.templates is not None:
            await context.templates.publish()  # before the batch is acknowledged
        for index, result in zip(slots, results, strict=True):
            outputs[index] = forward(messages[index], result, limit)
    return [output for output in outputs if output is not None]


def _write_records(sink: Sink, records: list[tuple[int, PageRecord]]) -> list[Refusal]:
    for index, record in records:
        status = "gone" if record.gone else "fallback" if record.fallback_reason else "ok"
        sink.write(Outcome(status, record, reason=record.fallback_reason), str(index))
    return list(sink.flush() or ())


async def sink_batch(messages: Sequence[Inbound], context: StageContext) -> list[Outbound]:
    """Write each record through the configured sink (flushed before the batch is
    acknowledged); a value that is not a record, and a record the sink's target refused
    for good, become dead letters (``DocumentRefused``)."""
    if context.sink is None:
        raise RuntimeError("the sink stage needs a sink (DRIPSTREAM_SINK)")
    records: list[tuple[int, PageRecord]] = []
    outputs: list[Outbound] = []
    limit = context.cpu.payload_limit
    for index, message in enumerate(messages):
        try:
            records.append((index, from_json(message.value or b"", PageRecord)))
        except INPUT_ERRORS as error:
            outputs.append(dead_letter("sink", message, error, limit))
    started = time.perf_counter()
    refusals = await asyncio.to_thread(_write_records, context.sink, records)
    metrics.SINK_SECONDS.observe(time.perf_counter() - started)
    refused = {int(refusal.input_id or 0) for refusal in refusals}
    for index, record in records:
        outcome = "refused" if index in refused else "deleted" if record.gone else "written"
        metrics.SINK_DOCUMENTS.labels(outcome).inc()
    for refusal in refusals:
        message = messages[int(refusal.input_id or 0)]
        error = DocumentRefused(f"{refusal.error_class}: {refusal.message}")
        outputs.append(dead_letter("sink", message, error, limit))
    return outputs


Handler = Callable[[Sequence[Inbound], StageContext], Awaitable[list[Outbound]]]


@dataclass(frozen=True)
class Stage:
    name: str
    input_topic: str
    handle: Handler
    description: str


STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        Stage("simplify", PAGES, simplify_batch, "decode, check, simplify; route by budget"),
        Stage("label", SIMPLIFIED, label_batch, "label every block main or other"),
        Stage("reconstruct", LABELLED, reconstruct_batch, "Markdown from the main blocks"),
        Stage("fallback", FALLBACK, fallback_batch, "trafilatura on the original page"),
        Stage("sink", RECORDS, sink_batch, "write records through DRIPSTREAM_SINK"),
    )
}
DEFAULT_STAGES = ("simplify", "label", "reconstruct", "fallback")
