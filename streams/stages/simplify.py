"""The simplify stage: raw pages in; a simplified page, a fallback request (over the
labeller's budget), a gone record (HTTP 404/410) or a dead letter out.

The budget is the labeller's own (``budget_for``): a CPU labeller's block cap, or a
prompt labeller's context and tokenizer from its model profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from dripstream.processors.errors import TooLarge, decoding
from dripstream.processors.label.registry import budget_for
from dripstream.processors.pipeline import simplify_page
from dripstream.streams.adapter import MalformedInput, check_envelope, parse_raw_page
from dripstream.streams.envelope import Inbound, Outbound, Route, dead_letter
from dripstream.streams.stages.base import (
    CpuContext,
    CpuHandler,
    Provisions,
    Stage,
    StageSetupError,
    guarded,
)
from dripstream.topics.catalog import FALLBACK, PAGES, RECORDS, SIMPLIFIED
from dripstream.topics.codecs import to_json
from dripstream.topics.records import FallbackRequest, PageRecord, SimplifiedPage

if TYPE_CHECKING:
    from dripstream.streams.settings import StreamSettings

NAME = "simplify"
ROUTES = (
    Route(SimplifiedPage, SIMPLIFIED, "simplified"),
    Route(FallbackRequest, FALLBACK, "fallback"),
    Route(PageRecord, RECORDS, "record", to_json, chain=False),
)


def simplify_message(cpu: CpuContext, message: Inbound) -> Outbound:
    """One page, in the page runner."""

    def step() -> msgspec.Struct:
        with decoding("the message"):
            raw = parse_raw_page(message.key, message.value, message.headers)
        return simplify_page(raw, cpu.pipeline, message.ref())

    return guarded(NAME, ROUTES, message, cpu, step)


class SimplifyHandler(CpuHandler):
    """Simplify in the page runner; an empty value, an oversized key and a value too big
    to be a page even at 4 bytes a character are refused here, before the child sees
    them."""

    async def __call__(self, messages: Sequence[Inbound]) -> list[Outbound]:
        limit = 4 * self.cpu.pipeline.simplify.max_input_chars
        outputs: list[Outbound | None] = [None] * len(messages)
        fitting = []
        for index, message in enumerate(messages):
            size = len(message.value or b"")
            try:
                check_envelope(message.key, message.value)
                if size > limit:
                    raise TooLarge(f"{size} bytes, more than a {limit // 4}-character page can be")
            except (MalformedInput, TooLarge) as error:
                outputs[index] = dead_letter(NAME, message, error, self.cpu.payload_limit)
            else:
                fitting.append(index)
        chosen = [messages[i] for i in fitting]
        done = await self.run_pages(NAME, simplify_message, chosen, chosen)
        for index, output in zip(fitting, done, strict=True):
            outputs[index] = output
        return [output for output in outputs if output is not None]


def build(settings: StreamSettings, provisions: Provisions) -> SimplifyHandler:
    """The label stage's labeller sets the budget (``DRIPSTREAM_LABELLER``, and for a
    prompt labeller ``DRIPSTREAM_PROFILE``/``DRIPSTREAM_MODEL``)."""
    try:
        pipeline = budget_for(
            settings.labeller, settings.labeller_options(), cpu_max_blocks=settings.cpu_max_blocks
        )
    except (FileNotFoundError, ValueError) as error:
        raise StageSetupError(
            f"the simplify stage's budget ({settings.labeller}): {error}"
        ) from None
    cpu = CpuContext(pipeline, payload_limit=settings.dlq_payload_limit)
    return SimplifyHandler(cpu, provisions.runners.bind(NAME, cpu))


STAGE = Stage(NAME, PAGES, ROUTES, build, "decode, check, simplify; route by budget")
