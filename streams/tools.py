"""Operator tools on a live pipeline: produce pages, read topics, dead letters, the ledger."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import NamedTuple

import msgspec
from aiokafka import TopicPartition

from dripstream.streams.envelope import ATTEMPTS_HEADER, ERROR_HEADER, SOURCE_HEADER
from dripstream.streams.kafka import consumer, producer, ready_partitions
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import STAGES
from dripstream.topics.catalog import DEAD_LETTERS, PAGES, RECORDS, REPLAYS
from dripstream.topics.codecs import from_msgpack, to_msgpack
from dripstream.topics.records import DeadLetter, RawPage

REPLAY_OF_HEADER = "dripstream-replay-of"  # on a replayed input: the dead letter it was
MAX_PENDING = 256  # produce: sends awaiting acknowledgement at once
MAX_PENDING_BYTES = 16 * 1024 * 1024  # ... and their bytes: memory stays flat for big pages


async def produce_pages(
    settings: StreamSettings, pages: Iterable[RawPage], progress: bool = True
) -> list[bytes]:
    """Send pages (key = URL), streaming, with at most ``MAX_PENDING`` unacknowledged
    messages of at most ``MAX_PENDING_BYTES`` together; returns each message's produce id
    (the ``dripstream-source`` header every output of it carries), so a URL sent twice is
    counted twice."""
    from tqdm import tqdm

    client = producer(settings)
    run = uuid.uuid4().hex[:12]
    ids: list[bytes] = []
    pending: dict[asyncio.Future, int] = {}
    try:
        await client.start()
        with tqdm(unit="page", disable=not progress) as bar:
            for number, page in enumerate(pages):
                produce_id = f"{run}-{number}".encode()
                ids.append(produce_id)
                value = to_msgpack(page)
                sent = await client.send(
                    settings.topic_prefix + PAGES,
                    value,
                    key=page.url.encode(),
                    headers=[(SOURCE_HEADER, produce_id)],
                )
                pending[sent] = len(value)
                del value, page
                while len(pending) >= MAX_PENDING or sum(pending.values()) > MAX_PENDING_BYTES:
                    done, _ = await asyncio.wait(pending, return_when="FIRST_COMPLETED")
                    for future in done:
                        future.result()
                        del pending[future]
                bar.update(1)
            for future in pending:
                await future
    finally:
        await client.stop()
    return ids


@dataclass(frozen=True)
class TopicMessage:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    timestamp_ms: int = 0


async def read_topics(
    settings: StreamSettings,
    shorts: list[str],
    idle_s: float | None = 3.0,
    deadline_s: float = 60.0,
    done: Callable[[list[TopicMessage]], bool] | None = None,
) -> list[TopicMessage]:
    """Every message of the topics from the beginning (no consumer group, no commit).

    Stops when ``done(messages)`` says so, after ``idle_s`` without a new message, or at
    the deadline, whichever comes first.
    """
    names = [settings.topic_prefix + short for short in shorts]
    found = await ready_partitions(settings, names)
    partitions = [
        TopicPartition(name, number) for name, numbers in found.items() for number in numbers
    ]
    messages: list[TopicMessage] = []
    if not partitions:
        return messages
    client = consumer(settings)
    await client.start()
    try:
        client.assign(partitions)
        await client.seek_to_beginning(*partitions)
        started = last = time.monotonic()
        while time.monotonic() - started < deadline_s:
            if idle_s is not None and time.monotonic() - last > idle_s:
                break
            batch = await client.getmany(timeout_ms=200, max_records=500)
            for records in batch.values():
                for record in records:
                    messages.append(
                        TopicMessage(
                            record.topic.removeprefix(settings.topic_prefix),
                            record.partition,
                            record.offset,
                            record.key,
                            record.value,
                            dict(record.headers or ()),
                            record.timestamp,
                        )
                    )
                    last = time.monotonic()
            if done is not None and done(messages):
                break
    finally:
        await client.stop()
    return messages


@dataclass
class Ledger:
    """Where every produced input ended: the pipeline's bookkeeping, computed, not assumed."""

    produced: int
    records: int
    fallback_records: int
    dead_letters: int
    duplicates: int
    lost: int
    seconds: float
    pages_per_s: float
    dead_letter_classes: dict[str, int]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def compute_ledger(produced: list[bytes], outputs: list[TopicMessage], seconds: float) -> Ledger:
    """Match outputs to inputs by the source header every stage carries along."""
    by_source: Counter[bytes] = Counter()
    fallback = dead = 0
    classes: Counter[str] = Counter()
    for message in outputs:
        by_source[message.headers.get(SOURCE_HEADER, b"")] += 1
        if message.topic == DEAD_LETTERS:
            dead += 1
            classes[message.headers.get(ERROR_HEADER, b"?").decode()] += 1
        elif b'"extractor":"fallback' in message.value:
            fallback += 1
    wanted = Counter(produced)
    lost = sum(1 for source in wanted if by_source[source] == 0)
    duplicates = sum(max(0, by_source[source] - count) for source, count in wanted.items())
    return Ledger(
        produced=len(produced),
        records=len(outputs) - dead - fallback,
        fallback_records=fallback,
        dead_letters=dead,
        duplicates=duplicates,
        lost=lost,
        seconds=round(seconds, 2),
        pages_per_s=round(len(produced) / seconds, 2) if seconds else 0.0,
        dead_letter_classes=dict(classes),
    )


