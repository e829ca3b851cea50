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
  ``crawl_id``; identical-payload-digest revisits resolved against the same file's
  responses; ``WARC-Truncated`` records, and records whose length lies, flagged
  ``truncated``; segmented records and revisits without their response counted as
  skipped (docs/crawler-input.md, "WARC files").
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
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
        from email.utils import parsedate_to_datetime  # HTTP dates are rare: imported on use

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


_WARC_HEAD = re.compile(rb"(?:\A|\n)WARC/1\.[01]\r?\n[A-Za-z][A-Za-z0-9-]*:")
TRUNCATED_LENGTH = "length"


def warc_record_page(
    record: Any,
    crawl_id: str | None = None,
    max_bytes: int = MAX_BODY_BYTES,
    *,
    url: str | None = None,
    fetched_at: float | None = None,
    status: int | None = None,
) -> RawPage | None:
    """A fastwarc response record (parsed with ``parse_http=True``) as a RawPage; None
    when it holds no HTTP response. Its body is read with at most ``max_bytes`` held: a
    larger one raises ``TooLarge`` (the record's content may be a compression bomb).

    ``truncated`` is the record's ``WARC-Truncated`` reason, or ``length`` when its length
    lies: a body shorter than its HTTP ``Content-Length`` (without chunked framing) or
    than the record's own length (the file ends inside it), or one that runs into the
    next record's WARC header (cut there). ``url``, ``fetched_at`` and ``status`` replace
    the record's own (a resolved revisit)."""
    http = record.http_headers
    if http is None or not http.status_code:
        return None
    headers = header_dict(http.items())
    if fetched_at is None:
        try:
            fetched_at = parse_time(record.headers.get("WARC-Date"))
        except ValueError:
            fetched_at = None
    content_type = headers.get("content-type")
    body = record.reader.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise TooLarge(f"a WARC record's body of more than {max_bytes} bytes")
    truncated = (record.headers.get("WARC-Truncated") or "").strip().lower() or None
    next_record = _WARC_HEAD.search(body) if b"WARC/1." in body else None
    if next_record is not None:  # the record's Content-Length said more than it holds
        body = body[: next_record.start()].rstrip(b"\r\n")
        truncated = truncated or TRUNCATED_LENGTH
    if truncated is None and (
        len(body) < (record.content_length or 0)  # the file ends inside the record
        or _shorter_than_declared(body, headers)
    ):
        truncated = TRUNCATED_LENGTH
    return RawPage(
        url=url if url is not None else target_uri(record.headers.get("WARC-Target-URI", "") or ""),
        html=body,
        content_type=content_type,
        charset=None,
        status=status or http.status_code,
        fetched_at=fetched_at,
        crawl_id=crawl_id,
        headers=headers,
        truncated=truncated,
    )


def _shorter_than_declared(body: bytes, headers: Mapping[str, str]) -> bool:
    """True when an unframed body holds fewer bytes than its HTTP Content-Length."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return False
    try:
        declared = int(headers.get("content-length", "").strip())
    except ValueError:
        return False
    return len(body) < declared


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


# Why a WARC record that might have been a page is not one (``warc_pages``' ``skipped``).
SKIP_REVISIT = "revisit"  # a revisit whose earlier response is not in the file
SKIP_CONTINUATION = "continuation"  # a later segment of a segmented record
SKIP_SEGMENTED = "segmented"  # the first segment of a segmented record: the page is split
SKIP_NOT_HTML = "not html"  # a response of another content type
SKIP_NOT_HTTP = "not http"  # a response record without an HTTP response (dns:, ftp:, ...)
SKIP_UNREADABLE = "unreadable"  # bytes that hold no WARC record, up to the next one found

REVISIT_INDEX_MAX = 200_000
"""Responses remembered per file (their offsets only) to resolve revisits against."""

_GZIP_MAGIC = b"\x1f\x8b\x08"
_SCAN_BLOCK = 1 << 20


def _warc_records(stream: IO[bytes], skipped: Counter[str]) -> Iterator[Any]:
    """The fastwarc records of ``stream`` (plain or gzip) that may hold or name a page,
    in order (request, metadata and resource records are left unparsed). When a record's
    length lies, fastwarc finds no record where it looks next; on a seekable stream the
    reading goes on at the next record start after the last good one (a gzip member
    holding a WARC header, or a ``WARC/1.x`` line), counted as ``unreadable``."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    kinds = (
        WarcRecordType.response
        | WarcRecordType.revisit
        | WarcRecordType.warcinfo
        | WarcRecordType.continuation
    )
    seekable = stream.seekable()
    gz = False
    if seekable:
        origin = stream.tell()
        gz = stream.read(3) == _GZIP_MAGIC
        stream.seek(origin)
    last = -1  # stream offset of the last record given
    scan_from = 0
    while True:
        try:
            for record in ArchiveIterator(stream, record_types=kinds, parse_http=True):
                if record.stream_pos <= last:
                    continue
                last = record.stream_pos
                yield record
            return
        except (OSError, ValueError, RuntimeError):  # fastwarc: no record where one should be
            skipped[SKIP_UNREADABLE] += 1
        if not seekable:
            return
        start = _next_record_start(stream, max(last + 1, scan_from), gz)
        if start is None:
            return
        scan_from = start + 1
        stream.seek(start)


