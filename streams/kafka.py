"""Connections to the broker: security options, admin (topics), plain producer/consumer.

The stage agents run on faust; the tools (topics, produce, tail, dlq, demo ledger) use
aiokafka directly with the same settings.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from dripstream.streams.envelope import Inbound
from dripstream.streams.settings import StreamSettings
from dripstream.topics.catalog import DAY_MS, MAX_MESSAGE_BYTES, TopicSpec, topic_specs
from dripstream.topics.records import SourceRef

FETCH_BYTES = 2 * 1024 * 1024  # per partition; a larger single message still comes through
TOPIC_WAIT_S = 30.0  # how long a starting worker waits for the pipeline topics to appear


class MissingTopics(KafkaError):
    """Pipeline topics the broker does not have: ``dripstream topics create`` makes them."""


def ssl_context(settings: StreamSettings) -> ssl.SSLContext | None:
    if "SSL" not in settings.security_protocol:
        return None
    context = ssl.create_default_context(cafile=settings.ssl_cafile or None)
    if settings.ssl_certfile:
        context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile or None)
    return context


def client_options(settings: StreamSettings) -> dict[str, Any]:
    """Connection options shared by every aiokafka client."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.brokers.split(","),
        "security_protocol": settings.security_protocol,
    }
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if settings.security_protocol.startswith("SASL"):
        options.update(
            sasl_mechanism=settings.sasl_mechanism,
            sasl_plain_username=settings.sasl_username,
            sasl_plain_password=settings.sasl_password,
        )
    return options


def producer(settings: StreamSettings, **extra: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **client_options(settings),
        acks="all",
        enable_idempotence=True,
        compression_type="zstd",
        max_request_size=MAX_MESSAGE_BYTES,
        **extra,
    )


def consumer(
    settings: StreamSettings, *topics: str, group_id: str | None = None, **extra: Any
) -> AIOKafkaConsumer:
    options: dict[str, Any] = {
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "max_partition_fetch_bytes": FETCH_BYTES,
        **extra,
    }
    return AIOKafkaConsumer(*topics, **client_options(settings), group_id=group_id, **options)


async def next_offsets(
    settings: StreamSettings, group_id: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (the offset ``group_id`` reads next, the end offset): its
    committed offset, else the log start (the workers reset to the earliest)."""
    if not partitions:
        return {}
    tps = [TopicPartition(topic, partition) for topic, partition in partitions]
    client = consumer(settings, group_id=group_id)
    await client.start()
    try:
        starts = await client.beginning_offsets(tps)
        ends = await client.end_offsets(tps)
        positions = {}
        for tp in tps:
            committed = await client.committed(tp)
            offset = starts[tp] if committed is None else max(committed, starts[tp])
            positions[(tp.topic, tp.partition)] = (offset, ends[tp])
        return positions
    finally:
        await client.stop()


def specs(settings: StreamSettings) -> list[TopicSpec]:
    return topic_specs(
        settings.partitions, settings.replication, settings.retention_hours * DAY_MS // 24
    )


async def create_topics(settings: StreamSettings) -> dict[str, str]:
    """Create every pipeline topic that does not exist yet; returns name -> outcome."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    outcome = {}
    try:
        existing = set(await admin.list_topics())
        wanted = [
            spec for spec in specs(settings) if spec.name(settings.topic_prefix) not in existing
        ]
        for spec in specs(settings):
            outcome[spec.name(settings.topic_prefix)] = "exists"
        for spec in wanted:
            name = spec.name(settings.topic_prefix)
            response = await admin.create_topics(
                [NewTopic(name, spec.partitions, spec.replication, topic_configs=spec.config())]
            )
            # aiokafka reports per-topic failures in the response instead of raising.
            for topic_error in response.topic_errors:
                code = topic_error[1]
                if code == TopicAlreadyExistsError.errno:
                    outcome[name] = "exists"
                elif code:
                    raise for_code(code)(f"creating {name}: {topic_error[-1]}")
                else:
                    outcome[name] = "created"
    finally:
        await admin.close()
    return outcome


async def topic_partitions(settings: StreamSettings, names: list[str]) -> dict[str, list[int]]:
    """Partition numbers of each existing topic among ``names``."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        described = await admin.describe_topics([n for n in names if n in existing])
    finally:
        await admin.close()
    return {
        item["topic"]: sorted(part["partition"] for part in item["partitions"])
        for item in described
    }


async def ready_partitions(
    settings: StreamSettings, names: list[str], timeout_s: float = 5.0
) -> dict[str, list[int]]:
    """``topic_partitions``, waiting up to ``timeout_s`` for topics created a moment ago
    to list their partitions (a consumer that starts before that ignores them)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    found = await topic_partitions(settings, names)
    while not all(found.get(name) for name in names):
        if asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.5)
        found = await topic_partitions(settings, names)
    return found


