"""The input adapter: what a crawler may put on the pages topic.

Accepted values: a msgpack ``RawPage``, a JSON ``RawPage`` (``html`` as a string), or a
bare HTML document with the URL in the message key or in a ``url`` header. Anything else
raises ``MalformedInput`` and becomes a dead letter.
"""

from __future__ import annotations

import msgspec

from topics.codecs import SchemaVersionError, from_json, from_msgpack
from topics.records import RawPage

URL_HEADERS = ("url", "x-url", "dripstream-url")
_MSGPACK_MAP = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))  # fixmap, map16, map32


class MalformedInput(ValueError):
    """A message on the pages topic that is neither a RawPage nor a usable bare page."""

    reason = "malformed_input"


def _json_field(info: msgspec.structs.FieldInfo) -> tuple:
    kind = str if info.name == "html" else info.type  # JSON carries the page as text
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


def parse_raw_page(key: bytes | None, value: bytes | None, headers: dict[str, bytes]) -> RawPage:
    """Turn one pages-topic message into a RawPage; raises MalformedInput."""
    if not value:
        raise MalformedInput("the message has no value")
    if value[0] in _MSGPACK_MAP:
        try:
            return from_msgpack(value, RawPage)
        except (
            msgspec.DecodeError,
            msgspec.ValidationError,
            SchemaVersionError,
            RecursionError,
        ) as error:
            raise MalformedInput(f"msgpack value is not a RawPage: {error}") from None
    if value.lstrip()[:1] == b"{":
        try:
            page = from_json(value, _JsonRawPage)
        except (
            msgspec.DecodeError,
            msgspec.ValidationError,
            SchemaVersionError,
            RecursionError,
        ) as error:
            raise MalformedInput(f"JSON value is not a RawPage: {error}") from None
        fields = msgspec.structs.asdict(page)
        # The text is re-encoded as UTF-8, whatever charset the crawler saw.
        fields.update(html=page.html.encode("utf-8"), charset="utf-8")
        return RawPage(**fields)
    url = _header(headers, URL_HEADERS) or (key.decode("utf-8", "replace") if key else None)
    if not url:
        raise MalformedInput("a bare HTML value needs the URL in the key or a 'url' header")
    content_type = _header(headers, ("content-type",))
    charset = _header(headers, ("charset",))
    return RawPage(url=url, html=value, content_type=content_type, charset=charset)
