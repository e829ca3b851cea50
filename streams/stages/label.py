"""The label stage: simplified pages in; a labelled page (every block main or other), a
fallback request (the labeller gave up on the page, or on the batch after its retries)
or a dead letter out.

The handler holds the labeller (behind the site-template cache and its Kafka store when
``DRIPSTREAM_TEMPLATES`` is on), its retries, backoff and per-attempt timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dripstream.processors.label.base import AsyncLabeller, Labeller, LabelOutcome
from dripstream.processors.label.templates import (
    TemplateCache,
    TemplateCascade,
    load_public_suffixes,
)
from dripstream.processors.pipeline import apply_label_outcomes, to_fallback
from dripstream.streams import metrics
from dripstream.streams.envelope import Inbound, Outbound, Route, dead_letter, forward
from dripstream.streams.stages.base import INPUT_ERRORS, Provisions, Stage, TemplatePublishing
from dripstream.topics.catalog import FALLBACK, LABELLED, SIMPLIFIED
from dripstream.topics.codecs import from_msgpack
from dripstream.topics.records import FallbackRequest, LabelledPage, SimplifiedPage

if TYPE_CHECKING:
    from dripstream.streams.settings import StreamSettings

log = logging.getLogger("dripstream.stages")

NAME = "label"
ROUTES = (
    Route(LabelledPage, LABELLED, "labelled"),
    Route(FallbackRequest, FALLBACK, "fallback"),
)


@dataclass
class LabelHandler:
    """Label a micro-batch: one output per message, in order. A batch the labeller fails
    ``retries`` times (with exponential backoff and ``timeout_s`` per attempt) goes to
    the fallback as ``labeller_failed``."""

    labeller: Labeller
    payload_limit: int = 1024 * 1024
    templates: TemplatePublishing | None = None
    retries: int = 3
    backoff_s: float = 0.2
    timeout_s: float = 300.0

    async def _label(self, pages: list[SimplifiedPage]) -> tuple[list[LabelOutcome] | None, str]:
        labeller = self.labeller
        last_error = ""
        for attempt in range(self.retries):
            try:
                if isinstance(labeller, AsyncLabeller):
                    call = asyncio.gather(*(labeller.label_page(page) for page in pages))
                else:  # CPU work: off the event loop
                    call = asyncio.to_thread(labeller.label, pages)
                return list(await asyncio.wait_for(call, self.timeout_s)), ""
            except Exception as error:  # any labeller failure is retried
                last_error = f"{type(error).__name__}: {error}"
                log.warning(
                    "labeller %s failed (attempt %d/%d): %s",
                    labeller.name,
                    attempt + 1,
                    self.retries,
                    last_error,
                )
                if attempt + 1 < self.retries:
                    await asyncio.sleep(self.backoff_s * 2**attempt)
        return None, last_error

    async def __call__(self, messages: Sequence[Inbound]) -> list[Outbound]:
        limit = self.payload_limit
        outputs: list[Outbound | None] = [None] * len(messages)
        pages: list[SimplifiedPage] = []
        slots: list[int] = []
        for index, message in enumerate(messages):
            try:
                pages.append(from_msgpack(message.value or b"", SimplifiedPage))
                slots.append(index)
            except INPUT_ERRORS as error:
                outputs[index] = dead_letter(NAME, message, error, limit)
        if pages:
            if self.templates is not None:
                await self.templates.ensure_started()
            metrics.BATCH_SIZE.observe(len(pages))
            started = time.perf_counter()
            outcomes, error = await self._label(pages)
            if outcomes is None:
                results: list[LabelledPage | FallbackRequest] = [
                    to_fallback(page, "labeller_failed", NAME) for page in pages
                ]
                log.error("labeller gave up on %d pages: %s", len(pages), error)
            else:
                batch_ms = (time.perf_counter() - started) * 1000
                results = apply_label_outcomes(pages, outcomes, self.labeller.name, batch_ms)
                metrics.LABEL_TOKENS.labels("in").inc(sum(o.tokens_in for o in outcomes))
                metrics.LABEL_TOKENS.labels("out").inc(sum(o.tokens_out for o in outcomes))
            if self.templates is not None:
                await self.templates.publish()  # before the batch is acknowledged
            for index, result in zip(slots, results, strict=True):
                outputs[index] = forward(messages[index], result, ROUTES, limit)
        return [output for output in outputs if output is not None]


def build(settings: StreamSettings, provisions: Provisions) -> LabelHandler:
    labeller = provisions.need("labeller", NAME)()
    store = None
    if settings.templates:
        cache = TemplateCache(settings.template_settings())
        load_public_suffixes()
        store = provisions.need("template_store", NAME)(cache)
        labeller = TemplateCascade(labeller, cache)
    return LabelHandler(
        labeller,
        payload_limit=settings.dlq_payload_limit,
        templates=store,
        retries=settings.label_retries,
        backoff_s=settings.retry_backoff_ms / 1000,
    )


STAGE = Stage(NAME, SIMPLIFIED, ROUTES, build, "label every block main or other")
