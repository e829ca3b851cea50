"""Publishing templates is best effort: a producer that fails (as an idempotent producer
does after some broker outages) is replaced and the sites retried, never raised."""

from __future__ import annotations

import asyncio

from aiokafka.errors import OutOfOrderSequenceNumber

from dripstream.processors.label.templates import TemplateCache
from dripstream.streams.settings import StreamSettings
from dripstream.streams.template_store import TemplateStore


class BrokenProducer:
    async def send(self, *args: object, **kwargs: object) -> None:
        raise OutOfOrderSequenceNumber()

    async def stop(self) -> None:
        """Nothing to stop."""


def test_a_failed_publish_keeps_the_sites_for_the_next_batch_and_does_not_raise() -> None:
    settings = StreamSettings.from_env({"DRIPSTREAM_BROKERS": "127.0.0.1:1"})
    cache = TemplateCache()
    cache.changed.update({"example.com", "example.org"})
    store = TemplateStore(settings, cache)
    store._producer = BrokenProducer()  # type: ignore[assignment]
    assert asyncio.run(store.publish()) == 0
    assert cache.changed == {"example.com", "example.org"}
    assert not isinstance(store._producer, BrokenProducer), "the producer was replaced"
