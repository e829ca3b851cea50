"""The fallback stage: fallback requests in; a record from the fallback extractor run on
the original page (read back from the pages topic by the request's pointer) or a dead
letter out (``SourceExpired`` when the topic no longer holds the page)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from dripstream.processors.errors import SourceExpired
from dripstream.processors.pipeline import fallback_page
from dripstream.streams.adapter import parse_raw_page
from dripstream.streams.envelope import Inbound, Outbound, Route
from dripstream.streams.stages.base import (
    INPUT_ERRORS,
    CpuContext,
    CpuHandler,
    Provisions,
    Stage,
    guarded,
)
from dripstream.topics.catalog import FALLBACK, RECORDS
from dripstream.topics.codecs import from_msgpack, to_json
from dripstream.topics.records import FallbackRequest, PageRecord, SourceRef

if TYPE_CHECKING:
    from dripstream.streams.settings import StreamSettings

NAME = "fallback"
ROUTES = (Route(PageRecord, RECORDS, "record", to_json, chain=False),)

SourceFetcher = Callable[[list[SourceRef]], Awaitable[dict[SourceRef, Inbound]]]


def fallback_message(cpu: CpuContext, item: tuple[Inbound, Inbound | None]) -> Outbound:
    """A fallback request with its source page (None: the page is gone from the topic),
    in the page runner."""
    message, source = item

    def step() -> msgspec.Struct:
        request = from_msgpack(message.value or b"", FallbackRequest)
        if source is None:
            where = request.source
            raise SourceExpired(
                f"page {request.page_id} is no longer on "
                f"{where.topic}/{where.partition} at offset {where.offset}"
                if where
                else f"page {request.page_id} has no source pointer"
            )
        raw = parse_raw_page(source.key, source.value, source.headers)
        return fallback_page(request, raw)

    return guarded(NAME, ROUTES, message, cpu, step)


@dataclass
class FallbackHandler(CpuHandler):
    """Fetch each request's page from the pages topic, then run the fallback on it."""

    fetch_sources: SourceFetcher = field(kw_only=True)

    async def __call__(self, messages: Sequence[Inbound]) -> list[Outbound]:
        refs: list[SourceRef | None] = []
        for message in messages:
            try:
                refs.append(from_msgpack(message.value or b"", FallbackRequest).source)
            except INPUT_ERRORS:
                refs.append(None)  # fallback_message dead-letters it with the decode error
        wanted = [ref for ref in refs if ref is not None]
        found = await self.fetch_sources(wanted) if wanted else {}
        items = [
            (message, found.get(ref) if ref else None)
            for message, ref in zip(messages, refs, strict=True)
        ]
        return await self.run_pages(NAME, fallback_message, items, messages)


def build(settings: StreamSettings, provisions: Provisions) -> FallbackHandler:
    reader = provisions.need("source_reader", NAME)()
    cpu = CpuContext(payload_limit=settings.dlq_payload_limit)
    return FallbackHandler(cpu, provisions.runners.bind(NAME, cpu), fetch_sources=reader.fetch)


STAGE = Stage(NAME, FALLBACK, ROUTES, build, "trafilatura on the original page")
