"""The input adapter: what a crawler may put on the pages topic.

Accepted values: a msgpack ``RawPage``, a JSON ``RawPage`` (``html`` as a string), or a
bare HTML document with the URL in the message key or in a ``url`` header. Anything else
raises ``MalformedInput`` and becomes a dead letter.
"""

from __future__ import annotations

import msgspec

from topics.codecs import SchemaVersionError, from_json, from_msgpack
from topics.records import SCHEMA_VERSION, RawPage

URL_HEADERS = ("url", "x-url", "dripstream-url")
_MSGPACK_MAP = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))  # fixmap, map16, map32


class MalformedInput(ValueError):
    """A message on the pages topic that is neither a RawPage nor a usable bare page."""

    reason = "malformed_input"


class _JsonRawPage(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    html: str
    content_type: str | None = None
    charset: str | None = None
    status: int | None = None
    fetched_at: float | None = None
    crawl_id: str | None = None
    headers: dict[str, str] = {}
    schema_version: int = SCHEMA_VERSION


def _header(headers: dict[str, bytes], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = headers.get(name)
        if value:
            return value.decode("utf-8", "replace")
    return None


def parse_raw_page(key: bytes | None, value: bytes | None, headers: dict[str, bytes]) -> RawPage:
    """Turn one pages-topic message into a RawPage; raises MalformedInput."""
    if not value:
        raise MalformedInput("the message has no value")
    if value[0] in _MSGPACK_MAP:
        try:
            return from_msgpack(value, RawPage)
        except (msgspec.DecodeError, msgspec.ValidationError, SchemaVersionError) as error:
            raise MalformedInput(f"msgpack value is not a RawPage: {error}") from None
    if value.lstrip()[:1] == b"{":
        try:
            page = from_json(value, _JsonRawPage)
        except (msgspec.DecodeError, msgspec.ValidationError, SchemaVersionError) as error:
            raise MalformedInput(f"JSON value is not a RawPage: {error}") from None
        return RawPage(
            url=page.url,
            html=page.html.encode("utf-8"),
            charset="utf-8",
            content_type=page.content_type,
            status=page.status,
            fetched_at=page.fetched_at,
            crawl_id=page.crawl_id,
            headers=page.headers,
        )
    url = _header(headers, URL_HEADERS) or (key.decode("utf-8", "replace") if key else None)
    if not url:
        raise MalformedInput("a bare HTML value needs the URL in the key or a 'url' header")
    content_type = _header(headers, ("content-type",))
    charset = _header(headers, ("charset",))
    return RawPage(url=url, html=value, content_type=content_type, charset=charset)
