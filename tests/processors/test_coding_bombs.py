"""One class per cause: a crawler record whose body decodes to more than a page may be is
``TooLarge`` in every content coding (gzip, zlib and raw deflate, brotli) and for a plain
base64 body, as a Scrapy item and as a WARC record, through ``dripstream extract`` and
through the simplify stage's sandboxed step (the stream's own run on the real broker is
in ``tests/streams/test_hostile_stream.py``)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_corpus import coding_bombs

from dripstream.processors.extract.budget import PipelineSettings
from dripstream.processors.extract.sandbox import Limits, Sandbox
from dripstream.streams.envelope import Inbound
from dripstream.streams.stages.base import CpuContext, PageRunners
from dripstream.streams.stages.simplify import simplify_message
from dripstream.topics.codecs import from_msgpack
from dripstream.topics.records import DeadLetter

pytestmark = pytest.mark.slow

PAGE = (
    "<html><body><article><h1>After the bomb</h1><p>"
    + "This ordinary page comes after the oversized record and is still read. " * 3
    + "</p></article></body></html>"
)
GOOD_ITEM = json.dumps({"url": "https://ok.example/", "status": 200, "body": PAGE}).encode()


@pytest.fixture(scope="module")
def bombs() -> list[tuple[str, str, bytes]]:
    return coding_bombs()


def test_every_coding_bomb_is_too_large_offline_and_the_file_goes_on(
    bombs: list[tuple[str, str, bytes]], tmp_path: Path
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_bytes(b"".join(v + b"\n" for _, form, v in bombs if form == "jsonl") + GOOD_ITEM)
    warc = tmp_path / "records.warc"
    warc.write_bytes(b"".join(v for _, form, v in bombs if form == "warc"))
    out = tmp_path / "out.jsonl"
    command = [sys.executable, "-m", "dripstream.streams.cli", "extract", str(items), str(warc)]
    done = subprocess.run(
        [*command, "-o", str(out), "--labeller", "heuristic", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    classes = {row.get("url"): row.get("error_class") for row in rows}
    assert len(rows) == len(bombs) + 1, rows
    assert classes.pop("https://ok.example/") is None  # the page after the bombs
    assert set(classes.values()) == {"TooLarge"}, classes


def test_every_coding_bomb_is_too_large_in_the_simplify_stage(
    bombs: list[tuple[str, str, bytes]],
) -> None:
    runners = PageRunners(lambda contexts: Sandbox(contexts, Limits()))
    step = runners.bind("simplify", CpuContext(PipelineSettings()))
    try:
        messages = [Inbound("pages", 0, i, None, value) for i, (_, _, value) in enumerate(bombs)]
        outputs = step.map(simplify_message, messages)
    finally:
        runners.close()
    classes = {
        name: from_msgpack(output.value, DeadLetter).error_class
        if getattr(output, "route", None) == "deadletter"
        else repr(output)
        for (name, _, _), output in zip(bombs, outputs, strict=True)
    }
    assert set(classes.values()) == {"TooLarge"}, classes


def test_a_message_too_large_to_decode_in_the_page_memory_is_too_large() -> None:
    body = b"<html><body>" + b"<p>plain</p>" * (40 * 1024 * 1024 // 12)
    item = {"url": "https://big.example/", "status": 200, "body_encoding": "base64"}
    value = json.dumps({**item, "body": base64.b64encode(body).decode()}).encode()
    runners = PageRunners(lambda contexts: Sandbox(contexts, Limits()))
    step = runners.bind("simplify", CpuContext(PipelineSettings()))
    try:
        [output] = step.map(simplify_message, [Inbound("pages", 0, 0, None, value)])
    finally:
        runners.close()
    letter = from_msgpack(output.value, DeadLetter)
    assert (letter.error_class, letter.message) == (
        "TooLarge",
        "decoding the message needs more than a page's memory",
    ), letter
