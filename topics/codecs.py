"""Encoders and decoders: msgpack on internal topics, JSON on the output topic."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from dripstream.topics.records import SCHEMA_VERSION

T = TypeVar("T", bound=msgspec.Struct)

_msgpack_encoder = msgspec.msgpack.Encoder()
_json_encoder = msgspec.json.Encoder()


class SchemaVersionError(ValueError):
    """A record written with a schema version this code does not read."""


def _check_version(record: msgspec.Struct) -> None:
    version = getattr(record, "schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{type(record).__name__} has schema_version {version}, expected {SCHEMA_VERSION}"
        )


def to_msgpack(record: msgspec.Struct) -> bytes:
    return _msgpack_encoder.encode(record)


def from_msgpack(data: bytes, record_type: type[T]) -> T:
    """Decode and validate; raises msgspec.DecodeError / SchemaVersionError on bad input."""
    record = msgspec.msgpack.decode(data, type=record_type)
    _check_version(record)
    return record


def to_json(record: msgspec.Struct) -> bytes:
    return _json_encoder.encode(record)


def from_json(data: bytes | str, record_type: type[T]) -> T:
    record = msgspec.json.decode(data, type=record_type)
    _check_version(record)
    return record
