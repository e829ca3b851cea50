"""The envelope every stage reads and writes: messages in and out, headers, routing.

``Inbound`` is a message as a stage receives it; ``Outbound`` is one it sends, named by
its short topic (the worker adds the prefix). Every output carries the identity of the
input it descends from (``SOURCE_HEADER``), so a ledger can match outputs to inputs
across stages. A record leaves by the ``Route`` its stage declares for its type;
unusable input leaves as a dead letter (``dead_letter``), always through Kafka.

This module depends on the topic catalog and records only, so anything (the stages,
the tools, the soak) can read the header names without importing a stage.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from dripstream.processors.errors import OutputTooLarge, PageError
from dripstream.topics.catalog import DEAD_LETTERS, MAX_MESSAGE_BYTES
from dripstream.topics.codecs import to_msgpack
from dripstream.topics.records import DeadLetter, PageRecord, SourceRef

SOURCE_HEADER = "dripstream-source"  # the identity of the input an output descends from
ATTEMPTS_HEADER = "dripstream-attempts"
ERROR_HEADER = "dripstream-error"  # on dead letters: the error class
MAX_SOURCE_BYTES = 512  # a longer input key is carried as its digest
OUTPUT_HEADROOM = 64 * 1024  # below the message limit: batch and header overhead
DEAD_LETTER_ROUTE = "deadletter"


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
    route: str  # a declared Route's name, or "deadletter"
    headers: dict[str, bytes] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return (
            len(self.key)
            + len(self.value)
            + sum(len(name) + len(value) for name, value in self.headers.items())
        )


@dataclass(frozen=True)
class Route:
    """Where a record type a stage emits goes: its topic and route name, how it is
    encoded, and whether a worker that also runs the topic's reader may hand it over in
    memory (``chain``). Records meant for the outside world declare ``chain=False``."""

    record: type[msgspec.Struct]
    topic: str
    route: str
    encode: Callable[[msgspec.Struct], bytes] = to_msgpack
    chain: bool = True


def dead_letter(stage: str, message: Inbound, error: BaseException, payload_limit: int) -> Outbound:
    """The input parked on the dead-letter topic with the error's class and message; the
    payload (and key) when at most ``payload_limit`` bytes, always its digest."""
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
    return Outbound(DEAD_LETTERS, source, to_msgpack(letter), DEAD_LETTER_ROUTE, headers)


def dead_letter_by_reference(
    stage: str, topic: str, partition: int, offset: int, error: PageError
) -> Outbound:
    """A dead letter for a message that was never read (its value killed the worker):
    where it lies instead of its payload, so it is not replayed blindly."""
    now = time.time()
    letter = DeadLetter(
        stage=stage,
        error_class=type(error).__name__,
        message=str(error)[:2000],
        attempts=1,
        first_failure_at=now,
        last_failure_at=now,
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
    )
    source = f"{topic}/{partition}/{offset}".encode()
    headers = {SOURCE_HEADER: source, ERROR_HEADER: letter.error_class.encode()}
    return Outbound(DEAD_LETTERS, source, to_msgpack(letter), DEAD_LETTER_ROUTE, headers)


def forward(
    message: Inbound, record: msgspec.Struct, routes: Sequence[Route], payload_limit: int
) -> Outbound:
    """The record on the topic its route names, keyed by page id (a ``PageRecord`` by its
    document id); a record no route declares raises TypeError (a bug). An output over the
    message limit becomes a dead letter (digest) instead of a send that can never
    succeed."""
    for route in routes:
        if type(record) is route.record:
            break
    else:
        raise TypeError(f"no topic routes a {type(record).__name__}")
    key = (record.id if isinstance(record, PageRecord) else record.page_id).encode()  # type: ignore[attr-defined]
    output = Outbound(
        route.topic, key, route.encode(record), route.route, {SOURCE_HEADER: message.source()}
    )
    if output.size > MAX_MESSAGE_BYTES - OUTPUT_HEADROOM:
        error = OutputTooLarge(
            f"the {route.route} output is {output.size} bytes; a message may hold "
            f"{MAX_MESSAGE_BYTES - OUTPUT_HEADROOM}"
        )
        return dead_letter(route.route, message, error, payload_limit)
    return output
