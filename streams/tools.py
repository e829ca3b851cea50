"""Operator tools on a live pipeline: produce pages, read topics, dead letters, the ledger."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import msgspec
from aiokafka import TopicPartition

from streams.kafka import consumer, producer, topic_partitions
from streams.settings import StreamSettings
from streams.stages import ATTEMPTS_HEADER, ERROR_HEADER, SOURCE_HEADER
from topics.codecs import from_msgpack, to_msgpack
from topics.records import DeadLetter, RawPage
from topics.topics import DEAD_LETTERS, PAGES, RECORDS

HTML_SUFFIXES = (".html", ".htm", ".xhtml")


def iter_pages(source: str) -> Iterator[RawPage]:
    """Pages from an HTML file, a folder of them, a JSONL of {url, html} or a WARC file."""
    path = Path(source)
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.suffix.lower() in HTML_SUFFIXES:
                yield RawPage(url=child.resolve().as_uri(), html=child.read_bytes())
    elif path.name.endswith((".warc", ".warc.gz")):
        yield from _warc_pages(path)
    elif path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    row = json.loads(line)
                    yield RawPage(
                        url=row.get("url") or str(row.get("id")),
                        html=str(row.get("html") or "").encode("utf-8"),
                        charset="utf-8",
                    )
    else:
        yield RawPage(url=path.resolve().as_uri(), html=path.read_bytes())


def _warc_pages(path: Path) -> Iterator[RawPage]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    with path.open("rb") as stream:
        for record in ArchiveIterator(
            stream, record_types=WarcRecordType.response, parse_http=True
        ):
            http = record.http_headers
            content_type = http.get("Content-Type", "") if http is not None else ""
            if "html" not in content_type.lower():
                continue
            yield RawPage(
                url=record.headers.get("WARC-Target-URI", ""),
                html=record.reader.read(),
                content_type=content_type,
                status=http.status_code if http is not None else None,
            )


async def produce_pages(
    settings: StreamSettings, pages: list[RawPage], progress: bool = True
) -> list[bytes]:
    """Send pages (key = URL) and wait for every acknowledgement; returns the keys."""
    from tqdm import tqdm

    client = producer(settings)
    await client.start()
    keys = []
    try:
        with tqdm(total=len(pages), unit="page", disable=not progress) as bar:
            pending = []
            for page in pages:
                key = page.url.encode()
                keys.append(key)
                pending.append(
                    await client.send(settings.topic_prefix + PAGES, to_msgpack(page), key=key)
                )
                bar.update(1)
            await asyncio.gather(*pending)
    finally:
        await client.stop()
    return keys


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
    partitions = [
        TopicPartition(name, number)
        for name, numbers in (await topic_partitions(settings, names)).items()
        for number in numbers
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


async def replay_dead_letters(settings: StreamSettings, offsets: set[int] | None = None) -> int:
    """Send dead letters' payloads back to the topic they came from (attempts + 1)."""
    letters = await read_topics(settings, [DEAD_LETTERS])
    client = producer(settings)
    await client.start()
    sent = 0
    try:
        for message in letters:
            if offsets is not None and message.offset not in offsets:
                continue
            letter = from_msgpack(message.value, DeadLetter)
            if letter.payload is None or not letter.source_topic:
                continue  # only a digest was kept: nothing to replay
            headers = [
                (SOURCE_HEADER, message.headers.get(SOURCE_HEADER, b"")),
                (ATTEMPTS_HEADER, str(letter.attempts).encode()),
            ]
            await client.send_and_wait(
                letter.source_topic, letter.payload, key=letter.key, headers=headers
            )
            sent += 1
    finally:
        await client.stop()
    return sent
