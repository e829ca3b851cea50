"""Crawler output as crawlers write it: real WARC files (warcio) with encoded and chunked
bodies, header spellings, charsets, times, Scrapy-style items, WARC records and items as
Kafka values, and pages gone. Each form of docs/crawler-input.md is tested here."""

from __future__ import annotations

import base64
import gzip
import io
import json
import zlib
from pathlib import Path

import brotli
import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from dripstream.processors.errors import NotHtml, TooLarge
from dripstream.processors.ingest.crawl import dechunk, http_body, parse_time
from dripstream.processors.ingest.sources import SourceError, read_pages
from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.pipeline import (
    PipelineSettings,
    crawl_info,
    decoded_page,
    extract_pages,
)
from dripstream.processors.sinks import open_sink
from dripstream.streams.adapter import MalformedInput, parse_raw_page
from dripstream.topics.records import MAX_CLOCK_SKEW_S, RawPage, document_id

POLISH = (
    "<html><head><title>Zażółć gęślą jaźń</title></head><body><article>"
    "<h1>Zażółć gęślą jaźń</h1>"
    "<p>Pchnąć w tę łódź jeża lub ośm skrzyń fig. Żółta łódź płynie po rzece, "
    "a na brzegu stoi źrebię i patrzy na wodę.</p>"
    "<p>Każde zdanie ma polskie litery: ą, ę, ł, ń, ó, ś, ź, ż.</p>"
    "</article></body></html>"
)
BODY = POLISH.encode("iso-8859-2")
SETTINGS = PipelineSettings()


def chunked(data: bytes, size: int = 50) -> bytes:
    parts = [
        b"%x\r\n%s\r\n" % (len(data[i : i + size]), data[i : i + size])
        for i in range(0, len(data), size)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def write_warc(path: Path, responses: list[tuple[str, str, list[tuple[str, str]], bytes]]) -> None:
    """A gzipped WARC: a warcinfo record, then one response record per (url, status line,
    HTTP headers, body as sent on the wire)."""
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        info = writer.create_warcinfo_record(path.name, {"isPartOf": "CC-TEST-2024-18"})
        writer.write_record(info)
        for url, status, headers, body in responses:
            http = StatusAndHeaders(status, headers, "HTTP/1.1")
            record = writer.create_warc_record(
                url,
                "response",
                payload=io.BytesIO(body),
                http_headers=http,
                warc_headers_dict={"WARC-Date": "2024-05-01T12:00:00Z"},
            )
            writer.write_record(record)


def warc_record_bytes(url: str, headers: list[tuple[str, str]], body: bytes, gz: bool) -> bytes:
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=gz)
    http = StatusAndHeaders("200 OK", headers, "HTTP/1.1")
    writer.write_record(
        writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http)
    )
    return out.getvalue()


def extract(raws: list[RawPage]):
    return extract_pages(raws, HeuristicLabeller(), SETTINGS)


ENCODED = [
    (
        "gzip+chunked",
        [("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")],
        chunked(gzip.compress(BODY)),
    ),
    ("deflate", [("Content-Encoding", "deflate")], zlib.compress(BODY)),
    ("raw deflate", [("Content-Encoding", "deflate")], raw_deflate(BODY)),
    ("br", [("Content-Encoding", "br")], brotli.compress(BODY)),
    ("chunked", [("Transfer-Encoding", "chunked")], chunked(BODY)),
    ("gzip, br", [("Content-Encoding", "gzip, br")], brotli.compress(gzip.compress(BODY))),
    ("identity", [], BODY),
]


