"""The output record's JSON Schema, published in the repository for downstream readers.

``topics/schema/page-record.schema.json`` is generated from ``PageRecord`` by msgspec;
``python -m dripstream.topics.schema`` rewrites it, and a test fails when it is out of date.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from dripstream.topics.records import SCHEMA_VERSION, PageRecord

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "page-record.schema.json"


def page_record_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a record on the records topic."""
    schema = msgspec.json.schema(PageRecord)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://dripstream.invalid/schema/page-record.schema.json",
        "title": f"dripstream PageRecord, schema_version {SCHEMA_VERSION}",
        **schema,
    }


def render() -> str:
    return json.dumps(page_record_schema(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main() -> int:
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
