"""Helpers shared by the stream tests (tests/ is on sys.path through its conftest)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import read_topics
from dripstream.topics.catalog import RECORDS
from dripstream.topics.records import RawPage


def dev_pages(data_dir: Path, copies: int, tag: str) -> list[RawPage]:
    """articles_dev pages repeated ``copies`` times, each copy with its own URL."""
    with (data_dir / "articles_dev.jsonl").open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    return [
        RawPage(url=f"{row['url']}#{tag}{copy}", html=row["html"].encode(), charset="utf-8")
        for copy in range(copies)
        for row in rows
    ]


def wait_for_records(settings: StreamSettings, count: int, deadline_s: float = 120) -> int:
    """Block until the records topic holds ``count`` messages (or the deadline); returns
    how many it holds."""
    messages = asyncio.run(
        read_topics(
            settings,
            [RECORDS],
            idle_s=None,
            deadline_s=deadline_s,
            done=lambda found: len(found) >= count,
        )
    )
    return len(messages)