async def wait_for_outputs(
    settings: StreamSettings,
    produced: list[bytes],
    deadline_s: float,
    alive: Callable[[], bool] = lambda: True,
) -> list[TopicMessage]:
    """Read records and dead letters until every produced input has an output (or the
    deadline passes, or ``alive`` says the workers are gone)."""
    missing = set(produced)
    counted = 0

    def done(messages: list[TopicMessage]) -> bool:
        nonlocal counted
        for message in messages[counted:]:
            missing.discard(message.headers.get(SOURCE_HEADER, b""))
        counted = len(messages)
        return not missing or not alive()

    return await read_topics(
        settings, [RECORDS, DEAD_LETTERS], idle_s=None, deadline_s=deadline_s, done=done
    )


def describe_dead_letter(message: TopicMessage) -> dict[str, object]:
    letter = from_msgpack(message.value, DeadLetter)
    data = msgspec.to_builtins(letter)
    data["payload"] = f"<{letter.payload_size} bytes>" if letter.payload is not None else None
    data["key"] = letter.key.decode("utf-8", "replace") if letter.key else None
    data["offset"] = message.offset
    data["partition"] = message.partition
    return data


class Replayed(NamedTuple):
    sent: int
    skipped: int
    refused: list[str]
    """One line per dead letter that is not replayed because it cannot be trusted."""


def replay_targets(settings: StreamSettings) -> frozenset[str]:
    """The topics a replay may write: the pipeline's stage input topics, and no other
    (not templates, dead letters or replays), whatever a dead letter names."""
    return frozenset(settings.topic_prefix + stage.input_topic for stage in STAGES.values())


async def replay_dead_letters(
    settings: StreamSettings, offsets: set[int] | None = None, include_replays: bool = False
) -> Replayed:
    """Send dead letters' inputs back to the topic they came from, with their original
    key and headers (attempts + 1). Each dead letter is replayed at most once (the
    replays topic remembers it), and a dead letter that itself came from a replay only
    with ``include_replays``. A dead letter that does not decode, or names a topic that
    is not a stage's input (``replay_targets``), is refused."""
    targets = replay_targets(settings)
    refused: list[str] = []
    letters = await read_topics(settings, [DEAD_LETTERS])
    done = {message.key for message in await read_topics(settings, [REPLAYS])}
    client = producer(settings)
    await client.start()
    sent = skipped = 0
    try:
        for message in letters:
            if offsets is not None and message.offset not in offsets:
                continue
            marker = f"{message.partition}:{message.offset}".encode()
            where = f"dead letter {marker.decode()}"
            try:
                letter = from_msgpack(message.value or b"", DeadLetter)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as error:
                refused.append(f"{where}: not a dead letter ({error}); not replayed")
                continue
            if letter.source_topic and letter.source_topic not in targets:
                refused.append(
                    f"{where} names topic {letter.source_topic!r}, not a stage's input topic"
                    f" ({', '.join(sorted(targets))}); not replayed"
                )
                continue
            if (
                marker in done
                or letter.payload is None  # only a digest was kept: nothing to replay
                or not letter.source_topic
                or (REPLAY_OF_HEADER in letter.headers and not include_replays)
            ):
                skipped += 1
                continue
            headers = {
                **letter.headers,
                SOURCE_HEADER: message.headers.get(SOURCE_HEADER, b""),
                ATTEMPTS_HEADER: str(letter.attempts).encode(),
                REPLAY_OF_HEADER: marker,
            }
            await client.send_and_wait(
                letter.source_topic, letter.payload, key=letter.key, headers=list(headers.items())
            )
            await client.send_and_wait(
                settings.topic_prefix + REPLAYS, str(time.time()).encode(), key=marker
            )
            sent += 1
    finally:
        await client.stop()
    return Replayed(sent, skipped, refused)