def test_warc_bodies_in_every_http_coding_become_the_same_record(tmp_path: Path) -> None:
    path = tmp_path / "crawl.warc.gz"
    content_type = ("CONTENT-TYPE", "text/html; charset=ISO-8859-2")
    write_warc(
        path,
        [
            (f"https://pl.example/{name.replace(' ', '-')}", "200 OK", [content_type, *extra], body)
            for name, extra, body in ENCODED
        ],
    )
    pages = list(read_pages(str(path)))
    assert len(pages) == len(ENCODED)
    outcomes = extract([page.raw for page in pages])
    for (name, _, _), outcome in zip(ENCODED, outcomes, strict=True):
        assert outcome.status == "ok", (name, outcome)
        record = outcome.record
        assert record.title == "Zażółć gęślą jaźń", name
        assert "Pchnąć w tę łódź jeża" in record.markdown, name
        assert (record.language, record.http_status, record.crawl_id) == (
            "pl",
            200,
            "CC-TEST-2024-18",
        )
        assert record.fetched_at == parse_time("2024-05-01T12:00:00Z")


def test_a_page_the_crawler_stored_decoded_under_its_encoding_header_is_kept_as_it_is() -> None:
    headers = {"content-encoding": "gzip", "transfer-encoding": "chunked"}
    assert http_body(b"<html><p>plain</p></html>", headers) == b"<html><p>plain</p></html>"
    assert dechunk(b"<html>") is None
    assert dechunk(b"5\r\nhello\r\n3\r\nwor") == b"hellowor"  # truncated: what arrived


def test_a_decompression_bomb_is_too_large_not_memory() -> None:
    bomb = gzip.compress(b"\0" * (4 * 1024 * 1024))
    with pytest.raises(TooLarge):
        http_body(bomb, {"content-encoding": "gzip"}, limit=1024 * 1024)
    with pytest.raises(TooLarge):
        http_body(brotli.compress(b"\0" * (4 * 1024 * 1024)), {"content-encoding": "br"}, 1 << 20)


def test_the_http_charset_beats_meta_and_a_byte_order_mark_beats_both() -> None:
    page = (
        '<html><head><meta charset="iso-8859-10"></head>'
        "<body><p>Zażółć gęślą jaźń</p></body></html>"
    )
    raw = RawPage(
        url="https://pl.example/",
        html=page.encode("iso-8859-2"),
        headers={"content-type": "text/html; charset=iso-8859-2"},
    )
    assert "Zażółć gęślą jaźń" in decoded_page(raw)
    bom = RawPage(
        url="https://pl.example/",
        html=b"\xef\xbb\xbf" + page.encode("utf-8"),
        headers={"content-type": "text/html; charset=iso-8859-2"},
    )
    assert "Zażółć gęślą jaźń" in decoded_page(bom)


def test_header_names_are_case_insensitive_in_every_form() -> None:
    pdf_types = [{"Content-Type": "application/pdf"}, {"CONTENT-TYPE": "application/pdf"}]
    for headers in pdf_types:
        value = json.dumps(
            {"url": "https://d.example/a.pdf", "html": "<html><p>x</p></html>", "headers": headers}
        ).encode()
        with pytest.raises(NotHtml):
            decoded_page(parse_raw_page(None, value, {}))
        with pytest.raises(NotHtml):  # a RawPage built elsewhere with a capitalised name
            decoded_page(RawPage(url="u", html=b"<html><p>x</p></html>", headers=headers))
    bare = parse_raw_page(
        None, b"<html><p>x</p></html>", {"URL": b"https://b.example/", "Content-Type": b"text/html"}
    )
    assert (bare.url, bare.content_type) == ("https://b.example/", "text/html")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1714564800, 1714564800.0),
        ("1714564800.5", 1714564800.5),
        (1714564800123, 1714564800.123),
        ("2024-05-01T12:00:00Z", 1714564800.0),
        ("2024-05-01T14:00:00+02:00", 1714564800.0),
        ("2024-05-01T12:00:00", 1714564800.0),
        ("Wed, 01 May 2024 12:00:00 GMT", 1714564800.0),
    ],
)
def test_fetch_times_are_read_as_epoch_or_iso_8601(value, seconds) -> None:
    assert parse_time(value) == pytest.approx(seconds)
    page = parse_raw_page(
        None, json.dumps({"url": "u", "html": "<p>x</p>", "fetched_at": value}).encode(), {}
    )
    assert page.fetched_at == pytest.approx(seconds)