async def wait_for_topics(settings: StreamSettings, timeout_s: float | None = None) -> None:
    """Return once every pipeline topic lists its partitions; raise MissingTopics after
    ``timeout_s`` (default TOPIC_WAIT_S). A consumer that joins before a new topic shows in
    the metadata gets no partition of it until its next metadata refresh (5 minutes): a
    worker checks first."""
    timeout_s = TOPIC_WAIT_S if timeout_s is None else timeout_s
    names = [spec.name(settings.topic_prefix) for spec in specs(settings)]
    found = await ready_partitions(settings, names, timeout_s)
    missing = [name for name in names if not found.get(name)]
    if missing:
        raise MissingTopics(
            f"{len(missing)} pipeline topics do not exist after {timeout_s:g} s: "
            f"{', '.join(missing)} (create them with: dripstream topics create)"
        )


async def describe_topics(settings: StreamSettings) -> list[dict[str, Any]]:
    names = [spec.name(settings.topic_prefix) for spec in specs(settings)]
    found = await topic_partitions(settings, names)
    return [
        {"topic": name, "exists": name in found, "partitions": len(found.get(name, []))}
        for name in names
    ]


class SourceReader:
    """Reads single messages back by (topic, partition, offset): how the fallback stage
    gets the original page, which later records no longer carry.

    A message the topic no longer holds (retention or a deletion moved the log start past
    it) is simply absent from the result; the caller dead-letters the request as
    ``SourceExpired``. A broker that does not answer raises, so the batch is retried.
    """

    def __init__(self, settings: StreamSettings, timeout_s: float = 30.0) -> None:
        self._settings = settings
        self._timeout_s = timeout_s
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def _client(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            self._consumer = consumer(self._settings, auto_offset_reset="none")
            await self._consumer.start()
        return self._consumer

    async def fetch(self, refs: list[SourceRef]) -> dict[SourceRef, Inbound]:
        found: dict[SourceRef, Inbound] = {}
        async with self._lock:
            client = await self._client()
            partitions = {TopicPartition(ref.topic, ref.partition) for ref in refs}
            client.assign(list(partitions))
            starts = await client.beginning_offsets(list(partitions))
            ends = await client.end_offsets(list(partitions))
            for ref in dict.fromkeys(refs):
                part = TopicPartition(ref.topic, ref.partition)
                if not starts[part] <= ref.offset < ends[part]:
                    continue
                client.seek(part, ref.offset)
                batch = await client.getmany(
                    part, timeout_ms=int(self._timeout_s * 1000), max_records=1
                )
                records = batch.get(part, [])
                if not records:
                    raise TimeoutError(
                        f"no answer fetching {ref.topic}/{ref.partition}@{ref.offset}"
                    )
                record = records[0]
                if record.offset == ref.offset:  # else the wanted one was deleted
                    found[ref] = Inbound(
                        record.topic,
                        record.partition,
                        record.offset,
                        record.key,
                        record.value,
                        {name: value for name, value in record.headers or () if value is not None},
                    )
        return found

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
