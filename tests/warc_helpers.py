"""Real WARC files for tests, written with warcio."""

from __future__ import annotations

import io
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


def write_warc(path: Path, pages: list[tuple[str, str, bytes]]) -> None:
    """A gzipped WARC with one response record per (url, content type, body)."""
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        for url, content_type, body in pages:
            headers = StatusAndHeaders("200 OK", [("Content-Type", content_type)], "HTTP/1.1")
            record = writer.create_warc_record(
                url, "response", payload=io.BytesIO(body), http_headers=headers
            )
            writer.write_record(record)
