"""The input adapter: what a crawler may put on the pages topic.

Accepted values:

- a msgpack ``RawPage``;
- a JSON ``RawPage`` (``html`` as a string; ``fetched_at`` epoch or ISO-8601);
- a Scrapy-style JSON item (``url``, ``body``, ``headers``, ``status``; a base64 ``body``
  when the item says ``"body_encoding": "base64"``), as ``processors.ingest.crawl`` reads it;
- a WARC response record (plain or gzip-compressed), as Heritrix-, StormCrawler- and
  Nutch-style pipelines publish them: the HTTP status, headers and body, ``WARC-Date``
  as ``fetched_at``, a ``WARC-Truncated`` (or length-lying) record flagged ``truncated``;
  any other WARC record type (request, metadata, revisit, continuation, ...) and a
  segmented response are refused;
- a bare HTML document with the URL in the message key or in a ``url`` header (and
  optionally ``content-type``, ``charset``, ``status``, ``fetched-at``, ``crawl-id``
  headers).

Header names, in the value and on the message, are case-insensitive. Anything else
raises ``MalformedInput`` and becomes a dead letter.
"""

from __future__ import annotations

import io
import zlib

import msgspec

from dripstream.processors.ingest.crawl import (
    header_dict,
    page_from_item,
    parse_time,
    warc_record_page,
)
from dripstream.topics.codecs import SchemaVersionError
from dripstream.topics.records import RAW_PAGE_VERSIONS, SCHEMA_VERSION, RawPage

URL_HEADERS = ("url", "x-url", "dripstream-url")
_MSGPACK_MAP = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))  # fixmap, map16, map32


MAX_KEY_BYTES = 64 * 1024  # longer than any URL a crawler fetches


class MalformedInput(ValueError):
    """A message on the pages topic that is neither a RawPage nor a usable bare page."""

    reason = "malformed_input"


# JSON carries the page as text, and a time as epoch seconds or ISO-8601.
_JSON_TYPES = {"html": str, "fetched_at": float | str | None}


def _json_field(info: msgspec.structs.FieldInfo) -> tuple:
    kind = _JSON_TYPES.get(info.name, info.type)
    if info.default is not msgspec.NODEFAULT:
        return (info.name, kind, info.default)
    if info.default_factory is not msgspec.NODEFAULT:
        return (info.name, kind, msgspec.field(default_factory=info.default_factory))
    return (info.name, kind)


# RawPage's own fields, with ``html`` as a string: the JSON form of the input record.
_JsonRawPage = msgspec.defstruct(
    "JsonRawPage",
    [_json_field(info) for info in msgspec.structs.fields(RawPage)],
    frozen=True,
    kw_only=True,
)


def _header(headers: dict[str, bytes], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = headers.get(name)
        if value:
            return value.decode("utf-8", "replace")
    return None


_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, SchemaVersionError, RecursionError)


def _versioned(page: msgspec.Struct) -> msgspec.Struct:
    version = page.schema_version  # type: ignore[attr-defined]
    if version not in RAW_PAGE_VERSIONS:
        raise SchemaVersionError(
            f"RawPage has schema_version {version}, expected one of {sorted(RAW_PAGE_VERSIONS)}"
        )
    return page


def _is_warc(value: bytes) -> bool:
    if value.startswith(b"WARC/"):
        return True
    if not value.startswith(b"\x1f\x8b"):
        return False
    try:  # a gzip member: look at its first bytes only
        return (
            zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(value[:4096], 8).startswith(b"WARC/")
        )
    except zlib.error:
        return False


