"""The site-template cache's state in Kafka: a compacted ``templates`` topic keyed by site.

Why a compacted topic rather than a faust Table: a Table shards state by key and needs
the label stage's input co-partitioned by site, with a changelog replayed on every
rebalance. Templates are small, read far more than written, and safe to serve slightly
stale (a template only serves after verification, and shadow checks suspend a wrong
one). So every label worker holds the whole (capped) cache: at start it reads the topic
to its end, then tails it for other workers' updates, and after each labelled batch it
publishes the sites that batch changed, before the batch is acknowledged. Pages need no
re-keying, any worker can serve any site, a rebalance moves nothing, and a worker
killed with ``kill -9`` comes back with every template published before it died.
Compaction keeps one record per site; a tombstone (``templates drop``) removes one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from dripstream.processors.label.templates import TemplateCache
from dripstream.streams import metrics
from dripstream.streams.kafka import consumer, producer, topic_partitions
from dripstream.streams.settings import StreamSettings
from dripstream.topics.catalog import TEMPLATES
from dripstream.topics.codecs import from_msgpack, to_msgpack
from dripstream.topics.records import SiteState

log = logging.getLogger("dripstream.templates")
WRITER_HEADER = "dripstream-writer"


class TemplateStore:
    """Keeps a ``TemplateCache`` in step with the templates topic (see the module
    docstring)."""

    def __init__(self, settings: StreamSettings, cache: TemplateCache) -> None:
        self.settings = settings
        self.cache = cache
        self.topic = settings.topic_prefix + TEMPLATES
        self.writer = uuid.uuid4().hex.encode()
        self.loaded = 0
        self._producer = None
        self._consumer = None
        self._tail: asyncio.Task | None = None
        self._started = asyncio.Lock()
        self._counted = dict(cache.counts)

    async def ensure_started(self) -> None:
        """Start once (the label stage calls this before its first batch)."""
        async with self._started:
            if self._producer is None:
                await self.start()

    async def start(self) -> None:
        """Load every site from the topic, then follow it in the background."""
        found = await topic_partitions(self.settings, [self.topic])
        partitions = [TopicPartition(self.topic, p) for p in found.get(self.topic, [])]
        self._producer = producer(self.settings)
        await self._producer.start()
        self._consumer = consumer(self.settings)
        await self._consumer.start()
        if not partitions:
            log.warning(
                "no %s topic: templates are not shared (dripstream topics create)", self.topic
            )
            return
        self._consumer.assign(partitions)
        await self._consumer.seek_to_beginning(*partitions)
        ends = await self._consumer.end_offsets(partitions)
        while not await self._caught_up(ends):
            await self._read(timeout_ms=1000, own_too=True)
        log.info("loaded %d site templates from %s", self.loaded, self.topic)
        self._tail = asyncio.create_task(self._follow())

    async def _caught_up(self, ends: dict[TopicPartition, int]) -> bool:
        for part, end in ends.items():
            if await self._consumer.position(part) < end:  # type: ignore[union-attr]
                return False
        return True

    async def _read(self, timeout_ms: int, own_too: bool = False) -> None:
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=500)  # type: ignore[union-attr]
        for records in batches.values():
            for record in records:
                headers = dict(record.headers or ())
                if not own_too and headers.get(WRITER_HEADER) == self.writer:
                    continue  # our own update: the cache is already newer
                site = (record.key or b"").decode("utf-8", "replace")
                try:
                    state = from_msgpack(record.value, SiteState) if record.value else None
                except Exception:  # a bad record must not stop the stage
                    log.warning("unreadable template record for %s skipped", site)
                    continue
                self.cache.load(state, site)
                self.loaded += 1

    async def _follow(self) -> None:
        while True:
            try:
                await self._read(timeout_ms=1000)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep following after a broker hiccup
                log.exception("following %s failed; retrying", self.topic)
                await asyncio.sleep(1.0)

    async def publish(self) -> int:
        """Send the sites the cache changed since the last call (and count what the cache
        did in the metrics); returns how many sites were sent. Best effort: templates are
        a cache, so a failed send is logged and retried with the next batch, and never
        stops the label stage (an idempotent producer cannot resume after some broker
        outages: it is replaced)."""
        self._count()
        sites = self.cache.drain_changed()
        if not sites or self._producer is None:
            return 0
        try:
            pending = []
            for site in sites:
                state = self.cache.state(site)
                value = to_msgpack(state) if state is not None else None
                pending.append(
                    await self._producer.send(
                        self.topic, value, key=site.encode(), headers=[(WRITER_HEADER, self.writer)]
                    )
                )
            await asyncio.gather(*pending)
        except KafkaError as error:
            log.warning(
                "publishing %d site templates failed (%s); retrying later", len(sites), error
            )
            self.cache.changed.update(sites)
            await self._replace_producer()
            return 0
        return len(sites)

    async def _replace_producer(self) -> None:
        with contextlib.suppress(Exception):
            await self._producer.stop()  # type: ignore[union-attr]
        self._producer = producer(self.settings)
        try:
            await self._producer.start()
        except KafkaError as error:
            log.warning("template producer restart failed (%s); retrying later", error)

    def _count(self) -> None:
        for name, value in self.cache.counts.items():
            delta = value - self._counted.get(name, 0)
            if delta and name in ("template", "teacher", "shadow"):
                metrics.TEMPLATE_PAGES.labels(name).inc(delta)
            elif delta:
                metrics.TEMPLATE_EVENTS.labels(name).inc(delta)
        self._counted = dict(self.cache.counts)

    async def stop(self) -> None:
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()


async def read_site_states(settings: StreamSettings) -> dict[str, SiteState]:
    """The latest state of every site on the templates topic (operators' view)."""
    from dripstream.streams.tools import read_topics

    states: dict[str, SiteState] = {}
    for message in await read_topics(settings, [TEMPLATES], idle_s=1.0):
        site = (message.key or b"").decode("utf-8", "replace")
        if message.value:
            states[site] = from_msgpack(message.value, SiteState)
        else:
            states.pop(site, None)
    return states


async def drop_site(settings: StreamSettings, site: str) -> None:
    """A tombstone: every worker forgets the site's templates and relearns them."""
    client = producer(settings)
    await client.start()
    try:
        await client.send_and_wait(settings.topic_prefix + TEMPLATES, None, key=site.encode())
    finally:
        await client.stop()
