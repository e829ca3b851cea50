"""Records crossing topics: msgpack / JSON round trips, version refusal, page ids."""

from __future__ import annotations

import msgspec
import pytest

from dripstream.topics.codecs import (
    SchemaVersionError,
    from_json,
    from_msgpack,
    to_json,
    to_msgpack,
)
from dripstream.topics.records import (
    SCHEMA_VERSION,
    DeadLetter,
    FallbackRequest,
    LabelledPage,
    PageRecord,
    RawPage,
    SimplifiedPage,
    SourceRef,
    page_id,
)

RECORDS: list[msgspec.Struct] = [
    RawPage(
        url="https://example.com/ä?q=1",
        html=b"<html>\x00\xff\xfe caf\xc3\xa9</html>",
        content_type="text/html; charset=utf-8",
        charset="utf-8",
        status=200,
        fetched_at=1_700_000_000.25,
        crawl_id="crawl-7",
        headers={"content-type": "text/html", "x-empty": ""},
    ),
    SimplifiedPage(
        page_id="a" * 32,
        url="https://example.com/",
        title="Títle 标题",
        simplified_html='<p _item_id="1">x</p>',
        mapping_blocks=['<p _item_id="1">x</p>', '<h1 _item_id="2">y</h1>'],
        token_count=12,
        tokenizer="estimate:utf8-bytes/4",
        source=SourceRef("dripstream.pages", 3, 12345),
        timings_ms={"simplify": 1.5},
    ),
    LabelledPage(
        page_id="b" * 32,
        url="https://example.com/",
        title="",
        mapping_blocks=["<p>a</p>", "<p>b</p>"],
        labels=["main", "other"],
        labeller="heuristic",
        token_count=3,
        confidence=0.93,
        source=SourceRef("dripstream.pages", 0, 1),
        timings_ms={"simplify": 1.0, "label": 2.0},
    ),
    FallbackRequest(
        page_id="c" * 32,
        url="https://example.com/",
        title="t",
        reason="over_token_budget",
        source=SourceRef("dripstream.pages", 1, 2),
        stage="simplify",
        token_count=99999,
    ),
    PageRecord(
        id="d" * 32,
        url="https://example.com/",
        title="t",
        markdown="# Title\n\nText with `code` and $x^2$.",
        extractor="dripper:heuristic",
        language="en",
        fallback_reason=None,
        block_count=5,
        main_block_count=2,
        token_count=40,
        timings_ms={"reconstruct": 0.3},
    ),
    DeadLetter(
        stage="simplify",
        error_class="TooDeep",
        message="too deep",
        attempts=3,
        first_failure_at=1.0,
        last_failure_at=2.5,
        source_topic="pages",
        key=b"\x00key",
        payload=b"\x89PNG\r\n",
        payload_size=6,
        payload_sha256="0" * 64,
    ),
]
IDS = [type(record).__name__ for record in RECORDS]


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_msgpack_round_trip_gives_an_equal_record(record: msgspec.Struct) -> None:
    decoded = from_msgpack(to_msgpack(record), type(record))
    assert decoded == record
    assert type(decoded) is type(record)


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_json_round_trip_gives_an_equal_record(record: msgspec.Struct) -> None:
    data = to_json(record)
    assert from_json(data, type(record)) == record
    assert from_json(data.decode("utf-8"), type(record)) == record


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_every_record_carries_the_current_schema_version(record: msgspec.Struct) -> None:
    assert record.schema_version == SCHEMA_VERSION  # type: ignore[attr-defined]


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_a_record_of_another_schema_version_is_refused(record: msgspec.Struct) -> None:
    other = msgspec.structs.replace(record, schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(SchemaVersionError, match="schema_version"):
        from_msgpack(to_msgpack(other), type(record))
    with pytest.raises(SchemaVersionError):
        from_json(to_json(other), type(record))


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_truncated_msgpack_raises_decode_error(record: msgspec.Struct) -> None:
    data = to_msgpack(record)
    for cut in (1, len(data) // 2, len(data) - 1):
        with pytest.raises(msgspec.DecodeError):
            from_msgpack(data[:cut], type(record))


def test_msgpack_of_one_record_type_is_not_read_as_another() -> None:
    with pytest.raises(msgspec.ValidationError):
        from_msgpack(to_msgpack(RECORDS[0]), PageRecord)


def test_page_id_is_deterministic() -> None:
    first = page_id("https://example.com/a", b"<p>hello</p>")
    assert first == page_id("https://example.com/a", b"<p>hello</p>")
    assert len(first) == 32
    int(first, 16)  # hex digest


def test_page_id_differs_with_content_and_with_url() -> None:
    base = page_id("https://example.com/a", b"<p>hello</p>")
    assert page_id("https://example.com/a", b"<p>hello!</p>") != base
    assert page_id("https://example.com/b", b"<p>hello</p>") != base


def test_page_id_separates_url_from_content() -> None:
    # Moving bytes across the url/content boundary must not give the same id.
    assert page_id("https://e.com/a", b"b") != page_id("https://e.com/", b"ab")


def test_page_id_accepts_urls_with_lone_surrogates() -> None:
    assert page_id("https://e.com/\udc80", b"x") != page_id("https://e.com/", b"x")


def test_topics_keep_the_producer_s_codec_so_the_broker_never_recompresses() -> None:
    from dripstream.topics.catalog import topic_specs

    assert {spec.config()["compression.type"] for spec in topic_specs()} == {"producer"}
