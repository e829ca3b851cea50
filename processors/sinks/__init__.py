"""Writers of the pipeline's output: one protocol, used by ``extract --out`` and by the
stream's ``sink`` stage alike.

A sink is named by a spec ``KIND:PATH`` (``records:out.jsonl``, ``datatrove:docs.jsonl``;
a bare path means ``records``). Adding a sink: a module with a class implementing
``Sink`` and one line in ``SINKS``.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable

from processors.pipeline import Outcome

SINKS: dict[str, str] = {
    "records": "processors.sinks.jsonl:RecordsJsonlSink",
    "datatrove": "processors.sinks.jsonl:DatatroveJsonlSink",
}


class SinkError(ValueError):
    """A sink spec that names no known sink."""


@runtime_checkable
class Sink(Protocol):
    """Takes each page's outcome (a record, or the error that stopped it); ``flush`` makes
    everything written so far durable, and the caller acknowledges input only after it."""

    def write(self, outcome: Outcome, input_id: str | None = None) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def open_sink(spec: str) -> Sink:
    """The sink a ``KIND:PATH`` spec names (``-`` as the path: standard output)."""
    kind, separator, target = spec.partition(":")
    if not separator or kind not in SINKS:
        if separator and len(kind) > 1:  # not a Windows drive letter
            raise SinkError(f"unknown sink {kind!r}: choose from {', '.join(SINKS)}")
        kind, target = "records", spec
    module_name, _, attribute = SINKS[kind].partition(":")
    return getattr(importlib.import_module(module_name), attribute)(target)
