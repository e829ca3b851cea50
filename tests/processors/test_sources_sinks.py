"""Readers of crawl output and writers of records, as the CLI and the stream use them."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import pytest
from warc_helpers import write_warc

from dripstream.processors.ingest.sources import SourceError, read_pages, read_rows
from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.pipeline import PipelineSettings, extract_pages
from dripstream.processors.sinks import SinkError, open_sink

ARTICLE = (
    "<html><head><title>Tides</title></head><body><article><h1>Spring tides</h1>"
    + "<p>The highest tides of the year arrive with the full moon in March and September.</p>" * 3
    + "</article></body></html>"
)


def test_warc_reader_yields_html_responses_only(tmp_path: Path) -> None:
    path = tmp_path / "crawl.warc.gz"
    write_warc(
        path,
        [
            ("https://tides.example/a", "text/html; charset=utf-8", ARTICLE.encode()),
            ("https://tides.example/logo.png", "image/png", b"\x89PNG..."),
        ],
    )
    [page] = read_pages(str(path))
    assert page.raw.url == "https://tides.example/a"
    assert page.raw.html == ARTICLE.encode() and page.raw.status == 200
    assert page.raw.content_type.startswith("text/html")


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.xz"])
def test_jsonl_reader_streams_plain_and_compressed_files(tmp_path: Path, suffix: str) -> None:
    lines = "".join(
        json.dumps({"id": f"p{n}", "url": f"https://t.example/{n}", "html": ARTICLE, "status": 200})
        + "\n"
        for n in range(3)
    )
    path = tmp_path / f"pages{suffix}"
    opener = {".jsonl": open, ".jsonl.gz": gzip.open, ".jsonl.xz": lzma.open}[suffix]
    with opener(path, "wt", encoding="utf-8") as out:
        out.write(lines)
    pages = list(read_pages(str(path)))
    assert [page.id for page in pages] == ["p0", "p1", "p2"]
    assert pages[1].raw.url == "https://t.example/1" and pages[1].raw.status == 200
    assert pages[0].raw.charset == "utf-8"


def test_jsonl_rows_keep_non_ascii_text_and_a_leading_byte_order_mark_is_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pages.jsonl"
    row = {"id": "é1", "url": "https://t.example/caf\u00e9", "html": ARTICLE + "<p>日本語</p>"}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row, ensure_ascii=False).encode() + b"\n")
    [page] = read_pages(str(path))
    assert page.id == "é1" and page.raw.url == "https://t.example/café"
    assert "日本語".encode() in page.raw.html


def test_folder_reader_takes_html_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.html").write_text(ARTICLE)
    (tmp_path / "a.htm").write_text(ARTICLE)
    (tmp_path / "notes.txt").write_text("not a page")
    assert [Path(page.id).name for page in read_pages(str(tmp_path))] == ["a.htm", "b.html"]


def test_unreadable_sources_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        list(read_pages(str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"url": "u"}\nnot json\n')
    with pytest.raises(SourceError, match=r"bad\.jsonl:2"):
        list(read_rows(bad))


def test_jsonl_reading_keeps_memory_flat(tmp_path: Path) -> None:
    """A reader is an iterator: the first page comes before the file is read through."""
    path = tmp_path / "big.jsonl"
    with path.open("w") as out:
        for n in range(2000):
            out.write(json.dumps({"id": n, "url": f"u{n}", "html": ARTICLE}) + "\n")
    pages = read_pages(str(path))
    first = next(pages)
    assert first.id == "0"


def _outcomes():
    from dripstream.topics.records import RawPage

    raws = [
        RawPage(url="https://tides.example/a", html=ARTICLE.encode()),
        RawPage(url="https://tides.example/b", html=b"%PDF-1.4"),
    ]
    return extract_pages(raws, HeuristicLabeller(), PipelineSettings())


def test_records_sink_writes_every_outcome_with_its_input_id(tmp_path: Path) -> None:
    ok, error = _outcomes()
    sink = open_sink(str(tmp_path / "out.jsonl"))
    sink.write(ok, "a")
    sink.write(error, "b")
    sink.close()
    first, second = (json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines())
    assert (first["input_id"], first["status"], first["id"]) == ("a", "ok", ok.record.id)
    assert first["version"] == ok.record.version
    assert "# Spring tides" in first["markdown"]
    assert (second["input_id"], second["status"], second["error_class"]) == (
        "b",
        "error",
        "NotHtml",
    )


def test_datatrove_sink_is_read_by_datatrove_and_datasets_with_their_defaults(
    tmp_path: Path,
) -> None:
    from datatrove.pipeline.readers import JsonlReader

    ok, error = _outcomes()
    path = tmp_path / "docs.jsonl"
    sink = open_sink(f"datatrove:{path}")
    sink.write(ok, "a")
    sink.write(error, "b")  # no record: no document
    sink.close()
    [document] = list(JsonlReader(str(tmp_path), glob_pattern="docs.jsonl").run())
    assert document.id == ok.record.id
    assert "highest tides" in document.text
    assert document.metadata["url"] == "https://tides.example/a"
    assert document.metadata["extractor"] == "dripper:heuristic"

    import datasets

    loaded = datasets.load_dataset("json", data_files=str(path), split="train")
    assert loaded[0]["text"] == document.text and loaded[0]["id"] == document.id


def test_gz_outputs_are_gzip_that_datatrove_and_datasets_read(tmp_path: Path) -> None:
    from datatrove.pipeline.readers import JsonlReader

    ok, error = _outcomes()
    for kind in ("records", "datatrove"):
        sink = open_sink(f"{kind}:{tmp_path / kind}.jsonl.gz")
        sink.write(ok, "a")
        sink.write(error, "b")
        sink.close()
    records = gzip.decompress((tmp_path / "records.jsonl.gz").read_bytes()).decode()
    assert [json.loads(line)["status"] for line in records.splitlines()] == ["ok", "error"]
    [document] = list(JsonlReader(str(tmp_path), glob_pattern="datatrove.jsonl.gz").run())
    assert document.id == ok.record.id and "highest tides" in document.text

    import datasets

    loaded = datasets.load_dataset("json", data_files=str(tmp_path / "datatrove.jsonl.gz"))
    assert loaded["train"][0]["id"] == ok.record.id


def test_zst_outputs_are_zstd_frames_readable_after_each_flush(tmp_path: Path) -> None:
    import cramjam

    ok, _ = _outcomes()
    path = tmp_path / "records.jsonl.zst"
    sink = open_sink(f"records:{path}")
    sink.write(ok, "a")
    sink.flush()  # what was written so far is complete frames on disk
    first = bytes(cramjam.zstd.decompress(path.read_bytes())).decode()
    assert [json.loads(line)["input_id"] for line in first.splitlines()] == ["a"]
    sink.write(ok, "b")
    sink.close()
    whole = bytes(cramjam.zstd.decompress(path.read_bytes())).decode()
    assert [json.loads(line)["input_id"] for line in whole.splitlines()] == ["a", "b"]


def test_compressed_outputs_stream_without_holding_the_file(tmp_path: Path) -> None:
    ok, _ = _outcomes()
    for suffix in (".gz", ".zst"):
        path = tmp_path / f"many.jsonl{suffix}"
        sink = open_sink(f"records:{path}")
        sizes = []
        for index in range(3000):
            sink.write(ok, str(index))
            if index % 1000 == 999:
                sink.flush()
                sizes.append(path.stat().st_size)
        sink.close()
        assert 0 < sizes[0] < sizes[1] < sizes[2], (suffix, sizes)  # written as it goes


def test_an_unknown_sink_kind_is_refused() -> None:
    with pytest.raises(SinkError, match="datatrove"):
        open_sink("avro:out.avro")


ARTICLE_HTML = (
    "<html><body><article><h1>Tides</h1><p>"
    + "The tide comes in twice a day along this coast. " * 4
    + "</p></article></body></html>"
)


@pytest.mark.parametrize("field", ["url", "id", "crawl_id", "content_type", "headers"])
@pytest.mark.parametrize("kind", ["records", "datatrove", "parquet"])
def test_a_lone_surrogate_in_a_row_is_replaced_and_every_row_is_written(
    tmp_path: Path, field: str, kind: str
) -> None:
    from dripstream.streams.cli import main
    from dripstream.topics.codecs import to_msgpack

    bad = {"url": "https://s.example/a", "id": "a", "html": ARTICLE_HTML, "crawl_id": "c1"}
    value = (
        {"x-tag": "v\ud800"} if field == "headers" else f"{bad.get(field, 'text/html; x=')}\ud800"
    )
    bad[field] = value
    good = {"url": "https://s.example/b", "id": "b", "html": ARTICLE_HTML}
    source = tmp_path / "rows.jsonl"
    # json.dumps writes the lone surrogate as the escape a crawler's JSON may hold
    source.write_text(json.dumps(bad) + "\n" + json.dumps(good) + "\n", encoding="utf-8")
    assert "\\ud800" in source.read_text(encoding="utf-8")

    pages = list(read_pages(str(source)))
    assert len(pages) == 2
    to_msgpack(pages[0].raw)  # what `produce` sends: encodable

    out = tmp_path / "out.jsonl"
    assert main(["extract", str(source), "-o", f"{kind}:{out}", "--quiet", "--no-sandbox"]) == 0
    if kind == "parquet":
        import pyarrow.parquet as pq

        lines = [
            json.dumps(row, default=str, ensure_ascii=False)
            for row in pq.read_table(out).to_pylist()
        ]
    else:
        lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert "\ufffd" in lines[0] or field in ("content_type", "headers")


def test_parquet_sink_is_read_by_datatrove_and_datasets_with_their_defaults(
    tmp_path: Path,
) -> None:
    from datatrove.pipeline.readers import JsonlReader, ParquetReader

    ok, error = _outcomes()
    for spec in (f"parquet:{tmp_path / 'docs.parquet'}", f"datatrove:{tmp_path / 'docs.jsonl.gz'}"):
        sink = open_sink(spec)
        sink.write(ok, "a")
        sink.write(error, "b")  # no record: no document
        sink.close()
    [document] = list(ParquetReader(str(tmp_path), glob_pattern="docs.parquet").run())
    [from_jsonl] = list(JsonlReader(str(tmp_path), glob_pattern="docs.jsonl.gz").run())
    assert (document.id, document.text) == (ok.record.id, ok.record.markdown)
    assert "highest tides" in document.text
    assert json.loads(document.metadata.pop("timings_ms")) == from_jsonl.metadata.pop("timings_ms")
    for read in (document, from_jsonl):
        assert read.metadata.pop("file_path").endswith(("docs.parquet", "docs.jsonl.gz"))
    assert document.metadata == from_jsonl.metadata  # the same document either way
    assert document.metadata["url"] == "https://tides.example/a"
    assert (document.metadata["status"], document.metadata["input_id"]) == ("ok", "a")

    import datasets

    loaded = datasets.load_dataset("parquet", data_files=str(tmp_path / "docs.parquet"))
    [row] = loaded["train"]
    assert (row["text"], row["id"], row["extractor"]) == (
        ok.record.markdown,
        ok.record.id,
        "dripper:heuristic",
    )


def test_parquet_row_groups_are_bounded_and_written_as_they_come(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from dripstream.processors.sinks.parquet import ParquetSink

    ok, _ = _outcomes()
    path = tmp_path / "many.parquet"
    sink = ParquetSink(str(path), row_group_rows=100)
    sizes = []
    for index in range(350):
        sink.write(ok, str(index))
        if index % 100 == 99:
            sizes.append(path.stat().st_size)
    sink.close()
    assert 0 < sizes[0] < sizes[1] < sizes[2]  # each row group on disk as it fills
    metadata = pq.ParquetFile(path).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [
        100,
        100,
        100,
        50,
    ]
    assert pq.read_table(path, columns=["input_id"])["input_id"].to_pylist() == [
        str(index) for index in range(350)
    ]

    by_bytes = ParquetSink(
        str(tmp_path / "bytes.parquet"), row_group_bytes=3 * len(ok.record.markdown)
    )
    for index in range(10):
        by_bytes.write(ok, str(index))
    by_bytes.close()
    metadata = pq.ParquetFile(tmp_path / "bytes.parquet").metadata
    assert metadata.num_row_groups == 4 and metadata.row_group(0).num_rows == 3


def test_the_parquet_sink_without_pyarrow_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(SinkError, match=r"dripstream\[parquet\]"):
        open_sink(f"parquet:{tmp_path / 'docs.parquet'}")
