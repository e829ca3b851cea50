"""JSONL sinks: the records form (every outcome, errors included) and datatrove's form.

``RecordsJsonlSink`` writes one object per page: ``status`` (``ok`` | ``fallback`` |
``gone`` | ``error``), the record's fields (``id`` the stable document id and ``version``
the content-version id, as on the stream's records topic), or ``reason`` /
``error_class`` / ``message``; ``input_id`` is the input's own id when it has one (a
JSONL row's ``id``, a WARC record id, a file path).

``DatatroveJsonlSink`` writes datatrove's ``Document`` shape, ``{"text", "id",
"metadata"}``, so datatrove's ``JsonlReader`` and ``datasets.load_dataset("json")`` load
it with their defaults. Pages without content (errors, pages gone) are not documents:
skipped.

A target whose name ends in ``.gz`` or ``.zst`` is written in that compression, as the
lines come (gzip, or one zstd frame per flush): nothing is buffered whole, and ``flush``
makes what was written so far readable.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from abc import ABC, abstractmethod
from typing import IO, Any

import cramjam
import msgspec

from dripstream.processors.pipeline import Outcome


class _ZstdFile(io.RawIOBase):
    """A binary file that zstd-compresses what is written to it: one frame per flush
    (concatenated frames are one valid zstd stream)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._compressor = cramjam.zstd.Compressor()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._compressor.compress(bytes(data))

    def flush(self) -> None:
        """End the current frame: what was written so far is readable on its own."""
        if not self._file.closed:
            self._file.write(bytes(self._compressor.finish()))
            self._file.flush()
            self._compressor = cramjam.zstd.Compressor()

    def fileno(self) -> int:
        return self._file.fileno()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()
        super().close()


def open_text_output(target: str) -> IO[str]:
    """``target`` opened for UTF-8 text, compressed as its name says (``.gz``, ``.zst``)."""
    if target.endswith(".gz"):
        return gzip.open(target, "wt", encoding="utf-8")
    if target.endswith(".zst"):
        return io.TextIOWrapper(_ZstdFile(target), encoding="utf-8")
    return open(target, "w", encoding="utf-8")


class _JsonlSink(ABC):
    """One JSON object a line to a file or standard output; subclasses say which."""

    def __init__(self, target: str) -> None:
        self._own = target not in ("", "-")
        self._out: IO[str] = open_text_output(target) if self._own else sys.stdout
        self.written = 0

    @abstractmethod
    def _line(self, outcome: Outcome, input_id: str | None) -> dict[str, Any] | None:
        """The line for this outcome, or None to write nothing."""

    def write(self, outcome: Outcome, input_id: str | None = None) -> None:
        line = self._line(outcome, input_id)
        if line is not None:
            self._out.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.written += 1

    def flush(self) -> None:
        self._out.flush()
        if self._own:
            os.fsync(self._out.fileno())

    def close(self) -> None:
        self._out.flush()
        if self._own:
            self._out.close()


class RecordsJsonlSink(_JsonlSink):
    """Every outcome as a line (see the module docstring)."""

    def _line(self, outcome: Outcome, input_id: str | None) -> dict[str, Any]:
        line: dict[str, Any] = {"status": outcome.status}
        if outcome.record is not None:
            line.update(msgspec.to_builtins(outcome.record))
        if outcome.status not in ("ok", "gone"):
            line.update(
                reason=outcome.reason, error_class=outcome.error_class, message=outcome.message
            )
        if input_id is not None:
            line["input_id"] = input_id
        return line


class DatatroveJsonlSink(_JsonlSink):
    """datatrove ``Document`` lines: ``text`` = Markdown, ``id`` = the stable document id."""

    def _line(self, outcome: Outcome, input_id: str | None) -> dict[str, Any] | None:
        record = outcome.record
        if record is None or record.gone:
            return None
        metadata = msgspec.to_builtins(record)
        metadata.pop("markdown")
        metadata.pop("id")
        metadata["status"] = outcome.status
        if input_id is not None:
            metadata["input_id"] = input_id
        return {"text": record.markdown, "id": record.id, "metadata": metadata}