def _warc_page(value: bytes) -> RawPage:
    """The page of a WARC response record given as the message value."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    try:
        for record in ArchiveIterator(io.BytesIO(value), parse_http=True):
            if record.record_type != WarcRecordType.response:
                kind = record.headers.get("WARC-Type", "unknown")
                raise MalformedInput(
                    f"a WARC {kind} record is not a page (response records are; a revisit's "
                    "payload is in another record)"
                )
            if record.headers.get("WARC-Segment-Number") is not None:
                raise MalformedInput("a segmented WARC record holds part of a page, not a page")
            page = warc_record_page(record)
            if page is None:
                raise MalformedInput("the WARC response record holds no HTTP response")
            return page
    except (ValueError, RuntimeError) as error:  # fastwarc's errors on broken records
        if isinstance(error, MalformedInput):
            raise
        raise MalformedInput(f"not a readable WARC record: {error}") from None
    raise MalformedInput("the value starts like a WARC record but holds none")


def _json_page(value: bytes) -> RawPage:
    """A JSON RawPage (``html``) or a Scrapy-style item (``body``)."""
    try:
        keys = msgspec.json.decode(value, type=dict[str, msgspec.Raw])
    except _DECODE_ERRORS as error:
        raise MalformedInput(f"JSON value is not an object: {error}") from None
    if "body" in keys and "html" not in keys:
        try:
            item = msgspec.json.decode(value, type=dict[str, object])
            return page_from_item(item)
        except (*_DECODE_ERRORS, ValueError, TypeError) as error:
            raise MalformedInput(f"JSON value is not a Scrapy-style item: {error}") from None
    try:
        page = _versioned(msgspec.json.decode(value, type=_JsonRawPage))
        fields = msgspec.structs.asdict(page)
        fields["fetched_at"] = parse_time(page.fetched_at)
    except (*_DECODE_ERRORS, ValueError) as error:
        raise MalformedInput(f"JSON value is not a RawPage: {error}") from None
    headers = header_dict(page.headers)
    for name in ("content-encoding", "transfer-encoding", "content-length"):
        headers.pop(name, None)  # the page is text now: no coding applies
    # The text is re-encoded as UTF-8, whatever charset the crawler saw.
    fields.update(
        html=page.html.encode("utf-8", "surrogatepass"),
        charset="utf-8",
        headers=headers,
        schema_version=SCHEMA_VERSION,
    )
    return RawPage(**fields)


def check_envelope(key: bytes | None, value: bytes | None) -> None:
    """The checks that need no parsing (cheap enough for the consumer's own process,
    before the page is copied anywhere); raises MalformedInput."""
    if not value:
        raise MalformedInput("the message has no value")
    if key is not None and len(key) > MAX_KEY_BYTES:
        raise MalformedInput(
            f"the key is {len(key)} bytes; a page key (a URL or an id) may hold {MAX_KEY_BYTES}"
        )


def parse_raw_page(key: bytes | None, value: bytes | None, headers: dict[str, bytes]) -> RawPage:
    """Turn one pages-topic message into a RawPage; raises MalformedInput."""
    check_envelope(key, value)
    assert value is not None
    if value[0] in _MSGPACK_MAP:
        try:
            page = _versioned(msgspec.msgpack.decode(value, type=RawPage))
        except _DECODE_ERRORS as error:
            raise MalformedInput(f"msgpack value is not a RawPage: {error}") from None
        if any(not name.islower() for name in page.headers):
            page = msgspec.structs.replace(page, headers=header_dict(page.headers))
        return page
    if value.lstrip()[:1] == b"{":
        return _json_page(value)
    if _is_warc(value):
        return _warc_page(value)
    headers = {name.lower(): header for name, header in headers.items()}
    url = _header(headers, URL_HEADERS) or (key.decode("utf-8", "replace") if key else None)
    if not url:
        raise MalformedInput("a bare HTML value needs the URL in the key or a 'url' header")
    try:
        status = _header(headers, ("status",))
        fetched_at = parse_time(_header(headers, ("fetched-at", "fetched_at")))
        return RawPage(
            url=url,
            html=value,
            content_type=_header(headers, ("content-type",)),
            charset=_header(headers, ("charset",)),
            status=int(status) if status else None,
            fetched_at=fetched_at,
            crawl_id=_header(headers, ("crawl-id", "crawl_id")),
        )
    except ValueError as error:
        raise MalformedInput(f"a header of the bare HTML value cannot be read: {error}") from None
