"""A GNU wget crawl end to end: wget crawls a loopback site (gzip, chunked) twice, the
second time deduplicated (revisit records); ``dripstream produce`` sends the WARCs to the
real broker, the worker's stages extract them and the sink writes them into a real
OpenSearch server. Every document must carry the crawled URL, its document id and only
absolute links."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from crawl_helpers import PAGES, site, site_urls, wget_crawl
from search_helpers import (
    Engine,
    engine_fixture,  # noqa: F401 (the `engine` fixture)
    wait_until,
)

from dripstream.processors.sinks.search import SearchIndex
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import read_topics
from dripstream.topics.catalog import RECORDS
from dripstream.topics.codecs import from_json
from dripstream.topics.records import PageRecord, document_id

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STAGES = "simplify,label,reconstruct,fallback,sink"
LINK = re.compile(r"\]\(\s*<?([^)\s>]*)")
ABSOLUTE = re.compile(r"^(?:https?|mailto|tel|ftp):", re.IGNORECASE)
HEADER_TEXT = re.compile(r"WARC/1\.|WARC-[A-Z]|HTTP/1\.[01]|Content-(?:Type|Length)\s*:")


def test_a_wget_crawl_through_produce_and_the_stream_lands_in_the_index_with_its_urls(
    stream_settings: StreamSettings, workers, engine: Engine, tmp_path: Path
) -> None:
    started = time.time() - 1
    with site() as base:
        first = wget_crawl(tmp_path, "crawl", site_urls(base), "--warc-cdx")
        second = wget_crawl(tmp_path, "again", site_urls(base), "--warc-dedup=crawl.cdx")
    ended = time.time() + 1
    both = tmp_path / "both.warc.gz"  # the revisits with the responses they refer to
    both.write_bytes(first.read_bytes() + second.read_bytes())

    target = f"{engine.url}/t-{uuid.uuid4().hex[:10]}"
    workers.start(STAGES, DRIPSTREAM_SINK=f"opensearch:{target}", DRIPSTREAM_LABELLER="heuristic")
    produced = subprocess.run(
        [sys.executable, "-m", "dripstream.streams.cli", "produce", str(both), str(second)],
        env={
            **os.environ,
            "DRIPSTREAM_BROKERS": stream_settings.brokers,
            "DRIPSTREAM_TOPIC_PREFIX": stream_settings.topic_prefix,
            "DRIPSTREAM_GROUP_PREFIX": stream_settings.group_prefix,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert produced.returncode == 0, produced.stderr
    lines = produced.stderr.splitlines()
    assert f"produced 10 pages to {stream_settings.topic_prefix}pages" in lines
    assert "skipped: 6 revisit, 2 not html" in lines  # the second WARC alone: no responses

    index = SearchIndex(target)
    urls = {base + path for path in PAGES}
    records: list[PageRecord] = []

    def all_records() -> bool:
        messages = asyncio.run(read_topics(stream_settings, [RECORDS], idle_s=1.0))
        records[:] = [from_json(message.value, PageRecord) for message in messages]
        return len(records) >= 10

    wait_until(all_records, 300, "10 records", workers.logs)
    wait_until(
        lambda: index.refresh() or index.count() == len(urls), 180, "4 documents", workers.logs
    )
    assert {record.url for record in records} == {*urls, base + "/old/notice.html"}
    assert sum(record.gone for record in records) == 2
    for url in urls:
        document = index.get(document_id(url))
        assert document is not None, url
        assert document["url"] == url and document["http_status"] == 200
        assert started * 1000 <= document["fetched_at"] <= ended * 1000
        assert document["crawl_id"] is None  # wget's warcinfo has no isPartOf
        markdown = document["markdown"]
        links = LINK.findall(markdown)
        assert links and all(ABSOLUTE.match(link) for link in links), (url, links)
        assert not HEADER_TEXT.search(markdown), markdown
    home = index.get(document_id(base + "/index.html"))["markdown"]
    assert f"({base}/contact.html)" in home  # a protocol-relative link, resolved
    index.close()