def _next_record_start(stream: IO[bytes], position: int, gz: bool) -> int | None:
    """The offset of the first record start at or after ``position``, or None."""
    marker = _GZIP_MAGIC if gz else b"WARC/1."
    while True:
        stream.seek(position)
        block = stream.read(_SCAN_BLOCK + 64)
        if len(block) < len(marker):
            return None
        found = block.find(marker)
        while 0 <= found < _SCAN_BLOCK:
            if _starts_record(block[found:], gz) and (gz or found == 0 or block[found - 1] == 10):
                return position + found
            found = block.find(marker, found + 1)
        if len(block) <= _SCAN_BLOCK:
            return None
        position += _SCAN_BLOCK


def _starts_record(data: bytes, gz: bool) -> bool:
    if gz:
        try:
            data = zlib.decompressobj(_GZIP_WBITS).decompress(data[:4096], 16)
        except zlib.error:
            return False
    return data.startswith((b"WARC/1.0\r\n", b"WARC/1.1\r\n", b"WARC/1.0\n", b"WARC/1.1\n"))


class _Revisits:
    """Where each response of a file lies, to resolve the revisits that refer to it: by
    record id (``WARC-Refers-To``), by target URI and payload digest, by payload digest.
    A revisit is resolved by reading its response again through a second handle on the
    same file; without one (a stream that is no file) it is skipped."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._offsets: dict[str, int] = {}
        name = getattr(stream, "name", None)
        self._path = name if isinstance(name, str) and stream.seekable() else None
        self._handle: IO[bytes] | None = None

    def remember(self, record: Any, url: str) -> None:
        if self._path is None or len(self._offsets) >= 3 * REVISIT_INDEX_MAX:
            return
        position = record.stream_pos
        self._offsets.setdefault(f"id {target_uri(record.record_id or '')}", position)
        digest = record.headers.get("WARC-Payload-Digest")
        if digest:
            self._offsets.setdefault(f"digest {digest}", position)
            self._offsets.setdefault(f"uri {url} {digest}", position)

    def original(self, revisit: Any) -> Any | None:
        """The response an identical-payload-digest revisit refers to, or None."""
        headers = revisit.headers
        if "identical-payload-digest" not in (headers.get("WARC-Profile") or ""):
            return None  # server-not-modified: the earlier copy may differ
        digest = headers.get("WARC-Payload-Digest") or ""
        refers_url = target_uri(
            headers.get("WARC-Refers-To-Target-URI") or headers.get("WARC-Target-URI") or ""
        )
        for key in (
            f"id {target_uri(headers.get('WARC-Refers-To') or '')}",
            f"uri {refers_url} {digest}",
            f"digest {digest}",
        ):
            if key in self._offsets:
                return self._read(self._offsets[key])
        return None

    def _read(self, position: int) -> Any | None:
        from fastwarc.warc import ArchiveIterator

        if self._handle is None:
            assert self._path is not None
            self._handle = open(self._path, "rb")  # noqa: SIM115 - closed by close()
        self._handle.seek(position)
        for record in ArchiveIterator(self._handle, parse_http=True):
            return record
        return None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


def warc_pages(
    stream: IO[bytes],
    html_only: bool = True,
    max_bytes: int = MAX_BODY_BYTES,
    skipped: Counter[str] | None = None,
) -> Iterator[tuple[str, RawPage | TooLarge]]:
    """(record id, page) of every HTTP response record of a WARC (plain or gzip), streamed;
    a record whose body is larger than ``max_bytes`` comes as its ``TooLarge``.

    ``html_only`` skips responses whose content type names something other than HTML,
    except pages gone (404/410), which a sink needs to delete. An identical-payload-digest
    ``revisit`` is the page of the response it refers to in the same file, with the
    revisit's URL, date and status; a truncated record is a page flagged ``truncated``.
    Records that might have been pages but are not (the ``SKIP_*`` reasons: other
    revisits, segmented records, other content types) are counted in ``skipped``;
    warcinfo, request, metadata and resource records are never pages and never counted."""
    from fastwarc.warc import WarcRecordType

    from dripstream.topics.records import GONE_STATUSES

    skipped = Counter() if skipped is None else skipped
    revisits = _Revisits(stream)
    crawl_id = None
    try:
        for record in _warc_records(stream, skipped):
            kind = record.record_type
            if kind == WarcRecordType.warcinfo:
                crawl_id = _warcinfo_crawl(record) or crawl_id
                continue
            if kind == WarcRecordType.continuation:
                skipped[SKIP_CONTINUATION] += 1
                continue
            if kind not in (WarcRecordType.response, WarcRecordType.revisit):
                continue
            if record.headers.get("WARC-Segment-Number") is not None:
                skipped[SKIP_SEGMENTED] += 1
                continue
            url = target_uri(record.headers.get("WARC-Target-URI", "") or "")
            source, status = record, None
            if kind == WarcRecordType.revisit:
                source = revisits.original(record)
                if source is None or source.http_headers is None:
                    skipped[SKIP_REVISIT] += 1
                    continue
                if record.http_headers is not None and record.http_headers.status_code:
                    status = record.http_headers.status_code
            http = source.http_headers
            if http is None or not http.status_code:
                skipped[SKIP_NOT_HTTP] += 1
                continue
            if source is record:
                revisits.remember(record, url)
            content_type = header_dict(http.items()).get("content-type", "")
            code = status or http.status_code
            if html_only and not _is_html_type(content_type) and code not in GONE_STATUSES:
                skipped[SKIP_NOT_HTML] += 1
                continue
            try:
                fetched_at = parse_time(record.headers.get("WARC-Date"))
            except ValueError:
                fetched_at = None
            try:
                page = warc_record_page(
                    source, crawl_id, max_bytes, url=url, fetched_at=fetched_at, status=status
                )
            except TooLarge as error:
                yield record.record_id, error
                continue
            if page is not None:
                yield record.record_id, page
    finally:
        revisits.close()
