"""WARCs as the writers people use write them: a GNU wget crawl of a loopback server
(gzip, chunked; revisits from its dedup), warcio's writer, and records built to the
published layouts of Heritrix, Common Crawl and StormCrawler. Each page must come out with
its URL, its document id, status, fetch time and crawl id, every link absolute and no
WARC or HTTP header text in its Markdown; records that are not pages are counted, never
dropped in silence, and a record whose length lies is flagged, never a crash."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from crawl_helpers import GONE, PAGES, page_html, site, site_urls, wget_crawl
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from dripstream.processors.ingest.crawl import parse_time
from dripstream.processors.ingest.sources import InputPage, read_pages
from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.pipeline import Outcome, PipelineSettings, extract_pages
from dripstream.streams.adapter import MalformedInput, parse_raw_page
from dripstream.topics.records import document_id

LINK = re.compile(r"\]\(\s*<?([^)\s>]*)")
ABSOLUTE = re.compile(r"^(?:https?|mailto|tel|ftp):", re.IGNORECASE)
HEADER_TEXT = re.compile(
    r"WARC/1\.|WARC-[A-Z]|HTTP/1\.[01]|Content-(?:Type|Length|Encoding)\s*:|Transfer-Encoding",
    re.IGNORECASE,
)
HOST = "harbour.example"
DATE = "2024-05-01T12:00:00Z"


def read(path: Path) -> tuple[list[InputPage], Counter[str]]:
    skipped: Counter[str] = Counter()
    return list(read_pages(str(path), skipped=skipped)), skipped


def extract(pages: Sequence[InputPage]) -> list[Outcome]:
    return extract_pages([page.raw for page in pages], HeuristicLabeller(), PipelineSettings())


def check_records(
    outcomes: Sequence[Outcome],
    expected: dict[str, tuple[int, str | None]],
    fetched: tuple[float, float],
) -> None:
    """Every outcome a record of an expected URL: its id, status, crawl id, a fetch time
    within ``fetched``, every Markdown link absolute, no header text."""
    assert outcomes
    for outcome in outcomes:
        record = outcome.record
        assert record is not None, outcome
        assert record.url in expected, record.url
        status, crawl_id = expected[record.url]
        assert record.id == document_id(record.url)
        assert (record.http_status, record.crawl_id) == (status, crawl_id), record.url
        assert fetched[0] <= record.fetched_at <= fetched[1], record.url
        if status == 200:
            assert outcome.status in ("ok", "fallback"), outcome
            assert record.title and len(record.markdown) > 80, record.url
        else:
            assert outcome.status == "gone" and record.markdown == ""
        links = LINK.findall(record.markdown)
        assert all(ABSOLUTE.match(link) for link in links), (record.url, links)
        assert not HEADER_TEXT.search(record.markdown), record.markdown


def site_expected(base: str, crawl_id: str | None = None) -> dict[str, tuple[int, str | None]]:
    expected: dict[str, tuple[int, str | None]] = {base + path: (200, crawl_id) for path in PAGES}
    expected[base + GONE] = (404, crawl_id)
    return expected


# --- GNU wget -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wget_warcs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path, float, float]:
    """A wget crawl of the site, and a second one deduplicated against the first
    (``--warc-dedup``: revisit records referring to the first WARC's responses)."""
    folder = tmp_path_factory.mktemp("wget")
    started = time.time() - 1
    with site() as base:
        first = wget_crawl(folder, "crawl", site_urls(base), "--warc-cdx")
        second = wget_crawl(folder, "again", site_urls(base), "--warc-dedup=crawl.cdx")
    return base, first, second, started, time.time() + 1


def test_a_wget_crawl_of_a_gzip_chunked_site_gives_each_page_its_url_and_absolute_links(
    wget_warcs,
) -> None:
    base, first, _, started, ended = wget_warcs
    pages, skipped = read(first)
    assert sorted(page.raw.url for page in pages) == sorted(site_expected(base))
    assert all(page.raw.headers.get("content-encoding") == "gzip" for page in pages)
    assert all("chunked" in page.raw.headers.get("transfer-encoding", "") for page in pages)
    assert skipped == Counter({"not html": 1})  # the image; request and metadata uncounted
    outcomes = extract(pages)
    check_records(outcomes, site_expected(base), (started, ended))
    by_url = {outcome.record.url: outcome.record.markdown for outcome in outcomes}
    index = by_url[base + "/index.html"]
    assert f"({base}/news/tides.html)" in index  # relative
    assert f"({base}/ships/list.html)" in index  # root-relative
    assert f"({base}/contact.html)" in index  # protocol-relative
    assert f"({base}/index.html)" in by_url[base + "/news/tides.html"]  # ../


def test_wget_revisits_resolve_within_a_file_and_are_counted_without_their_response(
    wget_warcs, tmp_path: Path
) -> None:
    base, first, second, started, ended = wget_warcs
    pages, skipped = read(second)
    assert pages == [] and skipped == Counter({"revisit": len(site_urls(base))})

    both = tmp_path / "both.warc.gz"  # gzip members concatenated: one WARC
    both.write_bytes(first.read_bytes() + second.read_bytes())
    pages, skipped = read(both)
    assert skipped == Counter({"not html": 2})
    assert len(pages) == 2 * len(site_expected(base))
    revisited = pages[len(pages) // 2 :]
    assert [page.raw.url for page in revisited] == [page.raw.url for page in pages[:5]]
    assert all(page.raw.truncated is None for page in revisited)  # the payload is whole
    outcomes = extract(pages)
    check_records(outcomes, site_expected(base), (started, ended))
    half = len(outcomes) // 2
    for earlier, later in zip(outcomes[:half], outcomes[half:], strict=True):
        assert later.record.id == earlier.record.id
        assert later.record.markdown == earlier.record.markdown


def test_extract_reports_the_records_it_skipped(wget_warcs, tmp_path: Path, capsys) -> None:
    from dripstream.streams.cli import main

    base, first, second, _, _ = wget_warcs
    out = tmp_path / "records.jsonl"
    code = main(["extract", str(first), str(second), "-o", str(out), "--quiet", "--no-sandbox"])
    assert code == 0
    summary = capsys.readouterr().err.splitlines()
    assert "skipped: 6 revisit, 1 not html" in summary
    assert len(out.read_text().splitlines()) == len(site_expected(base))


def test_a_wget_crawl_extracted_to_datatrove_jsonl_and_parquet_loads_with_their_readers(
    wget_warcs, tmp_path: Path
) -> None:
    import datasets
    from datatrove.pipeline.readers import JsonlReader, ParquetReader

    from dripstream.streams.cli import main

    base, first, _, _, _ = wget_warcs
    for spec in ("datatrove:docs.jsonl.gz", "parquet:docs.parquet"):
        kind, _, name = spec.partition(":")
        argv = ["extract", str(first), "-o", f"{kind}:{tmp_path / name}", "--quiet"]
        assert main([*argv, "--no-sandbox"]) == 0
    pages = {base + path for path in PAGES}  # the page gone is no document
    for reader in (
        JsonlReader(str(tmp_path), glob_pattern="docs.jsonl.gz"),
        ParquetReader(str(tmp_path), glob_pattern="docs.parquet"),
    ):
        documents = list(reader.run())
        assert {doc.metadata["url"] for doc in documents} == pages
        assert all(doc.id == document_id(doc.metadata["url"]) for doc in documents)
        assert all(ABSOLUTE.match(link) for doc in documents for link in LINK.findall(doc.text))
    for builder, name in (("json", "docs.jsonl.gz"), ("parquet", "docs.parquet")):
        rows = datasets.load_dataset(builder, data_files=str(tmp_path / name), split="train")
        assert len(rows) == len(pages) and set(rows["id"]) == {document_id(u) for u in pages}


# --- warcio ------------------------------------------------------------------------------


def chunked(data: bytes, size: int = 100) -> bytes:
    parts = [
        b"%x\r\n%s\r\n" % (len(data[i : i + size]), data[i : i + size])
        for i in range(0, len(data), size)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


def test_warcio_records_of_every_kind(tmp_path: Path) -> None:
    base = f"https://{HOST}"
    path = tmp_path / "warcio.warc.gz"
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        writer.write_record(writer.create_warcinfo_record(path.name, {"isPartOf": "warcio-crawl"}))
        digests = {}
        for number, route in enumerate(PAGES):
            url = base + route
            body = page_html(route, HOST)
            request = StatusAndHeaders(
                f"GET {route} HTTP/1.1", [("Host", HOST)], is_http_request=True
            )
            writer.write_record(
                writer.create_warc_record(
                    url, "request", payload=io.BytesIO(b""), http_headers=request
                )
            )
            headers = [("Content-Type", "text/html; charset=utf-8")]
            wire = body
            if number % 2 == 0:
                headers += [("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]
                wire = chunked(gzip.compress(body, mtime=0))
            response = writer.create_warc_record(
                url,
                "response",
                payload=io.BytesIO(wire),
                http_headers=StatusAndHeaders("200 OK", headers, "HTTP/1.1"),
                warc_headers_dict={"WARC-Date": DATE},
            )
            digests[url] = response.rec_headers.get_header("WARC-Payload-Digest")
            writer.write_record(response)
            metadata = writer.create_warc_record(
                url,
                "metadata",
                payload=io.BytesIO(b"fetchTimeMs: 12\r\n"),
                warc_content_type="application/warc-fields",
            )
            writer.write_record(metadata)
        revisit_url = base + "/index.html"
        revisit = writer.create_revisit_record(
            revisit_url,
            digest=digests[revisit_url],
            refers_to_uri=revisit_url,
            refers_to_date=DATE,
            http_headers=StatusAndHeaders(
                "200 OK", [("Content-Type", "text/html; charset=utf-8")], "HTTP/1.1"
            ),
            warc_headers_dict={"WARC-Date": "2024-06-01T12:00:00Z"},
        )
        writer.write_record(revisit)
        cut = page_html("/contact.html", HOST)[:-120]  # the crawler stopped reading
        writer.write_record(
            writer.create_warc_record(
                base + "/slow.html",
                "response",
                payload=io.BytesIO(cut),
                http_headers=StatusAndHeaders(
                    "200 OK",
                    [("Content-Type", "text/html"), ("Content-Length", "9999")],
                    "HTTP/1.1",
                ),
                warc_headers_dict={"WARC-Date": DATE, "WARC-Truncated": "time"},
            )
        )
        segment_http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], "HTTP/1.1")
        for record_type, number in (("response", "1"), ("continuation", "2")):
            writer.write_record(
                writer.create_warc_record(
                    base + "/huge.html",
                    record_type,
                    payload=io.BytesIO(b"<html><p>part</p>"),
                    http_headers=segment_http if record_type == "response" else None,
                    warc_headers_dict={"WARC-Date": DATE, "WARC-Segment-Number": number},
                )
            )
    pages, skipped = read(path)
    assert skipped == Counter({"segmented": 1, "continuation": 1})
    assert [page.raw.url for page in pages] == [
        *(base + route for route in PAGES),
        revisit_url,
        base + "/slow.html",
    ]
    assert [page.raw.truncated for page in pages] == [None] * 5 + ["time"]
    outcomes = extract(pages)
    expected = {base + route: (200, "warcio-crawl") for route in (*PAGES, "/slow.html")}
    when = parse_time(DATE)
    check_records(outcomes[:4] + outcomes[5:], expected, (when, when))
    check_records(outcomes[4:5], expected, (when + 31 * 86400, when + 31 * 86400))
    assert outcomes[4].record.markdown == outcomes[0].record.markdown
    assert outcomes[5].record.truncated == "time" and outcomes[0].record.truncated is None
    assert "harbour master" in outcomes[5].record.markdown


# --- records built to the writers' published layouts ------------------------------------


def payload_digest(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def warc_record(version: str, headers: list[tuple[str, str]], block: bytes) -> bytes:
    """One WARC record: the version line, the headers, Content-Length, the block."""
    lines = [version, *(f"{name}: {value}" for name, value in headers)]
    lines.append(f"Content-Length: {len(block)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + block + b"\r\n\r\n"


def http_response(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    head = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return f"HTTP/1.1 {status}\r\n{head}\r\n".encode() + body


def write_members(path: Path, records: list[bytes]) -> None:
    """Each record its own gzip member, as every one of these writers does."""
    path.write_bytes(b"".join(gzip.compress(record, mtime=0) for record in records))


def heritrix_records(base: str) -> list[bytes]:
    """Heritrix 3: warcinfo, dns: response, request / response / metadata per URL with
    WARC-IP-Address, WARC-Payload-Digest and WARC-Concurrent-To, and a revisit of the same
    payload at another URL (WARC-Refers-To-Target-URI, WARC-Refers-To-Date)."""
    info = (
        b"software: Heritrix/3.4.0-20220727 http://crawler.archive.org\r\n"
        b"ip: 10.0.0.2\r\nhostname: crawler.example\r\nformat: WARC File Format 1.0\r\n"
        b"conformsTo: http://bibnum.bnf.fr/WARC/WARC_ISO_28500_version1_latestdraft.pdf\r\n"
        b"isPartOf: harbour-weekly\r\ndescription: a crawl of the harbour site\r\n"
        b"robots: obey\r\nhttp-header-user-agent: Mozilla/5.0 (compatible; heritrix/3.4.0)\r\n"
    )
    records = [
        warc_record(
            "WARC/1.0",
            [
                ("WARC-Type", "warcinfo"),
                ("WARC-Date", DATE),
                ("WARC-Filename", "WEB-20240501120000-00000.warc.gz"),
                ("WARC-Record-ID", "<urn:uuid:00000000-0000-4000-8000-000000000001>"),
                ("Content-Type", "application/warc-fields"),
            ],
            info,
        ),
        warc_record(
            "WARC/1.0",
            [
                ("WARC-Type", "response"),
                ("WARC-Target-URI", f"dns:{HOST}"),
                ("WARC-Date", DATE),
                ("WARC-IP-Address", "10.0.0.53"),
                ("WARC-Record-ID", "<urn:uuid:00000000-0000-4000-8000-000000000002>"),
                ("Content-Type", "text/dns"),
            ],
            f"20240501120000\n{HOST}.\t300\tIN\tA\t10.0.0.1\n".encode(),
        ),
    ]
    for number, route in enumerate([*PAGES, GONE]):
        url = base + route
        body = page_html(route, HOST) if route in PAGES else b"<html><p>gone</p></html>"
        status = "200 OK" if route in PAGES else "404 Not Found"
        wire = gzip.compress(body, mtime=0)
        response_id = f"<urn:uuid:00000000-0000-4000-8000-1000000000{number:02d}>"
        records.append(
            warc_record(
                "WARC/1.0",
                [
                    ("WARC-Type", "response"),
                    ("WARC-Target-URI", url),
                    ("WARC-Date", DATE),
                    ("WARC-Payload-Digest", payload_digest(wire)),
                    ("WARC-IP-Address", "10.0.0.1"),
                    ("WARC-Record-ID", response_id),
                    ("Content-Type", "application/http; msgtype=response"),
                ],
                http_response(
                    status,
                    [
                        ("Content-Type", "text/html;charset=UTF-8"),
                        ("Content-Encoding", "gzip"),
                        ("Content-Length", str(len(wire))),
                    ],
                    wire,
                ),
            )
        )
        for kind, content_type, block in (
            (
                "request",
                "application/http; msgtype=request",
                f"GET {route} HTTP/1.0\r\nHost: {HOST}\r\n\r\n".encode(),
            ),
            (
                "metadata",
                "application/warc-fields",
                f"seed: \r\nhopsFromSeed: L\r\nsourceTag: {base}/\r\n"
                f"fetchTimeMs: 23\r\noutlink: {base}/index.html L a/@href\r\n".encode(),
            ),
        ):
            records.append(
                warc_record(
                    "WARC/1.0",
                    [
                        ("WARC-Type", kind),
                        ("WARC-Target-URI", url),
                        ("WARC-Date", DATE),
                        ("WARC-Concurrent-To", response_id),
                        ("WARC-Record-ID", f"<urn:uuid:0000-2{kind[0]}{number}>"),
                        ("Content-Type", content_type),
                    ],
                    block,
                )
            )
    original = base + "/news/tides.html"
    wire = gzip.compress(page_html("/news/tides.html", HOST), mtime=0)
    records.append(
        warc_record(
            "WARC/1.0",
            [
                ("WARC-Type", "revisit"),
                ("WARC-Target-URI", base + "/mirror/tides.html"),
                ("WARC-Date", "2024-05-02T12:00:00Z"),
                ("WARC-Payload-Digest", payload_digest(wire)),
                ("WARC-IP-Address", "10.0.0.1"),
                (
                    "WARC-Profile",
                    "http://netpreserve.org/warc/1.0/revisit/identical-payload-digest",
                ),
                ("WARC-Truncated", "length"),
                ("WARC-Refers-To-Target-URI", original),
                ("WARC-Refers-To-Date", DATE),
                ("WARC-Record-ID", "<urn:uuid:00000000-0000-4000-8000-000000000099>"),
                ("Content-Type", "application/http; msgtype=response"),
            ],
            http_response("200 OK", [("Content-Type", "text/html;charset=UTF-8")], b""),
        )
    )
    return records


def test_heritrix_records(tmp_path: Path) -> None:
    base = f"https://{HOST}"
    path = tmp_path / "WEB-20240501120000-00000.warc.gz"
    write_members(path, heritrix_records(base))
    pages, skipped = read(path)
    assert skipped == Counter({"not http": 1})  # the dns: record
    mirror = base + "/mirror/tides.html"
    assert [page.raw.url for page in pages] == [*(base + r for r in (*PAGES, GONE)), mirror]
    outcomes = extract(pages)
    expected = {**site_expected(base, "harbour-weekly"), mirror: (200, "harbour-weekly")}
    when = parse_time(DATE)
    check_records(outcomes, expected, (when, when + 86400))
    revisit = outcomes[-1].record
    assert revisit.fetched_at == when + 86400 and revisit.truncated is None
    assert "full moon in March" in revisit.markdown
    assert f"({base}/index.html)" in revisit.markdown  # ../ resolved against the mirror


def common_crawl_records(base: str) -> list[bytes]:
    """Common Crawl: WARC/1.0, warcinfo with ``isPartOf: CC-MAIN-...``, request / response /
    metadata per URL with WARC-Warcinfo-ID and WARC-Identified-Payload-Type; bodies stored
    decoded (the original codings kept as X-Crawler-* headers), one cut at the crawler's
    size limit (WARC-Truncated: length)."""
    info_id = "<urn:uuid:c0000000-0000-4000-8000-000000000000>"
    info = (
        b"isPartOf: CC-MAIN-2024-18\r\npublisher: Common Crawl\r\n"
        b"description: Wide crawl of the web for April 2024\r\noperator: Common Crawl Admin\r\n"
        b"hostname: ip-10-67-67-1.ec2.internal\r\nsoftware: Apache Nutch 1.20\r\n"
        b"robots: checked via crawler-commons 1.5\r\nformat: WARC File Format 1.1\r\n"
    )
    records = [
        warc_record(
            "WARC/1.0",
            [
                ("WARC-Type", "warcinfo"),
                ("WARC-Date", DATE),
                ("WARC-Record-ID", info_id),
                ("WARC-Filename", "CC-MAIN-20240501120000-20240501150000-00000.warc.gz"),
                ("Content-Type", "application/warc-fields"),
            ],
            info,
        )
    ]
    for number, route in enumerate([*PAGES, "/long.html"]):
        url = base + route
        body = page_html(route if route in PAGES else "/index.html", HOST)
        truncated = route == "/long.html"
        stored = body[: len(body) - 150] if truncated else body
        headers = [
            ("Date", "Wed, 01 May 2024 12:00:00 GMT"),
            ("Content-Type", "text/html; charset=UTF-8"),
            ("X-Crawler-Content-Encoding", "gzip"),
            ("X-Crawler-Transfer-Encoding", "chunked"),
            ("Content-Length", str(len(stored))),
        ]
        warc_headers = [
            ("WARC-Type", "response"),
            ("WARC-Date", DATE),
            ("WARC-Record-ID", f"<urn:uuid:c0000000-0000-4000-8000-1000000000{number:02d}>"),
            ("WARC-Warcinfo-ID", info_id),
            ("WARC-IP-Address", "10.0.0.1"),
            ("WARC-Target-URI", url),
            ("WARC-Payload-Digest", payload_digest(stored)),
            ("WARC-Identified-Payload-Type", "text/html"),
            ("Content-Type", "application/http; msgtype=response"),
        ]
        if truncated:
            warc_headers.append(("WARC-Truncated", "length"))
        request = warc_record(
            "WARC/1.0",
            [
                ("WARC-Type", "request"),
                ("WARC-Date", DATE),
                ("WARC-Warcinfo-ID", info_id),
                ("WARC-Target-URI", url),
                ("Content-Type", "application/http; msgtype=request"),
            ],
            f"GET {route} HTTP/1.1\r\nHost: {HOST}\r\nAccept-Encoding: br,gzip\r\n\r\n".encode(),
        )
        metadata = warc_record(
            "WARC/1.0",
            [
                ("WARC-Type", "metadata"),
                ("WARC-Date", DATE),
                ("WARC-Warcinfo-ID", info_id),
                ("WARC-Target-URI", url),
                ("Content-Type", "application/warc-fields"),
            ],
            b"fetchTimeMs: 161\r\ncharset-detected: UTF-8\r\nlanguages-cld2: {}\r\n",
        )
        response = warc_record("WARC/1.0", warc_headers, http_response("200 OK", headers, stored))
        records += [request, response, metadata]
    return records


def test_common_crawl_records(tmp_path: Path) -> None:
    base = f"https://{HOST}"
    path = tmp_path / "CC-MAIN-20240501120000-20240501150000-00000.warc.gz"
    write_members(path, common_crawl_records(base))
    pages, skipped = read(path)
    assert skipped == Counter()
    assert [page.raw.truncated for page in pages] == [None] * len(PAGES) + ["length"]
    outcomes = extract(pages)
    expected = {base + r: (200, "CC-MAIN-2024-18") for r in (*PAGES, "/long.html")}
    when = parse_time(DATE)
    check_records(outcomes, expected, (when, when))
    assert outcomes[-1].record.truncated == "length"
    assert "pilot boats leave" in outcomes[-1].record.markdown


def stormcrawler_records(base: str, http_length: bool = True) -> list[bytes]:
    """StormCrawler's WARC module: WARC/1.0 response records, no warcinfo, the body as
    fetched (gzip) with the headers it came with (``http_length``: its Content-Length)."""
    records = []
    for route in PAGES:
        wire = gzip.compress(page_html(route, HOST), mtime=0)
        length = [("Content-Length", str(len(wire)))] if http_length else []
        records.append(
            warc_record(
                "WARC/1.0",
                [
                    ("WARC-Record-ID", f"<urn:uuid:{hashlib.md5(route.encode()).hexdigest()}>"),
                    ("Content-Type", "application/http; msgtype=response"),
                    ("WARC-Date", DATE),
                    ("WARC-Type", "response"),
                    ("WARC-Target-URI", base + route),
                    ("WARC-IP-Address", "10.0.0.1"),
                    ("WARC-Payload-Digest", payload_digest(wire)),
                ],
                http_response(
                    "200 OK",
                    [
                        ("Content-Type", "text/html; charset=utf-8"),
                        ("Content-Encoding", "gzip"),
                        *length,
                    ],
                    wire,
                ),
            )
        )
    return records


def test_stormcrawler_records_without_a_warcinfo(tmp_path: Path) -> None:
    base = f"https://{HOST}"
    path = tmp_path / "crawl-20240501120000-00000.warc.gz"
    write_members(path, stormcrawler_records(base))
    pages, skipped = read(path)
    assert skipped == Counter() and len(pages) == len(PAGES)
    when = parse_time(DATE)
    check_records(extract(pages), {base + r: (200, None) for r in PAGES}, (when, when))


# --- lengths that lie ---------------------------------------------------------------------


def lying_record(url: str, http_length: int, warc_delta: int) -> bytes:
    """A response whose HTTP Content-Length is ``http_length`` and whose WARC
    Content-Length is off by ``warc_delta`` bytes from the block it holds."""
    body = page_html("/contact.html", HOST)
    block = http_response(
        "200 OK",
        [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(http_length))],
        body,
    )
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Record-ID: <urn:uuid:{hashlib.md5(url.encode()).hexdigest()}>\r\n"
        f"WARC-Date: {DATE}\r\nWARC-Target-URI: {url}\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(block) + warc_delta}\r\n\r\n"
    )
    return head.encode() + block + b"\r\n\r\n"


BODY_LENGTH = len(page_html("/contact.html", HOST))


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize(
    ("http_length", "warc_delta"),
    [
        (BODY_LENGTH + 500, 0),  # HTTP says more than came
        (BODY_LENGTH - 100, 0),  # HTTP says less than is stored
        (BODY_LENGTH, 300),  # the WARC length runs into the next record
        (BODY_LENGTH, -40),  # the WARC length stops before the record ends
    ],
    ids=["http-longer", "http-shorter", "warc-longer", "warc-shorter"],
)
def test_a_record_whose_length_lies_is_flagged_and_the_next_records_are_read(
    tmp_path: Path, gz: bool, http_length: int, warc_delta: int
) -> None:
    base = f"https://{HOST}"
    records = [
        *stormcrawler_records(base)[:1],
        lying_record(base + "/lies.html", http_length, warc_delta),
        *stormcrawler_records(base)[1:],
    ]
    path = tmp_path / ("lies.warc.gz" if gz else "lies.warc")
    if gz:
        write_members(path, records)
    else:
        path.write_bytes(b"".join(records))
    pages, skipped = read(path)
    urls = [page.raw.url for page in pages]
    routes = list(PAGES)
    assert urls == [base + routes[0], base + "/lies.html", *(base + r for r in routes[1:])]
    lying = pages[1].raw
    assert lying.truncated == ("length" if http_length > BODY_LENGTH or warc_delta else None)
    assert skipped == (Counter({"unreadable": 1}) if warc_delta else Counter())
    when = parse_time(DATE)
    outcomes = extract(pages)
    check_records(outcomes, {base + r: (200, None) for r in (*PAGES, "/lies.html")}, (when, when))
    assert "harbour master" in outcomes[1].record.markdown or warc_delta < 0


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_warc_that_ends_inside_a_record_flags_that_page_only(tmp_path: Path, gz: bool) -> None:
    base = f"https://{HOST}"
    records = stormcrawler_records(base, http_length=False)  # only the WARC length tells
    if gz:
        data = b"".join(gzip.compress(record, mtime=0) for record in records)
        data = data[:-100]
    else:
        data = b"".join(records)[:-200]
    path = tmp_path / ("cut.warc.gz" if gz else "cut.warc")
    path.write_bytes(data)
    pages, _ = read(path)
    assert [page.raw.url for page in pages] == [base + route for route in PAGES]
    assert [page.raw.truncated for page in pages] == [None] * (len(PAGES) - 1) + ["length"]
    [last] = extract(pages[-1:])
    assert last.record.truncated == "length" and not HEADER_TEXT.search(last.record.markdown)


# --- WARC records as Kafka values ----------------------------------------------------------


def test_warc_records_as_kafka_values_truncated_revisit_segment_and_lying_length() -> None:
    base = f"https://{HOST}"
    heritrix = heritrix_records(base)
    revisit = heritrix[-1]
    with pytest.raises(MalformedInput, match="revisit"):
        parse_raw_page(None, revisit, {})
    metadata = next(record for record in heritrix if b"WARC-Type: metadata" in record)
    with pytest.raises(MalformedInput, match="metadata"):
        parse_raw_page(None, gzip.compress(metadata), {})
    segmented = stormcrawler_records(base)[0].replace(
        b"WARC-Type: response", b"WARC-Type: response\r\nWARC-Segment-Number: 1"
    )
    with pytest.raises(MalformedInput, match="segmented"):
        parse_raw_page(None, segmented, {})
    continuation = segmented.replace(b"WARC-Type: response", b"WARC-Type: continuation")
    with pytest.raises(MalformedInput, match="continuation"):
        parse_raw_page(None, continuation, {})

    truncated = common_crawl_records(base)[-2]
    page = parse_raw_page(None, truncated, {})
    assert (page.url, page.truncated) == (base + "/long.html", "length")

    for http_length, warc_delta in ((BODY_LENGTH + 500, 0), (BODY_LENGTH, 300)):
        value = lying_record(base + "/lies.html", http_length, warc_delta)
        value += stormcrawler_records(base)[0]  # what a longer length runs into
        page = parse_raw_page(None, value, {})
        assert (page.url, page.truncated) == (base + "/lies.html", "length")
        [outcome] = extract([InputPage(page)])
        assert not HEADER_TEXT.search(outcome.record.markdown)
        assert "harbour master" in outcome.record.markdown
