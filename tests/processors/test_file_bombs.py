"""Files whose one record decompresses to far more than a page: ``extract`` reads them
record by record with a byte bound, so the oversized record is its own ``TooLarge`` error
and the rest of the file goes on, in bounded memory."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from dripstream.processors.ingest.sources import MAX_RECORD_BYTES, read_pages

BOMB_BYTES = 3 * MAX_RECORD_BYTES  # what the oversized record decompresses to
RSS_BOUND_MIB = 400  # the extract process (sandbox child apart); it held 715 MiB unbounded
PAGE = (
    "<html><body><article><h1>After the bomb</h1><p>"
    + "This ordinary page comes after the oversized record and is still read. " * 3
    + "</p></article></body></html>"
)


def gzip_member(out, chunks) -> None:
    """One gzip member of the concatenated ``chunks``, compressed as they come."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    for chunk in chunks:
        out.write(compressor.compress(chunk))
    out.write(compressor.flush())


def filler(size: int, piece: bytes = b"a" * (1 << 20)):
    for _ in range(size // len(piece)):
        yield piece


def jsonl_bomb(path: Path) -> None:
    with path.open("wb") as out:
        head = b'{"url": "https://bomb.example/", "html": "'
        gzip_member(out, [head, *filler(BOMB_BYTES), b'"}\n'])
        out.write(
            gzip.compress(json.dumps({"url": "https://ok.example/", "html": PAGE}).encode() + b"\n")
        )


def warc_record(url: str, body_chunks, body_size: int) -> list[bytes]:
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Record-ID: <urn:uuid:{abs(hash(url)):032x}>\r\n"
        f"WARC-Target-URI: {url}\r\nWARC-Date: 2024-05-01T12:00:00Z\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http) + body_size}\r\n\r\n"
    ).encode()
    return [head, http, *body_chunks, b"\r\n\r\n"]


def warc_bomb(path: Path) -> None:
    with path.open("wb") as out:
        gzip_member(out, warc_record("https://bomb.example/", filler(BOMB_BYTES), BOMB_BYTES))
        page = PAGE.encode()
        gzip_member(out, warc_record("https://ok.example/", [page], len(page)))


MEASURE = (
    "import resource, subprocess, sys;"
    "code = subprocess.run(sys.argv[1:]).returncode;"
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)"
)


def run_measured(args: list[str], env: dict | None = None) -> tuple[int, int, str]:
    """``dripstream ARGS``: (exit code, the process's peak RSS in MiB, stderr)."""
    argv = [sys.executable, "-c", MEASURE, sys.executable, "-m", "dripstream.streams.cli", *args]
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    code, peak_mib = map(int, result.stdout.split())
    return code, peak_mib, result.stderr


@pytest.mark.parametrize(
    "name, write", [("bomb.jsonl.gz", jsonl_bomb), ("bomb.warc.gz", warc_bomb)]
)
def test_the_oversized_record_is_too_large_and_the_next_page_is_read(
    tmp_path: Path, name: str, write
) -> None:
    path = tmp_path / name
    write(path)
    assert path.stat().st_size < 1024 * 1024  # a small file on disk
    bomb, page = read_pages(str(path))
    assert type(bomb.error).__name__ == "TooLarge"
    assert page.error is None and page.raw.url == "https://ok.example/"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, write", [("bomb.jsonl.gz", jsonl_bomb), ("bomb.warc.gz", warc_bomb)]
)
def test_extract_writes_the_bomb_as_an_error_record_in_bounded_memory(
    tmp_path: Path, name: str, write
) -> None:
    path = tmp_path / name
    write(path)
    out = tmp_path / "out.jsonl"
    code, peak_mib, stderr = run_measured(["extract", str(path), "-o", str(out), "--quiet"])
    assert code == 0, stderr
    assert "Traceback" not in stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(line["status"], line.get("error_class")) for line in lines] == [
        ("error", "TooLarge"),
        ("ok", None),
    ]
    assert peak_mib < RSS_BOUND_MIB, peak_mib
    print(f"{name}: peak RSS {peak_mib} MiB")


@pytest.mark.slow
def test_produce_sends_the_readable_pages_and_counts_the_bomb_as_an_input_error(
    tmp_path: Path, stream_settings
) -> None:
    import asyncio
    import os

    from dripstream.streams.tools import read_topics

    path = tmp_path / "bomb.jsonl.gz"
    jsonl_bomb(path)
    env = {
        **os.environ,
        "DRIPSTREAM_BROKERS": stream_settings.brokers,
        "DRIPSTREAM_TOPIC_PREFIX": stream_settings.topic_prefix,
    }
    code, peak_mib, stderr = run_measured(["produce", str(path), "--quiet"], env)
    assert code == 2, stderr  # an input problem, not a broker one (3)
    assert "error: 1 input records not produced (TooLarge 1)" in stderr
    assert "Traceback" not in stderr
    assert peak_mib < RSS_BOUND_MIB, peak_mib
    pages = asyncio.run(read_topics(stream_settings, ["pages"], idle_s=0.5))
    assert [message.key for message in pages] == [b"https://ok.example/"]
