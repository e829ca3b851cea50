"""The Parquet sink: datatrove's document form, one flat column per field.

Columns: ``text`` (the Markdown) and ``id`` (the stable document id), then every other
record field as its own column (``url``, ``title``, ``version``, ``extractor``,
``language``, ``fetched_at``, ...), plus ``status`` and ``input_id`` as in the
datatrove JSONL sink; ``timings_ms`` is a JSON text column. datatrove's ``ParquetReader``
reads ``text`` and ``id`` by default and puts the other columns in the document's
metadata, so a document read back is the one ``JsonlReader`` gives from
``datatrove:docs.jsonl``; ``datasets.load_dataset("parquet")`` reads every column as
itself. Pages without content (errors, pages gone) are not documents: skipped.

Rows are written in row groups of at most ``row_group_rows`` rows or about
``row_group_bytes`` of text, whichever comes first, as the rows come: only the current
row group is held. ``flush`` writes the rows held as a row group; the file is readable
once closed (Parquet's footer is written last).

Needs pyarrow: ``pip install 'dripstream[parquet]'``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from dripstream.processors.pipeline import Outcome
from dripstream.processors.sinks import SinkError

ROW_GROUP_ROWS = 10_000
ROW_GROUP_BYTES = 64 * 1024 * 1024

# (column, pyarrow type name): the datatrove pair first, then the record's fields.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("text", "string"),
    ("id", "string"),
    ("url", "string"),
    ("title", "string"),
    ("version", "string"),
    ("extractor", "string"),
    ("language", "string"),
    ("fetched_at", "float64"),
    ("claimed_fetched_at", "float64"),
    ("crawl_id", "string"),
    ("http_status", "int32"),
    ("truncated", "string"),
    ("gone", "bool_"),
    ("fallback_reason", "string"),
    ("block_count", "int32"),
    ("main_block_count", "int32"),
    ("token_count", "int32"),
    ("timings_ms", "string"),
    ("schema_version", "int32"),
    ("status", "string"),
    ("input_id", "string"),
)


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise SinkError(
            "the parquet sink needs pyarrow: install dripstream[parquet] "
            "(pip install 'dripstream[parquet]')"
        ) from None
    return pyarrow


class ParquetSink:
    """Documents as Parquet rows, in bounded row groups (see the module docstring)."""

    def __init__(
        self,
        target: str,
        row_group_rows: int = ROW_GROUP_ROWS,
        row_group_bytes: int = ROW_GROUP_BYTES,
    ) -> None:
        if target in ("", "-"):
            raise SinkError("the parquet sink writes a file: give parquet:PATH")
        pa = _pyarrow()
        self._pa = pa
        self._schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in COLUMNS])
        self._file = open(target, "wb")  # noqa: SIM115 - closed by close()
        self._writer = pa.parquet.ParquetWriter(self._file, self._schema, compression="zstd")
        self._rows: dict[str, list[Any]] = {name: [] for name, _ in COLUMNS}
        self._held = 0
        self._held_bytes = 0
        self._row_group_rows = max(1, row_group_rows)
        self._row_group_bytes = max(1, row_group_bytes)
        self.written = 0
        self.row_groups = 0

    def write(self, outcome: Outcome, input_id: str | None = None) -> None:
        record = outcome.record
        if record is None or record.gone:
            return
        values = {
            "text": record.markdown,
            "id": record.id,
            "timings_ms": json.dumps(record.timings_ms, sort_keys=True),
            "status": outcome.status,
            "input_id": input_id,
        }
        for name, column in self._rows.items():
            column.append(values[name] if name in values else getattr(record, name))
        self._held += 1
        self._held_bytes += len(record.markdown) + len(record.url) + len(record.title)
        self.written += 1
        if self._held >= self._row_group_rows or self._held_bytes >= self._row_group_bytes:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if not self._held:
            return
        table = self._pa.Table.from_pydict(self._rows, schema=self._schema)
        self._writer.write_table(table, row_group_size=self._held)
        self._file.flush()  # the row group leaves this process's memory
        for column in self._rows.values():
            column.clear()
        self._held = self._held_bytes = 0
        self.row_groups += 1

    def flush(self) -> None:
        """Write the rows held as a row group and sync the file (readable once closed)."""
        self._write_row_group()
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file.closed:
            return
        self._write_row_group()
        self._writer.close()
        self._file.close()