def test_a_time_that_is_no_time_is_malformed_input_not_a_crash() -> None:
    with pytest.raises(MalformedInput):
        parse_raw_page(
            None, json.dumps({"url": "u", "html": "<p>x</p>", "fetched_at": "soon"}).encode(), {}
        )


def test_a_crawl_time_far_ahead_of_the_clock_is_clamped_and_kept_as_claimed() -> None:
    now = 1_800_000_000.0

    def info(fetched_at: float):
        return crawl_info(RawPage(url="u", html=b"", fetched_at=fetched_at), now=now)

    assert info(now + MAX_CLOCK_SKEW_S).fetched_at == now + MAX_CLOCK_SKEW_S  # within skew
    assert info(now + MAX_CLOCK_SKEW_S).claimed_fetched_at is None
    far = info(32_503_680_000.0)
    assert (far.fetched_at, far.claimed_fetched_at) == (now, 32_503_680_000.0)


def test_a_far_future_crawl_time_is_clamped_in_the_extracted_record() -> None:
    page = RawPage(
        url="https://f.example/a",
        html=b"<html><body><article><p>"
        + b"Words of a page. " * 30
        + b"</p></article></body></html>",
        status=200,
        fetched_at=32_503_680_000.0,
    )
    [outcome] = extract([page])
    assert outcome.record.claimed_fetched_at == 32_503_680_000.0
    assert outcome.record.fetched_at < 32_503_680_000.0


def scrapy_items() -> list[dict]:
    return [
        {
            "url": "https://s.example/text",
            "status": 200,
            "body": POLISH,
            "headers": {"Content-Type": ["text/html; charset=iso-8859-2"]},
            "fetched_at": "2024-05-01T12:00:00Z",
            "crawl_id": "scrapy-1",
        },
        {
            "url": "https://s.example/base64",
            "status": 200,
            "body_encoding": "base64",
            "body": base64.b64encode(gzip.compress(BODY)).decode(),
            "headers": {
                "Content-Type": ["text/html; charset=iso-8859-2"],
                "Content-Encoding": ["gzip"],
            },
        },
    ]


def test_scrapy_items_in_a_jsonl_file_become_records(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in scrapy_items()), encoding="utf-8")
    outcomes = extract([page.raw for page in read_pages(str(path))])
    assert [o.status for o in outcomes] == ["ok", "ok"]
    for outcome in outcomes:
        assert "Pchnąć w tę łódź jeża" in outcome.record.markdown
        assert outcome.record.http_status == 200 and outcome.record.language == "pl"
    assert outcomes[0].record.crawl_id == "scrapy-1"
    assert outcomes[0].record.fetched_at == 1714564800.0


def test_scrapy_items_and_warc_records_as_kafka_values_become_pages() -> None:
    for item in scrapy_items():
        page = parse_raw_page(None, json.dumps(item).encode(), {})
        assert "Pchnąć w tę łódź" in decoded_page(page)
    headers = [
        ("Content-Type", "text/html; charset=iso-8859-2"),
        ("Content-Encoding", "gzip"),
        ("Transfer-Encoding", "chunked"),
    ]
    for gz in (False, True):
        value = warc_record_bytes("https://w.example/", headers, chunked(gzip.compress(BODY)), gz)
        page = parse_raw_page(b"https://w.example/", value, {})
        assert (page.url, page.status) == ("https://w.example/", 200)
        text = decoded_page(page)
        assert "Pchnąć w tę łódź" in text and "WARC-Type" not in text


def test_a_warc_record_that_is_not_a_response_is_malformed_input() -> None:
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=False)
    http = StatusAndHeaders("GET / HTTP/1.1", [("Host", "w.example")], is_http_request=True)
    writer.write_record(
        writer.create_warc_record(
            "https://w.example/", "request", payload=io.BytesIO(b""), http_headers=http
        )
    )
    with pytest.raises(MalformedInput, match="request"):
        parse_raw_page(None, out.getvalue(), {})


