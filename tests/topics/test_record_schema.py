"""The published record schema and the page-identity scheme."""

from __future__ import annotations

import json

import msgspec
import pytest

from dripstream.topics.records import PageRecord, canonical_url, document_id, page_id
from dripstream.topics.schema import SCHEMA_PATH, page_record_schema, render


def test_the_published_json_schema_is_the_one_the_record_type_generates() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render(), (
        "topics/schema/page-record.schema.json is out of date:"
        " run python -m dripstream.topics.schema"
    )


def test_a_record_as_the_records_topic_carries_it_validates_against_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    record = PageRecord(
        id=document_id("https://example.org/a"),
        version=page_id("https://example.org/a", b"<p>x</p>"),
        url="https://example.org/a",
        title="A",
        markdown="Text.",
        extractor="dripper:heuristic",
        language="en",
        fetched_at=1_714_564_800.0,
        crawl_id="CC-MAIN-2024-18",
        http_status=200,
    )
    jsonschema.validate(json.loads(msgspec.json.encode(record)), page_record_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"id": "x", "url": 3}, page_record_schema())


def test_the_document_id_is_one_per_canonical_url_and_the_version_follows_the_content() -> None:
    same = [
        "https://Example.ORG/a?b=2&a=1#top",
        "https://example.org:443/a?a=1&b=2",
        "HTTPS://example.org/a?a=1&b=2",
    ]
    assert {canonical_url(url) for url in same} == {"https://example.org/a?a=1&b=2"}
    assert len({document_id(url) for url in same}) == 1
    assert document_id("https://example.org/a") != document_id("https://example.org/b")
    url = "https://example.org/a"
    assert page_id(url, b"crawl 1") != page_id(url, b"crawl 2")
    assert page_id(url, b"crawl 1") == page_id(url, b"crawl 1")


def test_a_url_canonicalisation_cannot_read_is_kept_as_it_is() -> None:
    assert canonical_url("stdin:") == "stdin:"
    assert document_id("not a url") == document_id("not a url")
