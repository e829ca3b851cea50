"""The templates topic's store: publishing is best effort (a producer that fails, as an
idempotent producer does after some broker outages, is replaced and the sites retried,
never raised; a state that can never be sent does not hold back the others), states are
shared only under a key, and a worker loads only the states signed with it."""

from __future__ import annotations

import asyncio
import dataclasses

import msgspec
import pytest
from aiokafka.errors import MessageSizeTooLargeError, OutOfOrderSequenceNumber
from template_helpers import Teacher, article, crafted_state

from dripstream.processors.label.templates import (
    TemplateCache,
    TemplateCascade,
    TemplateSettings,
    registrable_domain,
)
from dripstream.streams.kafka import producer
from dripstream.streams.settings import SettingsError, StreamSettings
from dripstream.streams.template_store import SIGNATURE_HEADER, TemplateStore, sign
from dripstream.topics.catalog import TEMPLATES
from dripstream.topics.codecs import to_msgpack

KEY = b"k" * 32


class BrokenProducer:
    async def send(self, *args: object, **kwargs: object) -> None:
        raise OutOfOrderSequenceNumber()

    async def stop(self) -> None:
        """Nothing to stop."""


class SizeLimitedProducer:
    """Refuses a message over ``limit`` bytes (as the client does over its request size)
    and keeps the others."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sent: list[bytes] = []

    async def send(self, topic: str, value: bytes | None, key: bytes, headers: list) -> object:
        if value is not None and len(value) > self.limit:
            raise MessageSizeTooLargeError()
        self.sent.append(key)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def test_a_failed_publish_keeps_the_sites_for_the_next_batch_and_does_not_raise() -> None:
    settings = StreamSettings.from_env({"DRIPSTREAM_BROKERS": "127.0.0.1:1"}, template_key=KEY)
    cache = TemplateCache()
    cache.changed.update({"example.com", "example.org"})
    store = TemplateStore(settings, cache)
    store._producer = BrokenProducer()  # type: ignore[assignment]
    assert asyncio.run(store.publish()) == 0
    assert cache.changed == {"example.com", "example.org"}
    assert not isinstance(store._producer, BrokenProducer), "the producer was replaced"


def taught(sites: list[str], pages: int = 6) -> TemplateCache:
    cache = TemplateCache(TemplateSettings(shadow_rate=0), seed=0)
    cascade = TemplateCascade(Teacher(), cache)
    for site in sites:
        for number in range(pages):
            cascade.label([article(site, number)])
    return cache


def test_a_state_that_cannot_be_sent_does_not_hold_back_the_sites_after_it() -> None:
    cache = taught(["aaa.example", "big.example", "zzz.example"])
    big = cache.sites["big.example"][0]
    big.counts.update({f"div.k{i}>{'p' * 900}": [3, 0] for i in range(300)})
    settings = StreamSettings.from_env({"DRIPSTREAM_BROKERS": "127.0.0.1:1"}, template_key=KEY)
    store = TemplateStore(settings, cache)
    client = store._producer = SizeLimitedProducer(limit=100_000)  # type: ignore[assignment]
    assert asyncio.run(store.publish()) == 2
    assert client.sent == [b"aaa.example", b"zzz.example"]
    assert cache.counts["unpublishable_state"] == 1 and not cache.changed  # not retried
    assert store._producer is client, "no broker failure: the producer is kept"


def test_without_a_key_templates_are_not_shared(caplog) -> None:
    settings = StreamSettings.from_env({"DRIPSTREAM_BROKERS": "127.0.0.1:1"})
    cache = taught(["example.com"])
    store = TemplateStore(settings, cache)
    asyncio.run(store.ensure_started())  # no broker is reached: nothing is read
    assert asyncio.run(store.publish()) == 0 and not cache.changed
    assert "DRIPSTREAM_TEMPLATE_KEY_FILE is not set" in caplog.text


def test_a_key_shorter_than_16_bytes_is_refused(tmp_path) -> None:
    short = tmp_path / "key"
    short.write_bytes(b"short\n")
    with pytest.raises(SettingsError, match=r"DRIPSTREAM_TEMPLATE_KEY_FILE=.*at least 16 bytes"):
        StreamSettings.from_env({"DRIPSTREAM_TEMPLATE_KEY_FILE": str(short)})
    short.write_bytes(KEY + b"\n")
    assert StreamSettings.from_env({"DRIPSTREAM_TEMPLATE_KEY_FILE": str(short)}).template_key == KEY


def test_only_states_signed_with_the_key_are_loaded(stream_settings: StreamSettings) -> None:
    settings = dataclasses.replace(stream_settings, template_key=KEY)
    topic = settings.topic_prefix + TEMPLATES
    flipped = to_msgpack(crafted_state("crafted.example"))
    true = to_msgpack(crafted_state("good.example", flip=False))
    oversized = to_msgpack(
        msgspec.structs.replace(
            crafted_state("big.example", flip=False),
            clusters=[
                msgspec.structs.replace(
                    crafted_state("big.example", flip=False).clusters[0],
                    counts={f"div.k{i}>{'q' * 2_000}": (9, 0) for i in range(600)},
                )
            ],
        )
    )
    records = [
        ("crafted.example", flipped, []),  # unsigned
        ("crafted.example", flipped, [(SIGNATURE_HEADER, b"0" * 64)]),
        (
            "crafted.example",
            flipped,
            [(SIGNATURE_HEADER, sign(b"x" * 32, "crafted.example", flipped))],
        ),
        ("good.example", b"\xc1junk", [(SIGNATURE_HEADER, sign(KEY, "good.example", b"\xc1junk"))]),
        ("big.example", oversized, [(SIGNATURE_HEADER, sign(KEY, "big.example", oversized))]),
        ("other.example", true, [(SIGNATURE_HEADER, sign(KEY, "other.example", true))]),
        ("good.example", true, [(SIGNATURE_HEADER, sign(KEY, "good.example", true))]),
    ]

    async def send() -> None:
        client = producer(settings)
        await client.start()
        try:
            for site, value, headers in records:
                await client.send_and_wait(topic, value, key=site.encode(), headers=headers)
        finally:
            await client.stop()

    asyncio.run(send())
    cache = TemplateCache(TemplateSettings(shadow_rate=0), seed=0)
    store = TemplateStore(settings, cache)

    async def load() -> None:
        await store.ensure_started()
        await store.stop()

    asyncio.run(load())
    assert list(cache.sites) == ["good.example"] and store.loaded == 1
    assert cache.counts["unauthenticated_state"] == 3
    assert cache.counts["rejected_state"] == 3  # unreadable, oversized, another site's
    assert registrable_domain("https://www.good.example/") == "good.example"
