"""The search-index sink on the real broker and a real OpenSearch server (scripts/search.sh,
a private instance per module: its own state folder and ports, so stopping it disturbs
nobody): pages in, a phrase found, re-deliveries and re-crawls give one document, pages
gone are deleted, a refused document is a dead letter, and an engine stopped mid-run
loses nothing and drops nothing once it is back."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest
from search_helpers import (
    Engine,
    engine_fixture,  # noqa: F401 (the `engine` fixture)
    wait_until,
)

from dripstream.processors.sinks.search import SearchIndex
from dripstream.streams.kafka import producer
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import produce_pages, read_topics
from dripstream.topics.catalog import DEAD_LETTERS, RECORDS
from dripstream.topics.codecs import from_msgpack, to_json
from dripstream.topics.records import DeadLetter, PageRecord, RawPage, document_id

pytestmark = pytest.mark.kafka

STAGES = "simplify,label,reconstruct,fallback,sink"


def article(tag: str, fetched_at: float, status: int = 200, text: str = "") -> RawPage:
    url = f"https://harbour.example/log/{tag}"
    body = text or f"The harbour log records vessel {tag} arriving at dawn with a full hold."
    html = (
        f"<html><head><title>Harbour log {tag}</title></head><body>"
        "<nav><a href='/'>Home</a> <a href='/log'>Log</a></nav><article>"
        f"<h1>Harbour log {tag}</h1><p>{body}</p>"
        "<p>The tide was high, the wind came from the west and the pilot boat went out twice "
        "before noon, as it does on most days when the weather allows it.</p>"
        "<p>Cargo was unloaded on the north quay and the crew went ashore in the evening.</p>"
        "</article><footer>Harbour office</footer></body></html>"
    )
    return RawPage(url=url, html=html.encode(), status=status, fetched_at=fetched_at)


def searcher(index: SearchIndex) -> Callable[[str], list[str]]:
    def ids(phrase: str) -> list[str]:
        index.refresh()
        return [hit.id for hit in index.search(phrase)]

    return ids


def dead_letters(settings: StreamSettings) -> list[DeadLetter]:
    messages = asyncio.run(read_topics(settings, [DEAD_LETTERS], idle_s=2.0))
    return [from_msgpack(message.value, DeadLetter) for message in messages]


async def put_record(settings: StreamSettings, record: PageRecord) -> None:
    client = producer(settings)
    await client.start()
    try:
        await client.send_and_wait(
            settings.topic_prefix + RECORDS, to_json(record), key=record.id.encode()
        )
    finally:
        await client.stop()


def test_pages_are_found_by_a_phrase_once_each_and_pages_gone_are_deleted(
    stream_settings: StreamSettings, workers, engine: Engine
) -> None:
    target = f"{engine.url}/t-{uuid.uuid4().hex[:10]}"
    workers.start(
        STAGES,
        DRIPSTREAM_SINK=f"opensearch:{target}",
        DRIPSTREAM_LABELLER="heuristic",
        DRIPSTREAM_SEARCH_RETRIES="2",
        DRIPSTREAM_SEARCH_BACKOFF_MS="50",
    )
    index = SearchIndex(target)
    find = searcher(index)
    first = [article(tag, 1000.0) for tag in ("alpha", "bravo", "charlie")]
    asyncio.run(produce_pages(stream_settings, first, progress=False))
    wait_until(lambda: index.refresh() or index.count() == 3, 180, "3 documents", workers.logs)
    assert find("records vessel alpha arriving") == [document_id(first[0].url)]

    later = [
        first[0],  # re-delivered: the same document
        article("bravo", 2000.0, text="Re-crawled: vessel bravo left for the northern isles."),
        article("charlie", 2000.0, status=410),  # gone
    ]
    asyncio.run(produce_pages(stream_settings, later, progress=False))
    refused = PageRecord(
        id=document_id("https://harbour.example/log/refused"),
        url="https://harbour.example/log/refused",
        title="t",
        markdown="m",
        extractor="dripper:heuristic",
        http_status=99999,  # no short: the engine refuses the document
    )
    asyncio.run(put_record(stream_settings, refused))

    def settled() -> bool:
        return (
            find("left for the northern isles") == [document_id(later[1].url)]
            and index.get(document_id(later[2].url)) is None
        )

    wait_until(settled, 180, "the re-crawl and the deletion", workers.logs)
    assert index.count() == 2
    assert find("records vessel alpha arriving") == [document_id(first[0].url)]
    assert find("records vessel bravo arriving") == []  # the old crawl was replaced
    assert index.get(document_id(first[1].url))["fetched_at"] == 2_000_000
    wait_until(
        lambda: any(
            letter.error_class == "DocumentRefused" for letter in dead_letters(stream_settings)
        ),
        60,
        "the refused document's dead letter",
        workers.logs,
    )
    [letter] = dead_letters(stream_settings)
    assert letter.stage == "sink" and "mapper_parsing_exception" in letter.message
    index.close()


def test_a_far_future_crawl_time_is_clamped_and_later_crawls_still_replace_it(
    stream_settings: StreamSettings, workers, engine: Engine
) -> None:
    target = f"{engine.url}/t-{uuid.uuid4().hex[:10]}"
    workers.start(STAGES, DRIPSTREAM_SINK=f"opensearch:{target}", DRIPSTREAM_LABELLER="heuristic")
    index = SearchIndex(target)
    find = searcher(index)
    year_3000 = 32_503_680_000.0
    forged = article("delta", year_3000, text="Forged: vessel delta sank with all hands aboard.")
    asyncio.run(produce_pages(stream_settings, [forged], progress=False))
    wait_until(lambda: find("sank with all hands") != [], 180, "the forged crawl", workers.logs)
    document = index.get(document_id(forged.url))
    assert document["claimed_fetched_at"] == year_3000 * 1000
    assert document["fetched_at"] < (time.time() + 60) * 1000

    real = article("delta", time.time() + 5, text="Real: vessel delta moored at the east pier.")
    asyncio.run(produce_pages(stream_settings, [real], progress=False))
    wait_until(lambda: find("moored at the east pier") != [], 180, "the later crawl", workers.logs)
    assert find("sank with all hands") == []
    assert index.get(document_id(real.url))["claimed_fetched_at"] is None
    index.close()


def test_an_engine_stopped_mid_run_loses_nothing_and_drops_nothing_once_it_is_back(
    stream_settings: StreamSettings, workers, engine: Engine
) -> None:
    target = f"{engine.url}/t-{uuid.uuid4().hex[:10]}"
    workers.start(
        STAGES,
        DRIPSTREAM_SINK=f"opensearch:{target}",
        DRIPSTREAM_LABELLER="heuristic",
        DRIPSTREAM_SEARCH_BACKOFF_MS="100",
        DRIPSTREAM_SEARCH_TIMEOUT_S="5",
    )
    index = SearchIndex(target)
    before = [article(f"early{number}", 1000.0) for number in range(8)]
    asyncio.run(produce_pages(stream_settings, before, progress=False))
    wait_until(lambda: index.refresh() or index.count() == 8, 180, "8 documents", workers.logs)

    engine.down()
    try:
        during = [article(f"late{number}", 1000.0) for number in range(8)]
        asyncio.run(produce_pages(stream_settings, during, progress=False))
        # The pipeline goes on: every page becomes a record on the records topic, while
        # the sink waits for the engine and acknowledges nothing.
        wait_until(
            lambda: len(asyncio.run(read_topics(stream_settings, [RECORDS], idle_s=1.0))) >= 16,
            180,
            "16 records on the records topic",
            workers.logs,
        )
        time.sleep(3)
        assert dead_letters(stream_settings) == []
    finally:
        engine.up()

    wait_until(lambda: index.refresh() or index.count() == 16, 240, "16 documents", workers.logs)
    for page in (*before, *during):
        assert index.get(document_id(page.url)) is not None, page.url
    tag = during[-1].url.rsplit("/", 1)[-1]
    assert searcher(index)(f"records vessel {tag} arriving") == [document_id(during[-1].url)]
    assert dead_letters(stream_settings) == []
    assert "unavailable" in workers.logs()
    index.close()
