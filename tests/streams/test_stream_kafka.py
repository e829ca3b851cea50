"""The whole stream against a real Apache Kafka broker, workers as separate processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from stream_helpers import dev_pages, wait_for_records

from dripstream.gpu_worker.profiles import PROFILES_DIR
from dripstream.processors.extract.tokens import TokenBudget
from dripstream.processors.pipeline import PipelineSettings, simplify_page
from dripstream.streams.envelope import ATTEMPTS_HEADER, SOURCE_HEADER
from dripstream.streams.kafka import client_options, producer
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import (
    compute_ledger,
    describe_dead_letter,
    produce_pages,
    read_topics,
    replay_dead_letters,
    replay_targets,
    wait_for_outputs,
)
from dripstream.topics.catalog import DEAD_LETTERS, FALLBACK, PAGES, RECORDS
from dripstream.topics.codecs import to_msgpack
from dripstream.topics.records import (
    DeadLetter,
    FallbackRequest,
    RawPage,
    document_id,
    page_id,
)

pytestmark = pytest.mark.kafka
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "pages.jsonl"


def sample_rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLES.read_text(encoding="utf-8").splitlines()]


async def send_all(
    settings: StreamSettings, messages: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]
) -> None:
    client = producer(settings)
    await client.start()
    try:
        for key, value, headers in messages:
            await client.send_and_wait(
                settings.topic_prefix + PAGES, value, key=key, headers=headers
            )
    finally:
        await client.stop()


def profile_with_context(tmp_path: Path, context_tokens: int) -> Path:
    """A copy of the default profile with a smaller context (the pipeline's one budget)."""
    source = (PROFILES_DIR / "mineru-html-qwen3-0.6b.toml").read_text()
    (tmp_path / "prompt-json.txt").write_text((PROFILES_DIR / "prompt-json.txt").read_text())
    path = tmp_path / "small.toml"
    path.write_text(source.replace("context_tokens = 32768", f"context_tokens = {context_tokens}"))
    return path


def outputs_by_source(outputs: list) -> dict[bytes, list]:
    found: dict[bytes, list] = {}
    for message in outputs:
        found.setdefault(message.headers.get(SOURCE_HEADER, b""), []).append(message)
    return found


def test_every_input_ends_as_exactly_one_record_fallback_or_dead_letter(
    stream_settings: StreamSettings, workers, data_dir: Path, tmp_path: Path
) -> None:
    max_blocks = 30  # the heuristic reads no prompt: its budget is a block cap
    rows = [row for row in sample_rows() if row["id"] not in ("sample-empty", "sample-json")]
    big = max(
        (json.loads(line) for line in (data_dir / "articles_dev.jsonl").open()),
        key=lambda row: len(row["html"]),
    )
    pages = [
        RawPage(url=row["url"], html=row["html"].encode(), charset="utf-8") for row in [*rows, big]
    ]
    # The big page must be over this budget, the samples within it (checked offline).
    offline = PipelineSettings(budget=TokenBudget.cpu(max_blocks))
    assert isinstance(simplify_page(pages[-1], offline), FallbackRequest)
    assert not any(isinstance(simplify_page(page, offline), FallbackRequest) for page in pages[:-1])
    messages = [(page.url.encode(), to_msgpack(page), []) for page in pages]
    bare = b"<html><body><p>A bare page, its address in a header.</p></body></html>"
    json_page = json.dumps({"url": "https://json.example/a", "html": "<p>JSON page</p>"})
    messages += [
        (b"https://pdf.example/doc.pdf", b"%PDF-1.7\n" + bytes(range(256)), []),
        (b"https://empty.example/", b"", []),
        (b"https://broken.example/", to_msgpack(pages[0])[:40], []),
        (None, bare, [("url", b"https://bare.example/")]),
        (b"https://json.example/a", json_page.encode(), []),
        (b"https://huge.example/", b"<html><body><p>" + b"a" * 17_000_000, []),
    ]
    workers.start(
        DRIPSTREAM_CPU_MAX_BLOCKS=str(max_blocks),
        DRIPSTREAM_LABELLER="heuristic",  # routing is under test, not the labeller
    )
    asyncio.run(send_all(stream_settings, messages))
    sources = [key or b"https://bare.example/" for key, _, _ in messages]
    # The bare page without a key is identified by its position on the pages topic.
    outputs = asyncio.run(
        wait_for_outputs(
            stream_settings, [s for s in sources if s != (b"https://bare.example/")], deadline_s=120
        )
    )
    ledger = compute_ledger([s for s in sources if s != b"https://bare.example/"], outputs, 1)
    assert ledger.lost == 0, workers.logs()
    assert ledger.duplicates == 0
    by_source = outputs_by_source(outputs)
    assert len(outputs) == len(messages), workers.logs()

    for page in pages[:-1]:
        (record_message,) = by_source[page.url.encode()]
        assert record_message.topic == RECORDS, describe_dead_letter(record_message)
        record = json.loads(record_message.value)
        assert record["extractor"] == "dripper:heuristic"
        assert record_message.key == document_id(page.url).encode()  # stable per URL
        assert record["version"] == page_id(page.url, page.html)  # per content
    (over,) = by_source[pages[-1].url.encode()]
    over_record = json.loads(over.value)
    assert over_record["extractor"] == "fallback:trafilatura"
    assert over_record["fallback_reason"] == "too_many_blocks"
    assert over_record["markdown"]

    (huge,) = by_source[b"https://huge.example/"]
    huge_letter = describe_dead_letter(huge)
    assert huge_letter["error_class"] == "TooLarge"
    assert huge_letter["payload"] is None and huge_letter["payload_size"] > 17_000_000
    expected_dead = {
        b"https://pdf.example/doc.pdf": "NotHtml",
        b"https://empty.example/": "MalformedInput",
        b"https://broken.example/": "MalformedInput",
    }
    for source, error_class in expected_dead.items():
        (letter,) = by_source[source]
        assert letter.topic == DEAD_LETTERS
        described = describe_dead_letter(letter)
        assert described["error_class"] == error_class
        assert described["stage"] == "simplify"
        assert described["attempts"] == 1
    (json_record,) = by_source[b"https://json.example/a"]
    assert json.loads(json_record.value)["markdown"] == "JSON page"
    bare_outputs = [
        m
        for m in outputs
        if m.headers.get(SOURCE_HEADER, b"").startswith(
            (stream_settings.topic_prefix + PAGES).encode()
        )
    ]
    assert len(bare_outputs) == 1
    assert json.loads(bare_outputs[0].value)["url"] == "https://bare.example/"


@pytest.mark.slow
def test_killing_a_worker_mid_stream_loses_nothing(
    stream_settings: StreamSettings, workers, data_dir: Path
) -> None:
    pages = dev_pages(data_dir, copies=3, tag="copy")
    produced = asyncio.run(produce_pages(stream_settings, pages, progress=False))

    first = workers.start()
    done = wait_for_records(stream_settings, 20)
    assert 20 <= done < len(pages), "the worker must be killed mid-stream"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()

    workers.start()
    outputs = asyncio.run(wait_for_outputs(stream_settings, produced, deadline_s=240))
    ledger = compute_ledger(produced, outputs, 1)
    assert ledger.lost == 0, workers.logs()
    assert ledger.records + ledger.fallback_records + ledger.dead_letters == len(outputs)
    print(f"kill -9 after {done} records: ledger {ledger.as_dict()}")


def test_dead_letters_are_replayed_once_with_their_key_and_headers(
    stream_settings: StreamSettings, workers
) -> None:
    workers.start(DRIPSTREAM_STAGES="simplify")
    key = b"https://typed.example/x"
    headers = [("content-type", b"application/pdf"), ("crawl", b"c7")]
    page = b"<html><body><p>Served as a PDF by its header.</p></body></html>"
    asyncio.run(send_all(stream_settings, [(key, page, headers)]))
    first = asyncio.run(wait_for_outputs(stream_settings, [key], 60))
    assert [m.topic for m in first] == [DEAD_LETTERS]
    assert describe_dead_letter(first[0])["error_class"] == "NotHtml"
    assert asyncio.run(replay_dead_letters(stream_settings)) == (1, 0, [])

    def dead_letters(count: int) -> list:
        deadline = time.monotonic() + 60
        letters: list = []
        while time.monotonic() < deadline and len(letters) < count:
            letters = asyncio.run(read_topics(stream_settings, [DEAD_LETTERS], idle_s=0.5))
        return letters

    letters = dead_letters(2)
    described = [describe_dead_letter(m) for m in letters]
    # The header came back with the page: it is refused again, not turned into a record.
    assert [(d["error_class"], d["attempts"]) for d in described] == [
        ("NotHtml", 1),
        ("NotHtml", 2),
    ]
    replayed = asyncio.run(read_topics(stream_settings, [PAGES], idle_s=0.5))
    assert [m.key for m in replayed] == [key, key]
    assert replayed[1].headers["content-type"] == b"application/pdf"
    assert replayed[1].headers["crawl"] == b"c7"
    assert replayed[1].headers[ATTEMPTS_HEADER] == b"1"
    # Neither the replayed letter nor the replay's own letter is sent again by default.
    assert asyncio.run(replay_dead_letters(stream_settings)) == (0, 2, [])
    assert asyncio.run(replay_dead_letters(stream_settings, include_replays=True)) == (1, 1, [])
    assert len(dead_letters(3)) == 3


def test_replay_refuses_dead_letters_that_name_a_topic_outside_the_pipeline_inputs(
    stream_settings: StreamSettings,
) -> None:
    prefix = stream_settings.topic_prefix

    def letter(topic: str) -> bytes:
        return to_msgpack(
            DeadLetter(
                stage="label",
                error_class="Crafted",
                message="crafted",
                attempts=1,
                first_failure_at=0.0,
                last_failure_at=0.0,
                source_topic=topic,
                key=b"https://evil.example/",
                headers={},
                payload=b"forged state",
                payload_size=12,
                payload_sha256="0" * 64,
            )
        )

    async def send_letters() -> None:
        client = producer(stream_settings)
        await client.start()
        try:
            for value in (letter(prefix + "templates"), letter(prefix + "replays"), b"\xc1junk"):
                await client.send_and_wait(prefix + DEAD_LETTERS, value, key=b"k")
        finally:
            await client.stop()

    asyncio.run(send_letters())
    sent, skipped, refused = asyncio.run(replay_dead_letters(stream_settings))
    assert (sent, skipped, len(refused)) == (0, 0, 3), refused
    assert "'" + prefix + "templates'" in refused[0] and "not replayed" in refused[0]
    assert "not a dead letter" in refused[2]
    templates = asyncio.run(read_topics(stream_settings, ["templates"], idle_s=0.5))
    assert templates == []
    assert replay_targets(stream_settings) == {
        prefix + topic for topic in (PAGES, "simplified", "labelled", FALLBACK, RECORDS)
    }


def test_a_fallback_whose_page_was_deleted_from_the_topic_is_a_dead_letter(
    stream_settings: StreamSettings, workers, tmp_path: Path
) -> None:
    """The fallback reads the page back from the pages topic; when retention (here: an
    explicit deletion) removed it first, the request ends as a SourceExpired dead letter."""
    workers.start(  # a prompt labeller: the profile's context is the simplify stage's budget
        "simplify",
        DRIPSTREAM_PROFILE=str(profile_with_context(tmp_path, 100)),
        DRIPSTREAM_LABELLER="vllm",  # not built: this worker runs no label stage
    )
    article = "<html><body><article><h1>Gone</h1>" + "<p>Words of a long article.</p>" * 80
    page = RawPage(url="https://gone.example/", html=article.encode())
    asyncio.run(send_all(stream_settings, [(page.url.encode(), to_msgpack(page), [])]))
    requests = asyncio.run(
        read_topics(stream_settings, [FALLBACK], idle_s=None, deadline_s=60, done=bool)
    )
    assert requests, workers.logs()

    async def delete_pages() -> None:
        admin = AIOKafkaAdminClient(**client_options(stream_settings))
        await admin.start()
        try:
            topic = stream_settings.topic_prefix + PAGES
            await admin.delete_records(
                {TopicPartition(topic, p): RecordsToDelete(-1) for p in range(4)}
            )
        finally:
            await admin.close()

    asyncio.run(delete_pages())
    workers.start("fallback")
    outputs = asyncio.run(wait_for_outputs(stream_settings, [page.url.encode()], 60))
    assert [m.topic for m in outputs] == [DEAD_LETTERS], workers.logs()
    assert describe_dead_letter(outputs[0])["error_class"] == "SourceExpired"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_worker_serves_health_readiness_and_metrics(
    stream_settings: StreamSettings, workers
) -> None:
    port = _free_port()
    workers.start(DRIPSTREAM_WEB_PORT=str(port), DRIPSTREAM_LABELLER="heuristic")
    page = RawPage(url="https://metrics.example/", html=b"<p>Counted once.</p>")
    asyncio.run(send_all(stream_settings, [(b"https://metrics.example/", to_msgpack(page), [])]))
    asyncio.run(wait_for_outputs(stream_settings, [b"https://metrics.example/"], 60))

    def get(path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()

    deadline = time.monotonic() + 30
    while True:
        try:
            status, body = get("/healthz")
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert status == 200 and json.loads(body)["status"] == "ok"
    assert get("/readyz")[0] == 200
    metrics = get("/metrics")[1]
    assert 'dripstream_pages_in_total{stage="simplify"} 1.0' in metrics
    assert 'dripstream_pages_out_total{route="record",stage="reconstruct"} 1.0' in metrics


def test_creating_topics_twice_reports_them_as_existing(stream_settings: StreamSettings) -> None:
    from dripstream.streams.kafka import create_topics, describe_topics, specs

    # stream_settings created them already: nothing is created again.
    assert set(asyncio.run(create_topics(stream_settings)).values()) == {"exists"}
    described = asyncio.run(describe_topics(stream_settings))
    wanted = {
        spec.name(stream_settings.topic_prefix): spec.partitions for spec in specs(stream_settings)
    }
    assert all(t["exists"] and t["partitions"] == wanted[t["topic"]] for t in described), described


def test_a_worker_starts_once_its_topics_exist_and_names_the_missing_ones(
    stream_settings: StreamSettings, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import dripstream.streams.kafka
    from dripstream.streams.cli import main
    from dripstream.streams.cli.common import EXIT_BROKER
    from dripstream.streams.kafka import wait_for_topics

    asyncio.run(wait_for_topics(stream_settings, timeout_s=10))  # created: returns
    # A prefix whose topics nobody created: the worker stops with what to do, exit 3,
    # instead of joining its group with no partitions to read.
    monkeypatch.setattr(dripstream.streams.kafka, "TOPIC_WAIT_S", 1.0)
    monkeypatch.setenv("DRIPSTREAM_BROKERS", stream_settings.brokers)
    monkeypatch.setenv("DRIPSTREAM_TOPIC_PREFIX", f"absent-{os.getpid()}.")
    assert main(["worker"]) == EXIT_BROKER
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: broker at ") and "MissingTopics" in line, line
    assert f"absent-{os.getpid()}.pages" in line and "dripstream topics create" in line
