"""The sink stage: records in; each written through the configured sink
(``DRIPSTREAM_SINK``), flushed before the batch is acknowledged. Its outputs are only
dead letters: a value that is not a record, and a record the sink's target refused for
good (``DocumentRefused``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dripstream.processors.pipeline import Outcome
from dripstream.processors.sinks import DocumentRefused, Refusal, Sink, open_sink
from dripstream.streams import metrics
from dripstream.streams.envelope import Inbound, Outbound, dead_letter
from dripstream.streams.stages.base import INPUT_ERRORS, Provisions, Stage, StageSetupError
from dripstream.topics.catalog import RECORDS
from dripstream.topics.codecs import from_json
from dripstream.topics.records import PageRecord

if TYPE_CHECKING:
    from dripstream.streams.settings import StreamSettings

NAME = "sink"


def _write_records(sink: Sink, records: list[tuple[int, PageRecord]]) -> list[Refusal]:
    for index, record in records:
        status = "gone" if record.gone else "fallback" if record.fallback_reason else "ok"
        sink.write(Outcome(status, record, reason=record.fallback_reason), str(index))
    return list(sink.flush() or ())


@dataclass
class SinkHandler:
    sink: Sink
    payload_limit: int = 1024 * 1024

    async def __call__(self, messages: Sequence[Inbound]) -> list[Outbound]:
        records: list[tuple[int, PageRecord]] = []
        outputs: list[Outbound] = []
        limit = self.payload_limit
        for index, message in enumerate(messages):
            try:
                records.append((index, from_json(message.value or b"", PageRecord)))
            except INPUT_ERRORS as error:
                outputs.append(dead_letter(NAME, message, error, limit))
        started = time.perf_counter()
        refusals = await asyncio.to_thread(_write_records, self.sink, records)
        metrics.SINK_SECONDS.observe(time.perf_counter() - started)
        refused = {int(refusal.input_id or 0) for refusal in refusals}
        for index, record in records:
            outcome = "refused" if index in refused else "deleted" if record.gone else "written"
            metrics.SINK_DOCUMENTS.labels(outcome).inc()
        for refusal in refusals:
            message = messages[int(refusal.input_id or 0)]
            error = DocumentRefused(f"{refusal.error_class}: {refusal.message}")
            outputs.append(dead_letter(NAME, message, error, limit))
        return outputs


def build(settings: StreamSettings, provisions: Provisions) -> SinkHandler:
    if not settings.sink:
        raise StageSetupError("the sink stage needs DRIPSTREAM_SINK (KIND:TARGET)")
    sink = open_sink(settings.sink, settings.search)
    return SinkHandler(sink, payload_limit=settings.dlq_payload_limit)


STAGE = Stage(NAME, RECORDS, (), build, "write records through DRIPSTREAM_SINK")
