"""`dripstream worker --stages label --labeller vllm` on the real broker, tiny model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dripstream.streams.kafka import producer
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import read_topics
from dripstream.topics.catalog import FALLBACK, LABELLED, SIMPLIFIED
from dripstream.topics.codecs import from_msgpack, to_msgpack
from dripstream.topics.records import FallbackRequest, LabelledPage, SimplifiedPage

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def _send(settings: StreamSettings, pages: list[SimplifiedPage]) -> None:
    client = producer(settings)
    await client.start()
    try:
        for page in pages:
            await client.send_and_wait(
                settings.topic_prefix + SIMPLIFIED, to_msgpack(page), key=page.page_id.encode()
            )
    finally:
        await client.stop()


def test_vllm_label_worker_labels_pages_from_the_simplified_topic(
    stream_settings: StreamSettings,
    workers,
    tiny_model_dir: Path,
    real_pages: list[SimplifiedPage],
) -> None:
    pages = real_pages[:4]
    workers.start(
        "label",
        DRIPSTREAM_LABELLER="vllm",
        DRIPSTREAM_PROFILE="test-qwen3-tiny-random",
        DRIPSTREAM_MODEL=str(tiny_model_dir),
        DRIPSTREAM_VLLM_ENFORCE_EAGER="1",
        DRIPSTREAM_VLLM_CPU_KVCACHE_GIB="2",
    )
    asyncio.run(_send(stream_settings, pages))
    outputs = asyncio.run(
        read_topics(
            stream_settings,
            [LABELLED, FALLBACK],
            idle_s=None,
            deadline_s=600,
            done=lambda messages: len(messages) >= len(pages),
        )
    )
    assert len(outputs) == len(pages), workers.logs()
    by_id = {page.page_id: page for page in pages}
    labelled = [from_msgpack(m.value, LabelledPage) for m in outputs if m.topic == LABELLED]
    assert labelled, workers.logs()
    for page in labelled:
        assert page.labeller == "vllm:test-qwen3-tiny-random"
        assert len(page.labels) == by_id[page.page_id].block_count
        assert set(page.labels) <= {"main", "other"}
    for message in outputs:
        if message.topic == FALLBACK:
            assert from_msgpack(message.value, FallbackRequest).stage == "label"
