"""Crawler output as pages: HTTP bodies, header names, times and item forms as crawlers
write them. The file readers (``dripstream.processors.ingest.sources``) and the pages-topic adapter
(``dripstream.streams.adapter``) both build their ``RawPage`` here, so a form is read one way.

- **HTTP bodies** (``http_body``). A WARC response record holds the body as it came off
  the wire, and fastwarc (like warcio's raw stream) undoes nothing: a ``Transfer-Encoding:
  chunked`` framing and ``Content-Encoding`` codings (``gzip``/``x-gzip``, ``deflate``,
  zlib-wrapped or raw, ``br``; several in order) stay. They are undone when the page is
  decoded, in the sandbox, with the decoded size bounded (``TooLarge``). Decoding is
  lenient like a browser's: a body that is not the framing or coding its header names
  (crawlers such as Common Crawl store some bodies already decoded) is kept as it is; a
  truncated one gives what it holds.
- **Header names** are case-insensitive: ``header_dict`` lower-cases them (multi-valued
  headers joined with ``, ``, as HTTP folds them).
- **Times** (``parse_time``): epoch seconds (a number or a numeric string; values above
  1e11 are epoch milliseconds), ISO-8601 (``2024-05-01T12:00:00Z``, offsets, naive =
  UTC) or an HTTP date.
- **Items** (``page_from_item``): a JSON object, either the RawPage form (``html`` as
  text) or a Scrapy-style item: ``url``, ``body``, ``headers`` (values a string or a
  list), ``status``; ``body`` is text, or base64 bytes when the item declares
  ``"body_encoding": "base64"`` (then the headers' charset and codings apply).
- **WARC** (``warc_pages``, ``warc_record_page``): response records with their HTTP
  status, headers, ``WARC-Date`` as ``fetched_at`` and the warcinfo's ``isPartOf`` as
  ``crawl_id``.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import IO, Any

from dripstream.processors.errors import TooLarge
from dripstream.topics.records import RawPage

MAX_BODY_BYTES = 64 * 1024 * 1024  # decoded HTTP body: 16 Mi characters at 4 bytes each
_CHUNK_LINE_MAX = 1024
_HEX = re.compile(rb"[0-9a-fA-F]+")
_CHARSET = re.compile(r"""charset\s*=\s*["']?([^"';,\s]+)""", re.IGNORECASE)
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_CODINGS_KEPT = frozenset(("", "identity"))
_MILLISECONDS_FROM = 1e11  # an epoch time above this is in milliseconds (year 5138 in s)


def header_dict(headers: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None) -> dict[str, str]:
    """Header names lower-cased; a list value or a repeated name joined with ``, ``."""
    if not headers:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    result: dict[str, str] = {}
    for name, value in items:
        key = _text(name).strip().lower()
        if not key:
            continue
        if isinstance(value, list | tuple):
            text = ", ".join(_text(part) for part in value)
        else:
            text = _text(value)
        result[key] = f"{result[key]}, {text}" if key in result else text
    return result


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    return "" if value is None else str(value)


def charset_param(content_type: str | None) -> str | None:
    """The ``charset`` parameter of a Content-Type value, if any."""
    if not content_type:
        return None
    match = _CHARSET.search(content_type)
    return match.group(1) if match else None


def dechunk(body: bytes) -> bytes | None:
    """The payload of a chunked transfer coding; None when ``body`` is not chunked."""
    out = bytearray()
    position = 0
    size_of_body = len(body)
    first = True
    while position < size_of_body:
        end_of_line = body.find(b"\n", position, position + _CHUNK_LINE_MAX)
        if end_of_line < 0:
            return None if first else bytes(out)
        field = body[position:end_of_line].rstrip(b"\r").split(b";", 1)[0].strip()
        if not _HEX.fullmatch(field):
            return None if first else bytes(out)
        size = int(field, 16)
        first = False
        if size == 0:
            return bytes(out)  # trailers, if any, are not part of the body
        start = end_of_line + 1
        out += body[start : start + size]
        if len(out) > MAX_BODY_BYTES:
            raise TooLarge(f"the chunked body holds more than {MAX_BODY_BYTES} bytes")
        position = start + size
        if body.startswith(b"\r\n", position):
            position += 2
        elif body.startswith(b"\n", position):
            position += 1
    return None if first else bytes(out)  # truncated: what arrived


_STEP = 1024 * 1024  # decompressed bytes produced per step


def _collect(steps: Iterator[bytes], limit: int) -> bytes:
    """The decompressed body, built a step at a time: TooLarge once it passes ``limit``,
    so a bomb never holds more than ``limit`` plus one step, whatever the coding."""
    out = bytearray()
    for step in steps:
        out += step
        if len(out) > limit:
            raise TooLarge(f"the decompressed body is larger than {limit} bytes")
    return bytes(out)


def _inflate_steps(data: bytes, wbits: int) -> Iterator[bytes]:
    """zlib / gzip (every member) / raw deflate; raises zlib.error on bad data."""
    while True:
        inflater = zlib.decompressobj(wbits)
        pending = data
        while pending:
            yield inflater.decompress(pending, _STEP)
            pending = inflater.unconsumed_tail
        yield inflater.flush()
        data = inflater.unused_data
        if not (inflater.eof and wbits == _GZIP_WBITS and data.lstrip(b"\x00")):
            return
        data = data.lstrip(b"\x00")


def _unbrotli_steps(data: bytes) -> Iterator[bytes]:
    import brotli

    decompressor = brotli.Decompressor()
    yield decompressor.process(data, output_buffer_limit=_STEP)
    while not decompressor.can_accept_more_data():
        yield decompressor.process(b"", output_buffer_limit=_STEP)


def decode_content(data: bytes, coding: str, limit: int = MAX_BODY_BYTES) -> bytes:
    """Undo one content coding; raises ValueError for a coding it does not know or data
    that is not in it, TooLarge past ``limit``."""
    coding = coding.strip().lower()
    try:
        if coding in ("gzip", "x-gzip"):
            return _collect(_inflate_steps(data, _GZIP_WBITS), limit)
        if coding == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send
            try:
                return _collect(_inflate_steps(data, zlib.MAX_WBITS), limit)
            except zlib.error:
                return _collect(_inflate_steps(data, -zlib.MAX_WBITS), limit)
        if coding == "br":
            import brotli

            try:
                return _collect(_unbrotli_steps(data), limit)
            except brotli.error as error:
                raise ValueError(f"not br data: {error}") from None
    except zlib.error as error:
        raise ValueError(f"not {coding} data: {error}") from None
    raise ValueError(f"unknown content coding {coding!r}")


def http_body(body: bytes, headers: Mapping[str, str], limit: int = MAX_BODY_BYTES) -> bytes:
    """The entity body: the chunked framing and the content codings that ``headers``
    (lower-case names) name, undone in reverse order. What is not in the coding its
    header names is kept as it is (see the module docstring); raises TooLarge."""
    transfer = [part.strip().lower() for part in headers.get("transfer-encoding", "").split(",")]
    if "chunked" in transfer:
        unframed = dechunk(body)
        if unframed is not None:
            body = unframed
    codings = [part.strip() for part in headers.get("content-encoding", "").split(",")]
    for coding in reversed([c for c in codings if c.lower() not in _CODINGS_KEPT]):
        try:
            body = decode_content(body, coding, limit)
        except ValueError:
            break  # stored decoded, or a coding we do not know: keep what we have
    if len(body) > limit:
        raise TooLarge(f"the body is larger than {limit} bytes")
    return body


def parse_time(value: Any) -> float | None:
    """Epoch seconds from epoch seconds or milliseconds, ISO-8601 or an HTTP date; None
    for None or ""; raises ValueError for anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip()
        try:
            seconds = float(text)
        except ValueError:
            return _parse_date(text)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"not a time: {value!r}")
    return seconds / 1000 if abs(seconds) >= _MILLISECONDS_FROM else seconds


def _parse_date(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"not an ISO-8601 or HTTP date: {text[:64]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _status(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"not an HTTP status: {value!r}")
    status = int(value)
    if not 100 <= status <= 999:
        raise ValueError(f"not an HTTP status: {value!r}")
    return status


_TEXT_BODY_HEADERS = ("content-encoding", "transfer-encoding", "content-length")


def page_from_item(item: Mapping[str, Any], html: str | None = None) -> RawPage:
    """A JSON object as a RawPage: the RawPage form (``html`` text) or a Scrapy-style
    item (``body``); ``html`` replaces the item's page (cleaned copies). Raises ValueError
    for a field that cannot be read (a bad time, status or base64 body)."""
    headers = header_dict(item.get("headers"))
    body: bytes
    charset: str | None
    text = item.get("html") if html is None else html
    if text is None and "body" in item:
        raw_body = item.get("body")
        declared = str(item.get("body_encoding") or "").strip().lower()
        if declared == "base64":
            try:
                body = base64.b64decode(str(raw_body or ""), validate=True)
            except (binascii.Error, ValueError) as error:
                raise ValueError(f"body is not base64: {error}") from None
            charset = item.get("charset") or None
        elif declared not in ("", "text", "utf-8"):
            raise ValueError(f"unknown body_encoding {declared!r} (base64 or text)")
        else:
            body, charset = _text_body(raw_body, headers)
    else:
        body, charset = _text_body(text, headers)
    content_type = item.get("content_type") or headers.get("content-type")
    return RawPage(
        url=str(item.get("url") or item.get("id") or ""),
        html=body,
        content_type=str(content_type) if content_type else None,
        charset=charset,
        status=_status(item.get("status")),
        fetched_at=parse_time(item.get("fetched_at")),
        crawl_id=str(item["crawl_id"]) if item.get("crawl_id") is not None else None,
        headers=headers,
    )


def _text_body(text: Any, headers: dict[str, str]) -> tuple[bytes, str]:
    """A page given as text: UTF-8 from here on; codings its headers name are gone."""
    for name in _TEXT_BODY_HEADERS:
        headers.pop(name, None)
    return str(text or "").encode("utf-8", "surrogatepass"), "utf-8"


def _is_html_type(content_type: str) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    return not mime or "html" in mime


def warc_record_page(
    record: Any, crawl_id: str | None = None, max_bytes: int = MAX_BODY_BYTES
) -> RawPage | None:
    """A fastwarc response record (parsed with ``parse_http=True``) as a RawPage; None
    when it holds no HTTP response. Its body is read with at most ``max_bytes`` held: a
    larger one raises ``TooLarge`` (the record's content may be a compression bomb)."""
    http = record.http_headers
    if http is None or not http.status_code:
        return None
    headers = header_dict(http.items())
    try:
        fetched_at = parse_time(record.headers.get("WARC-Date"))
    except ValueError:
        fetched_at = None
    content_type = headers.get("content-type")
    body = record.reader.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise TooLarge(f"a WARC record's body of more than {max_bytes} bytes")
    return RawPage(
        url=target_uri(record.headers.get("WARC-Target-URI", "") or ""),
        html=body,
        content_type=content_type,
        charset=None,
        status=http.status_code,
        fetched_at=fetched_at,
        crawl_id=crawl_id,
        headers=headers,
    )


def target_uri(value: str) -> str:
    """A ``WARC-Target-URI`` as a URL: without the angle brackets that WARC 1.0's own
    examples put around it (and that GNU wget writes)."""
    value = value.strip()
    if value.startswith("<") and value.endswith(">"):
        return value[1:-1].strip()
    return value


def _warcinfo_crawl(record: Any) -> str | None:
    for line in record.reader.read(65536).decode("utf-8", "replace").splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "ispartof" and value.strip():
            return value.strip()
    return None


def warc_pages(
    stream: IO[bytes], html_only: bool = True, max_bytes: int = MAX_BODY_BYTES
) -> Iterator[tuple[str, RawPage | TooLarge]]:
    """(record id, page) of every HTTP response record of a WARC (plain or gzip), streamed;
    a record whose body is larger than ``max_bytes`` comes as its ``TooLarge``.

    ``html_only`` skips responses whose content type names something other than HTML,
    except pages gone (404/410), which a sink needs to delete."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    from dripstream.topics.records import GONE_STATUSES

    crawl_id = None
    for record in ArchiveIterator(
        stream, record_types=WarcRecordType.response | WarcRecordType.warcinfo, parse_http=True
    ):
        if record.record_type == WarcRecordType.warcinfo:
            crawl_id = _warcinfo_crawl(record) or crawl_id
            continue
        http = record.http_headers
        if http is None:
            continue
        content_type = header_dict(http.items()).get("content-type", "")
        if html_only and not _is_html_type(content_type) and http.status_code not in GONE_STATUSES:
            continue
        try:
            page = warc_record_page(record, crawl_id, max_bytes)
        except TooLarge as error:
            yield record.record_id, error
            continue
        if page is not None:
            yield record.record_id, page
