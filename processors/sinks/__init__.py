"""Writers of the pipeline's output: one protocol, used by ``extract --out`` and by the
stream's ``sink`` stage alike.

A sink is named by a spec ``KIND:TARGET`` (``records:out.jsonl``, ``datatrove:docs.jsonl``,
``parquet:docs.parquet``, ``opensearch:http://127.0.0.1:9200/dripstream``; a bare path
means ``records``). Adding a sink: a module with a class implementing ``Sink`` and one
line in ``SINKS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from dripstream.processors.pipeline import Outcome

if TYPE_CHECKING:
    from dripstream.processors.sinks.search import SearchOptions

SINKS: dict[str, str] = {
    "records": "dripstream.processors.sinks.jsonl:RecordsJsonlSink",
    "datatrove": "dripstream.processors.sinks.jsonl:DatatroveJsonlSink",
    "parquet": "dripstream.processors.sinks.parquet:ParquetSink",
    "opensearch": "dripstream.processors.sinks.search:OpenSearchSink",
}


class SinkError(ValueError):
    """A sink spec that names no known sink."""


@dataclass(frozen=True)
class Refusal:
    """A write the sink's target refused for good (after the sink's bounded retries)."""

    input_id: str | None
    error_class: str
    message: str


class DocumentRefused(Exception):
    """The error class of a dead letter for a record its sink refused (``Refusal``)."""


@runtime_checkable
class Sink(Protocol):
    """Takes each page's outcome (a record, or the error that stopped it); ``flush`` makes
    everything written so far durable, and the caller acknowledges input only after it.

    ``flush`` returns the writes the target refused for good, by the ``input_id`` they
    were written with (None or empty: all durable); the stream dead-letters them. A
    target that is unreachable is not a refusal: the sink waits for it (back-pressure)."""

    def write(self, outcome: Outcome, input_id: str | None = None) -> None: ...

    def flush(self) -> Sequence[Refusal] | None: ...

    def close(self) -> None: ...


def open_sink(spec: str, search: SearchOptions | None = None) -> Sink:
    """The sink a ``KIND:TARGET`` spec names (``-`` as the path: standard output).

    ``search``: the search sink's connection and batching options (None: their
    defaults); the other sinks take none."""
    kind, separator, target = spec.partition(":")
    if not separator or kind not in SINKS:
        if separator and len(kind) > 1:  # not a Windows drive letter
            raise SinkError(f"unknown sink {kind!r}: choose from {', '.join(SINKS)}")
        kind, target = "records", spec
    module_name, _, attribute = SINKS[kind].partition(":")
    factory = getattr(importlib.import_module(module_name), attribute)
    if kind == "opensearch" and search is not None:
        return factory(target, search)
    return factory(target)
