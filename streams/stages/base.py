"""What every stage is made of: the ``Stage`` declaration, what the worker provides its
builder (``Provisions``), and the shared CPU helpers (``guarded``, ``CpuHandler``).

A stage is one object: its name, input topic, the ``Route`` of every record type it
emits, and a builder. The builder takes the settings and the worker's provisions and
returns a handler that holds only that stage's own dependencies; a dependency that is
missing or unusable raises ``StageSetupError`` while the worker is built, never while it
handles a message.

A handler turns a micro-batch of input messages into exactly one ``Outbound`` per
message (a record on a declared route, or a dead letter); a stage that writes outside
Kafka (the sink) may return only its dead letters. Nothing raises for bad input.

Per-page CPU work runs in the worker's page runner: one sandbox child process, shared by
the worker's CPU stages, that bounds each page's time and memory. The child receives
every bound stage's CPU context once, and the per-page function by reference: a
per-page function must be a module-level function importable by name.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from dripstream.processors.errors import PageError
from dripstream.processors.extract.budget import PipelineSettings
from dripstream.processors.extract.sandbox import InProcess, PageRunner, memory_error_for
from dripstream.processors.label.base import Labeller
from dripstream.streams.adapter import MalformedInput
from dripstream.streams.envelope import Inbound, Outbound, Route, dead_letter, forward
from dripstream.streams.settings import SettingsError
from dripstream.topics.codecs import SchemaVersionError
from dripstream.topics.records import SourceRef

if TYPE_CHECKING:
    from dripstream.processors.label.templates import TemplateCache
    from dripstream.streams.settings import StreamSettings

log = logging.getLogger("dripstream.stages")

# Errors that mean "this input is unusable" (dead letter), as opposed to bugs.
INPUT_ERRORS = (
    PageError,
    MalformedInput,
    msgspec.DecodeError,
    msgspec.ValidationError,
    SchemaVersionError,
)


class StageSetupError(SettingsError):
    """A stage cannot be built: a setting it needs is missing or unusable, or the worker
    does not provide a dependency it needs (the CLI reports it as a bad setting)."""


class Handler(Protocol):
    """A built stage: one micro-batch in, its outputs out."""

    async def __call__(self, messages: Sequence[Inbound]) -> list[Outbound]: ...


@dataclass(frozen=True)
class Stage:
    """One stage, declared once: ``build(settings, provisions)`` returns its handler."""

    name: str
    input_topic: str
    routes: tuple[Route, ...]
    """Every record type the stage emits and where it goes; dead letters go to the
    dead-letter topic without a declaration."""
    build: Callable[[StreamSettings, Provisions], Handler]
    description: str


@dataclass(frozen=True)
class CpuContext:
    """What one stage's per-page CPU work needs; sent once to the sandbox child."""

    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    payload_limit: int = 1024 * 1024


def apply(contexts: dict[str, Any], job: tuple[str, Callable[[Any, Any], Any], Any]) -> Any:
    """A bound stage's function on one item, with that stage's context (in the child)."""
    name, function, item = job
    return function(contexts[name], item)


class PageRunners:
    """The worker's page runner, shared by its CPU stages: each stage binds its CPU
    context (``bind``) while it is built; the runner itself (``make(contexts)``: a
    ``Sandbox``, or ``InProcess``) starts with every bound context on the first page, or
    ahead of it (``start``)."""

    def __init__(self, make: Callable[[dict[str, Any]], PageRunner] = InProcess) -> None:
        self._make = make
        self._contexts: dict[str, Any] = {}
        self._runner: PageRunner | None = None

    def bind(self, name: str, context: Any) -> PageRunner:
        if self._runner is not None:
            raise RuntimeError(f"stage {name} bound after the page runner started")
        self._contexts[name] = context
        return _Bound(self, name)

    def start(self) -> None:
        """Make the runner now, with the contexts bound so far (no stage may bind after
        this), and start it in a background thread, so the first page finds its sandbox
        warm. Nothing bound: nothing to start."""
        if not self._contexts or self._runner is not None:
            return
        self._runner = self._make(dict(self._contexts))
        threading.Thread(
            target=self._runner.start, args=(apply,), name="page-runner-start", daemon=True
        ).start()

    def map(self, name: str, function: Callable, items: Sequence) -> list:
        if self._runner is None:
            self._runner = self._make(dict(self._contexts))
        return self._runner.map(apply, [(name, function, item) for item in items])

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()


@dataclass(frozen=True)
class _Bound:
    """One stage's view of the shared runner: ``function(context, item)`` per item."""

    runners: PageRunners
    name: str

    def map(self, function: Callable, items: Sequence) -> list:
        return self.runners.map(self.name, function, items)

    def close(self) -> None:
        """The shared runner is the worker's to close."""


class SourceReading(Protocol):
    async def fetch(self, refs: list[SourceRef]) -> dict[SourceRef, Inbound]: ...


class TemplatePublishing(Protocol):
    async def ensure_started(self) -> None: ...

    async def publish(self) -> None: ...


@dataclass
class Provisions:
    """What the worker process provides the stage builders, each made on request:
    the shared page runner, the labeller, a reader of single messages by offset (the
    pages topic) and the Kafka-backed store of a template cache."""

    runners: PageRunners = field(default_factory=PageRunners)
    labeller: Callable[[], Labeller] | None = None
    source_reader: Callable[[], SourceReading] | None = None
    template_store: Callable[[TemplateCache], TemplatePublishing] | None = None

    def need(self, what: str, stage: str) -> Any:
        """The provision ``what`` made for ``stage``; StageSetupError when the worker has
        none."""
        make = getattr(self, what)
        if make is None:
            raise StageSetupError(
                f"the {stage} stage needs a {what.replace('_', ' ')}, which this worker"
                " does not provide"
            )
        return make


def guarded(
    stage: str,
    routes: Sequence[Route],
    message: Inbound,
    cpu: CpuContext,
    step: Callable[[], msgspec.Struct],
) -> Outbound:
    """``step``'s record forwarded by ``routes``; unusable input, and a bug, become a
    dead letter; running out of memory propagates (the sandbox reports it)."""
    try:
        return forward(message, step(), routes, cpu.payload_limit)
    except INPUT_ERRORS as error:
        return dead_letter(stage, message, error, cpu.payload_limit)
    except MemoryError:
        raise  # the sandbox reports it as PageMemoryExceeded
    except Exception as error:  # a bug must not stall the partition: park the input
        if memory := memory_error_for(error):
            raise memory from error  # a failed allocation, not a bug
        log.exception("unexpected error in stage %s", stage)
        return dead_letter(stage, message, error, cpu.payload_limit)


@dataclass
class CpuHandler:
    """A stage handler whose per-page work runs in a page runner (in this process when
    none is given)."""

    cpu: CpuContext
    runner: PageRunner | None = None

    def __post_init__(self) -> None:
        if self.runner is None:
            self.runner = InProcess(self.cpu)

    async def run_pages(
        self, stage: str, function: Callable, items: Sequence, messages: Sequence[Inbound]
    ) -> list[Outbound]:
        """``function`` over ``items`` in the page runner, off the event loop; a page the
        runner stopped (time, memory, crash) becomes a dead letter of that class."""
        assert self.runner is not None
        results = await asyncio.to_thread(self.runner.map, function, list(items))
        return [
            dead_letter(stage, message, result, self.cpu.payload_limit)
            if isinstance(result, PageError)
            else result
            for message, result in zip(messages, results, strict=True)
        ]