def test_an_undeclared_or_bad_base64_body_is_not_guessed() -> None:
    encoded = base64.b64encode(POLISH.encode()).decode()
    page = parse_raw_page(None, json.dumps({"url": "u", "body": encoded}).encode(), {})
    with pytest.raises(NotHtml):  # text that is base64, not a page
        decoded_page(page)
    with pytest.raises(MalformedInput, match="base64"):
        parse_raw_page(
            None, json.dumps({"url": "u", "body": "!!", "body_encoding": "base64"}).encode(), {}
        )


def test_a_bad_row_in_a_jsonl_file_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"url": "u", "html": "<p>x</p>", "status": "teapot"}) + "\n")
    with pytest.raises(SourceError, match="row 1"):
        list(read_pages(str(path)))


def test_a_target_uri_in_angle_brackets_as_wget_writes_it_is_the_pages_url(
    tmp_path: Path,
) -> None:
    body = (
        b"<html><body><article><h1>A page</h1><p>Words of a sentence, then"
        b" <a href='/next'>a relative link</a> inside it.</p></article></body></html>"
    )
    path = tmp_path / "wget.warc.gz"
    write_warc(
        path, [("<https://w.example/a/page.html>", "200 OK", [("Content-Type", "text/html")], body)]
    )
    (page,) = list(read_pages(str(path)))
    assert page.raw.url == "https://w.example/a/page.html"
    value = warc_record_bytes("<https://w.example/a/page.html>", [], body, gz=False)
    from_kafka = parse_raw_page(b"key", value, {})
    assert from_kafka.url == "https://w.example/a/page.html"
    (outcome,) = extract([page.raw])
    assert outcome.record.id == document_id("https://w.example/a/page.html")
    assert "[a relative link](https://w.example/next)" in outcome.record.markdown


def test_pages_gone_are_records_marked_gone_that_document_sinks_skip(tmp_path: Path) -> None:
    path = tmp_path / "crawl.warc.gz"
    write_warc(
        path,
        [
            (
                "https://g.example/a",
                "410 Gone",
                [("Content-Type", "text/html")],
                b"<html><p>gone</p></html>",
            ),
            ("https://g.example/b", "404 Not Found", [], b""),
            (
                "https://g.example/c.pdf",
                "200 OK",
                [("Content-Type", "application/pdf")],
                b"%PDF-1.4",
            ),
        ],
    )
    pages = list(read_pages(str(path)))
    assert [page.raw.url for page in pages] == ["https://g.example/a", "https://g.example/b"]
    outcomes = extract([page.raw for page in pages])
    assert [o.status for o in outcomes] == ["gone", "gone"]
    assert all(o.record.gone and o.record.markdown == "" for o in outcomes)
    assert outcomes[0].record.id == document_id("https://G.example/a#x")
    records, docs = tmp_path / "records.jsonl", tmp_path / "docs.jsonl"
    for spec in (str(records), f"datatrove:{docs}"):
        sink = open_sink(spec)
        for page, outcome in zip(pages, outcomes, strict=True):
            sink.write(outcome, page.id)
        sink.close()
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(line["status"], line["http_status"]) for line in lines] == [
        ("gone", 410),
        ("gone", 404),
    ]
    assert docs.read_text() == ""


@pytest.mark.parametrize("status", [301, 302, 304, 403, 429, 500, 503])
def test_redirect_and_error_responses_are_classified_not_extracted(status: int) -> None:
    body = b"<html><body><h1>Service unavailable</h1><p>Please try again later.</p></body></html>"
    [outcome] = extract([RawPage(url="https://s.example/a", html=body, status=status)])
    assert outcome.status == "error" and outcome.error_class == "ErrorStatus"
    assert str(status) in (outcome.message or "")


def test_a_success_status_is_extracted() -> None:
    [outcome] = extract([RawPage(url="https://s.example/a", html=POLISH.encode(), status=200)])
    assert outcome.status in ("ok", "fallback") and "Pchnąć" in outcome.record.markdown
