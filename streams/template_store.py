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

**Authenticated states.** Every record carries ``SIGNATURE_HEADER``: HMAC-SHA256, under the
key of ``DRIPSTREAM_TEMPLATE_KEY_FILE``, of the site and the value (``sign``). A worker
loads a record only when its signature checks; a record without one or with a wrong one
is ignored and counted (``unauthenticated_state``), as is one over ``max_site_bytes``,
unreadable, or over the cache's bounds (``rejected_state``). Without a key nothing is
shared: the worker neither reads nor writes the topic, keeps its own templates and says
so in its log. A loaded state is on probation (``TemplateCache.load``). A site's state that
cannot be sent (over ``max_site_bytes`` or the broker's message size) is dropped from
that publish and counted (``unpublishable_state``); the other sites go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import uuid

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from dripstream.processors.label.templates import TemplateCache
from dripstream.streams import metrics
from dripstream.streams.kafka import consumer, producer, topic_partitions
from dripstream.streams.settings import StreamSettings
from dripstream.topics.catalog import TEMPLATES
from dripstream.topics.codecs import from_msgpack, to_msgpack
from dripstream.topics.records import SiteState

log = logging.getLogger("dripstream.templates")
WRITER_HEADER = "dripstream-writer"
SIGNATURE_HEADER = "dripstream-signature"


def sign(key: bytes, site: str, value: bytes | None) -> bytes:
    """The HMAC-SHA256 (hex) of a templates record: its site, a zero byte, its value (a
    tombstone: none), under ``key``."""
    digest = hmac.new(key, site.encode() + b"\0", hashlib.sha256)
    digest.update(value or b"")  # no copy of a large value
    return digest.hexdigest().encode()


def authentic(key: bytes, site: str, value: bytes | None, headers: dict[str, bytes]) -> bool:
    """The record's ``SIGNATURE_HEADER`` is the signature of its site and value."""
    signature = headers.get(SIGNATURE_HEADER)
    return signature is not None and hmac.compare_digest(signature, sign(key, site, value))


class TemplateStore:
    """Keeps a ``TemplateCache`` in step with the templates topic (see the module
    docstring)."""

    def __init__(self, settings: StreamSettings, cache: TemplateCache) -> None:
        self.settings = settings
        self.cache = cache
        self.topic = settings.topic_prefix + TEMPLATES
        self.writer = uuid.uuid4().hex.encode()
        self.key = settings.template_key
        self.loaded = 0
        self._begun = False
        self._producer = None
        self._consumer = None
        self._tail: asyncio.Task | None = None
        self._started = asyncio.Lock()
        self._counted = dict(cache.counts)

    async def ensure_started(self) -> None:
        """Start once (the label stage calls this before its first batch)."""
        async with self._started:
            if not self._begun:
                await self.start()
                self._begun = True

    async def start(self) -> None:
        """Load every site from the topic, then follow it in the background (without a
        key: nothing, the templates stay this worker's)."""
        if not self.key:
            log.warning(
                "DRIPSTREAM_TEMPLATE_KEY_FILE is not set: site templates are not shared"
                " through %s (each worker learns its own)",
                self.topic,
            )
            return
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
                self._take(site, record.value, headers)

    def _take(self, site: str, value: bytes | None, headers: dict[str, bytes]) -> None:
        """Load one record into the cache when it is small enough, authentic and
        readable; otherwise count and log why not."""
        limit = self.cache.settings.max_site_bytes
        if value and len(value) > limit:
            self._refuse(site, f"{len(value)} bytes, over {limit}")
            return
        if not authentic(self.key, site, value, headers):
            self.cache.counts["unauthenticated_state"] += 1
            log.warning("template record for %r without a valid signature ignored", site[:200])
            return
        try:
            state = from_msgpack(value, SiteState) if value else None
        except Exception as error:  # a bad record must not stop the stage
            self._refuse(site, f"unreadable ({type(error).__name__})")
            return
        why = self.cache.load(state, site, remote=True)  # counts what it refuses
        if not why:
            self.loaded += 1
        elif why != "stale":
            log.warning("template record for %r refused: %s", site[:200], why)

    def _refuse(self, site: str, why: str) -> None:
        self.cache.counts["rejected_state"] += 1
        log.warning("template record for %r refused: %s", site[:200], why)

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
        sites = self.cache.drain_changed()
        if not sites or self._producer is None:
            self._count()
            return 0
        pending: list[tuple[str, asyncio.Future]] = []
        retry: list[str] = []
        failure: BaseException | None = None
        for index, site in enumerate(sites):
            state = self.cache.state(site)
            value = to_msgpack(state) if state is not None else None
            if value is not None and len(value) > self.cache.settings.max_site_bytes:
                self._unpublishable(site, f"{len(value)} bytes")
                continue
            signature = sign(self.key, site, value)
            headers = [(WRITER_HEADER, self.writer), (SIGNATURE_HEADER, signature)]
            try:
                future = await self._producer.send(
                    self.topic, value, key=site.encode(), headers=headers
                )
            except MessageSizeTooLargeError as error:
                self._unpublishable(site, str(error))
            except KafkaError as error:
                failure = error
                retry.extend(sites[index:])
                break
            else:
                pending.append((site, future))
        results = await asyncio.gather(*(future for _, future in pending), return_exceptions=True)
        published = 0
        for (site, _), result in zip(pending, results, strict=True):
            if isinstance(result, MessageSizeTooLargeError):
                self._unpublishable(site, str(result))
            elif isinstance(result, BaseException):
                failure = failure or result
                retry.append(site)
            else:
                published += 1
        self._count()
        if failure is not None:
            log.warning(
                "publishing %d site templates failed (%s); retrying later", len(retry), failure
            )
            self.cache.changed.update(retry)
            await self._replace_producer()
        return published

    def _unpublishable(self, site: str, why: str) -> None:
        """A site's state that can never be sent: dropped from the publish, never retried
        until it changes again, so it cannot hold back the sites after it."""
        self.cache.counts["unpublishable_state"] += 1
        log.warning("the templates of %r cannot be published (%s); not shared", site, why)

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
        headers = dict(message.headers or ())
        if settings.template_key and not authentic(
            settings.template_key, site, message.value, headers
        ):
            continue  # what the workers would not load
        if message.value:
            states[site] = from_msgpack(message.value, SiteState)
        else:
            states.pop(site, None)
    return states


async def drop_site(settings: StreamSettings, site: str) -> None:
    """A tombstone, signed with the workers' key: every worker forgets the site's
    templates and relearns them."""
    client = producer(settings)
    await client.start()
    try:
        await client.send_and_wait(
            settings.topic_prefix + TEMPLATES,
            None,
            key=site.encode(),
            headers=[(SIGNATURE_HEADER, sign(settings.template_key, site, None))],
        )
    finally:
        await client.stop()
