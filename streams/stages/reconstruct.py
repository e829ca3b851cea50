"""The reconstruct stage: labelled pages in; a record (Markdown from the main blocks), a
fallback request (nothing usable selected, or a second opinion wanted) or a dead letter
out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dripstream.processors.pipeline import reconstruct_page
from dripstream.streams.envelope import Inbound, Outbound, Route
from dripstream.streams.stages.base import CpuContext, CpuHandler, Provisions, Stage, guarded
from dripstream.topics.catalog import FALLBACK, LABELLED, RECORDS
from dripstream.topics.codecs import from_msgpack, to_json
from dripstream.topics.records import FallbackRequest, LabelledPage, PageRecord

if TYPE_CHECKING:
    from dripstream.streams.settings import StreamSettings

NAME = "reconstruct"
ROUTES = (
    Route(PageRecord, RECORDS, "record", to_json, chain=False),
    Route(FallbackRequest, FALLBACK, "fallback"),
)


def reconstruct_message(cpu: CpuContext, message: Inbound) -> Outbound:
    """One page, in the page runner."""
    return guarded(
        NAME,
        ROUTES,
        message,
        cpu,
        lambda: reconstruct_page(from_msgpack(message.value or b"", LabelledPage)),
    )


class ReconstructHandler(CpuHandler):
    async def __call__(self, messages: Sequence[Inbound]) -> list[Outbound]:
        return await self.run_pages(NAME, reconstruct_message, messages, messages)


def build(settings: StreamSettings, provisions: Provisions) -> ReconstructHandler:
    cpu = CpuContext(payload_limit=settings.dlq_payload_limit)
    return ReconstructHandler(cpu, provisions.runners.bind(NAME, cpu))


STAGE = Stage(NAME, LABELLED, ROUTES, build, "Markdown from the main blocks")
