"""Stage logic without Kafka: one output per input, routing, dead letters, retries."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence

import msgspec
import pytest

from dripstream.processors.extract.sandbox import Limits, Sandbox
from dripstream.processors.extract.tokens import TokenBudget
from dripstream.processors.label.base import LabelOutcome
from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.pipeline import PipelineSettings
from dripstream.streams.adapter import MalformedInput, parse_raw_page
from dripstream.streams.envelope import (
    ERROR_HEADER,
    MAX_SOURCE_BYTES,
    SOURCE_HEADER,
    Inbound,
    forward,
)
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import STAGES, CpuContext, PageRunners, Provisions, StageSetupError
from dripstream.streams.stages.fallback import FallbackHandler, fallback_message
from dripstream.streams.stages.label import LabelHandler
from dripstream.streams.stages.reconstruct import reconstruct_message
from dripstream.streams.stages.simplify import SimplifyHandler, simplify_message
from dripstream.streams.stages.sink import SinkHandler
from dripstream.topics.catalog import ALL_TOPICS, MAX_MESSAGE_BYTES
from dripstream.topics.codecs import from_msgpack, to_json, to_msgpack
from dripstream.topics.records import (
    DeadLetter,
    FallbackRequest,
    LabelledPage,
    PageRecord,
    RawPage,
    SimplifiedPage,
    SourceRef,
)

ARTICLE = (
    b"<html><body><nav><a href='/'>Home</a></nav><article><h1>Ferries</h1><p>"
    + b"The morning ferry crosses the sound in forty minutes when the wind allows. " * 4
    + b"</p></article></body></html>"
)


def inbound(
    value: bytes | None,
    key: bytes | None = b"https://ferry.example/",
    headers: dict[str, bytes] | None = None,
) -> Inbound:
    return Inbound("p.pages", 0, 7, key, value, headers or {})


def cpu(pipeline: PipelineSettings | None = None, payload_limit: int = 1024 * 1024) -> CpuContext:
    return CpuContext(pipeline or PipelineSettings(), payload_limit)


def label_batch(messages: list[Inbound], labeller=None, **options: object) -> list:
    handler = LabelHandler(labeller or HeuristicLabeller(), backoff_s=0.0, **options)  # type: ignore[arg-type]
    return asyncio.run(handler(messages))


def fallback_batch(messages: list[Inbound], fetch, runner=None) -> list:
    return asyncio.run(FallbackHandler(cpu(), runner, fetch_sources=fetch)(messages))


def test_every_stage_is_declared_once_with_its_input_topic() -> None:
    assert list(STAGES) == ["simplify", "label", "reconstruct", "fallback", "sink"]
    for name, stage in STAGES.items():
        assert stage.name == name and stage.input_topic in ALL_TOPICS
        assert all(route.topic in ALL_TOPICS for route in stage.routes)
    assert STAGES["simplify"].input_topic == "pages"
    assert STAGES["fallback"].input_topic == "fallback"


def test_records_never_chain_and_the_sink_emits_only_dead_letters() -> None:
    for stage in STAGES.values():
        for route in stage.routes:
            assert route.chain == (route.record is not PageRecord), (stage.name, route)
    assert STAGES["sink"].routes == ()


def test_a_missing_dependency_fails_when_the_stage_is_built() -> None:
    settings = StreamSettings.from_env({})
    with pytest.raises(StageSetupError, match="sink stage needs DRIPSTREAM_SINK"):
        STAGES["sink"].build(settings, Provisions())
    with pytest.raises(StageSetupError, match="fallback stage needs a source reader"):
        STAGES["fallback"].build(settings, Provisions())
    with pytest.raises(StageSetupError, match="label stage needs a labeller"):
        STAGES["label"].build(settings, Provisions())


def test_a_record_of_an_unknown_type_raises_instead_of_being_routed() -> None:
    with pytest.raises(TypeError, match="no topic routes a RawPage"):
        forward(inbound(b"x"), RawPage(url="u", html=b"x"), STAGES["simplify"].routes, 1024)


def test_an_output_over_the_message_limit_becomes_a_dead_letter() -> None:
    huge = SimplifiedPage(
        page_id="p",
        url="u",
        title="",
        simplified_html="x" * MAX_MESSAGE_BYTES,
        mapping_blocks=[],
        token_count=1,
        tokenizer="t",
    )
    output = forward(inbound(b"<p>x</p>"), huge, STAGES["simplify"].routes, 1024)
    assert output.topic == "deadletters" and output.headers[ERROR_HEADER] == b"OutputTooLarge"
    assert len(output.value) < 64 * 1024


def test_a_huge_key_is_carried_as_a_bounded_identity() -> None:
    message = inbound(b"%PDF-1.5", key=b"k" * (30 * 1024 * 1024))
    output = simplify_message(cpu(), message)
    assert output.topic == "deadletters"
    assert len(output.key) <= MAX_SOURCE_BYTES and output.key.startswith(b"sha256:")
    assert output.headers[SOURCE_HEADER] == output.key
    assert from_msgpack(output.value, DeadLetter).key is None  # over the payload limit


def test_input_adapter_accepts_msgpack_json_and_bare_html() -> None:
    page = RawPage(url="https://a.example/", html=b"<p>x</p>")
    assert parse_raw_page(None, to_msgpack(page), {}) == page
    as_json = json.dumps({"url": "https://a.example/", "html": "<p>é</p>"}).encode()
    assert parse_raw_page(None, as_json, {}).html == "<p>é</p>".encode()
    bare = parse_raw_page(None, b"<p>x</p>", {"url": b"https://b.example/"})
    assert bare.url == "https://b.example/"
    assert parse_raw_page(b"https://c.example/", b"<p>x</p>", {}).url == "https://c.example/"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"k", b""),
        (b"k" * (64 * 1024 + 1), b"<p>x</p>"),
        (b"k", None),
        (None, b"<p>no url anywhere</p>"),
        (b"k", to_msgpack(RawPage(url="u", html=b"x"))[:10]),
        (b"k", b'{"url": 3}'),
        (
            b"k",
            to_msgpack(
                DeadLetter(
                    stage="s",
                    error_class="e",
                    message="m",
                    attempts=1,
                    first_failure_at=0,
                    last_failure_at=0,
                )
            ),
        ),
        (b"k", b'{"url": "u", "html": "x", "schema_version": 99}'),
        (b"k", b'{"url": "u", "html": ' + b"[" * 100_000),
        (b"k", b"\x81\xa3url" + b"\x91" * 100_000 + b"\x01"),
    ],
)
def test_input_adapter_refuses_malformed_messages(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(MalformedInput):
        parse_raw_page(key, value, {})


def test_simplify_routes_a_lean_page_to_the_simplified_topic_keyed_by_page_id() -> None:
    output = simplify_message(cpu(), inbound(ARTICLE))
    assert output.topic == "simplified" and output.route == "simplified"
    page = from_msgpack(output.value, SimplifiedPage)
    assert output.key == page.page_id.encode()
    assert output.headers[SOURCE_HEADER] == b"https://ferry.example/"
    assert page.source == SourceRef("p.pages", 0, 7)


def test_simplify_sends_an_over_budget_page_to_fallback_with_a_pointer() -> None:
    tight = PipelineSettings(budget=TokenBudget(context_tokens=50))
    output = simplify_message(cpu(tight), inbound(ARTICLE))
    assert output.topic == "fallback"
    request = from_msgpack(output.value, FallbackRequest)
    assert request.source == SourceRef("p.pages", 0, 7)
    assert len(output.value) < 400


def test_unusable_input_becomes_a_dead_letter_with_class_payload_and_headers() -> None:
    output = simplify_message(
        cpu(), inbound(b"%PDF-1.5 data", headers={"content-type": b"application/pdf"})
    )
    assert output.topic == "deadletters" and output.headers[ERROR_HEADER] == b"NotHtml"
    letter = from_msgpack(output.value, DeadLetter)
    assert (letter.stage, letter.error_class, letter.attempts) == ("simplify", "NotHtml", 1)
    assert letter.payload == b"%PDF-1.5 data" and letter.key == b"https://ferry.example/"
    assert letter.headers == {"content-type": b"application/pdf"}


def test_dead_letter_keeps_only_a_digest_above_the_payload_limit() -> None:
    output = simplify_message(cpu(payload_limit=1000), inbound(b"\x00" * 5000))
    letter = from_msgpack(output.value, DeadLetter)
    assert letter.payload is None and letter.payload_size == 5000
    assert len(letter.payload_sha256) == 64


def test_replayed_input_counts_its_attempts() -> None:
    message = inbound(b"", headers={"dripstream-attempts": b"2", SOURCE_HEADER: b"orig"})
    letter = from_msgpack(simplify_message(cpu(), message).value, DeadLetter)
    assert letter.attempts == 3


def test_wrong_record_type_on_an_internal_topic_is_a_dead_letter() -> None:
    junk = inbound(b"\x93\x01\x02\x03")
    assert reconstruct_message(cpu(), junk).topic == "deadletters"
    assert fallback_message(cpu(), (junk, None)).topic == "deadletters"


def test_label_reconstruct_give_a_json_record() -> None:
    simplified = simplify_message(cpu(), inbound(ARTICLE))
    (labelled,) = label_batch([inbound(simplified.value)])
    assert labelled.topic == "labelled"
    record_out = reconstruct_message(cpu(), inbound(labelled.value))
    record = msgspec.json.decode(record_out.value)
    assert record_out.topic == "records" and "# Ferries" in record["markdown"]
    assert record["extractor"] == "dripper:heuristic"


class FlakyLabeller:
    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def label(self, pages: list[SimplifiedPage]) -> list[LabelOutcome]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("engine exploded")
        return HeuristicLabeller().label(pages)


def test_labeller_failures_are_retried_then_routed_to_fallback() -> None:
    simplified = simplify_message(cpu(), inbound(ARTICLE)).value
    recovering = FlakyLabeller(failures=2)
    outputs = label_batch([inbound(simplified)], recovering, retries=3)
    assert [o.topic for o in outputs] == ["labelled"] and recovering.calls == 3
    broken = FlakyLabeller(failures=99)
    outputs = label_batch([inbound(simplified), inbound(b"junk")], broken, retries=2)
    assert [o.topic for o in outputs] == ["fallback", "deadletters"] and broken.calls == 2


class SlowAsyncLabeller:
    """Per-page async labeller (the vLLM shape); the first call hangs."""

    name = "slow"

    def __init__(self) -> None:
        self.calls = 0

    def label(self, pages: list[SimplifiedPage]) -> list[LabelOutcome]:
        raise AssertionError("the stage must use label_page")

    async def label_page(self, page: SimplifiedPage) -> LabelOutcome:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(60)
        return LabelOutcome(["main"] * page.block_count)


def test_a_hanging_labeller_times_out_and_is_retried() -> None:
    simplified = simplify_message(cpu(), inbound(ARTICLE)).value
    labeller = SlowAsyncLabeller()
    outputs = label_batch([inbound(simplified)], labeller, timeout_s=0.2)
    assert [o.topic for o in outputs] == ["labelled"] and labeller.calls == 2


def _fallback_request(page: Inbound) -> Inbound:
    tight = PipelineSettings(budget=TokenBudget(context_tokens=50))
    request = simplify_message(cpu(tight), page)
    assert request.topic == "fallback"
    return Inbound("p.fallback", 0, 1, request.key, request.value, request.headers)


def _fetcher(pages: dict[SourceRef, Inbound]):
    async def fetch(refs: list[SourceRef]) -> dict[SourceRef, Inbound]:
        return {ref: pages[ref] for ref in refs if ref in pages}

    return fetch


def test_fallback_stage_fetches_the_page_and_writes_a_fallback_record() -> None:
    page = inbound(ARTICLE)
    (output,) = fallback_batch([_fallback_request(page)], _fetcher({page.ref(): page}))
    record = msgspec.json.decode(output.value)
    assert record["extractor"] == "fallback:trafilatura"
    assert record["fallback_reason"] == "over_token_budget"
    assert "morning ferry" in record["markdown"]


def test_fallback_for_a_page_the_topic_no_longer_holds_is_a_dead_letter() -> None:
    (output,) = fallback_batch([_fallback_request(inbound(ARTICLE))], _fetcher({}))
    assert output.topic == "deadletters" and output.headers[ERROR_HEADER] == b"SourceExpired"
    assert output.headers[SOURCE_HEADER] == b"https://ferry.example/"


def test_a_fallback_past_its_time_limit_is_a_timeout_dead_letter_and_the_stage_goes_on() -> None:
    slow_page = b"<html><body>" + b"<div><p>A paragraph of ordinary words here.</p></div>" * 40000
    slow, quick = inbound(slow_page), Inbound("p.pages", 0, 8, b"q", ARTICLE, {})
    requests = [_fallback_request(slow), _fallback_request(quick)]
    fetch = _fetcher({slow.ref(): slow, quick.ref(): quick})
    # trafilatura takes 5-12 s on the slow page (host-dependent), well under a second on
    # the quick one in a fresh child: 2 s parts them on any machine (0.3 s did not on a
    # slow host, where the quick page timed out too).
    # The worker's shared runner: the sandbox child gets each bound stage's context.
    runners = PageRunners(lambda contexts: Sandbox(contexts, Limits(timeout_s=2.0, memory_mib=512)))
    try:
        first, second = fallback_batch(requests, fetch, runners.bind("fallback", cpu()))
    finally:
        runners.close()
    assert first.topic == "deadletters" and first.headers[ERROR_HEADER] == b"PageTimeout"
    assert second.topic == "records", second.headers


def test_the_worker_starts_its_sandbox_before_the_first_page_and_binds_no_stage_after() -> None:
    runners = PageRunners(lambda contexts: Sandbox(contexts, Limits()))
    step = runners.bind("simplify", cpu())
    try:
        runners.start()
        sandbox = runners._runner
        assert isinstance(sandbox, Sandbox)
        deadline = time.monotonic() + 60
        while sandbox.forks == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sandbox.forks == 1, "the zygote and a child are up before any page"
        [output] = step.map(simplify_message, [inbound(ARTICLE)])
        assert output.topic in ("simplified", "fallback"), output
        assert sandbox.forks == 1, "the first page found the child warm"
        with pytest.raises(RuntimeError, match="bound after the page runner started"):
            runners.bind("reconstruct", cpu())
    finally:
        runners.close()


def test_a_value_too_big_to_be_a_page_is_refused_before_the_sandbox() -> None:
    from dripstream.processors.extract.simplify import SimplifyConfig

    small = PipelineSettings(simplify=SimplifyConfig(max_input_chars=100))
    big, fine = inbound(b"<p>" + b"x" * 500), inbound(b"<p>tiny page</p>")
    first, second = asyncio.run(SimplifyHandler(cpu(small))([big, fine]))
    assert first.topic == "deadletters" and first.headers[ERROR_HEADER] == b"TooLarge"
    assert second.topic in ("simplified", "fallback")


class _RecordingRunner:
    """A page runner that runs in process and remembers what reached it."""

    def __init__(self, context: CpuContext) -> None:
        self.seen: list[Inbound] = []
        self.context = context

    def map(self, function: Callable, items: Sequence) -> list:
        self.seen.extend(items)
        return [function(self.context, item) for item in items]


def test_an_empty_value_or_an_oversized_key_is_refused_before_the_sandbox() -> None:
    runner = _RecordingRunner(cpu())
    empty = inbound(b"", key=b"k" * (30 * 1024 * 1024))
    long_key = inbound(ARTICLE, key=b"https://a.example/" + b"x" * 70_000)
    fine = inbound(ARTICLE)
    outputs = asyncio.run(SimplifyHandler(cpu(), runner)([empty, long_key, fine]))
    assert [output.headers.get(ERROR_HEADER) for output in outputs[:2]] == [
        b"MalformedInput",
        b"MalformedInput",
    ]
    assert outputs[2].topic in ("simplified", "fallback")
    assert runner.seen == [fine]


def test_an_unsure_page_takes_the_second_opinion_route_through_the_fallback_topic() -> None:
    page = inbound(ARTICLE)
    simplified = from_msgpack(simplify_message(cpu(), page).value, SimplifiedPage)
    labelled = LabelledPage(
        page_id=simplified.page_id,
        url=simplified.url,
        title=simplified.title,
        mapping_blocks=simplified.mapping_blocks,
        labels=["main"] * simplified.block_count,
        labeller="learned",
        token_count=simplified.token_count,
        source=simplified.source,
        second_opinion=5.0,  # trafilatura must find five times our words to replace them
    )
    labelled_in = Inbound("p.labelled", 0, 3, b"k", to_msgpack(labelled), {})
    request = reconstruct_message(cpu(), labelled_in)
    assert request.topic == "fallback"
    fallback_in = Inbound("p.fallback", 0, 4, request.key, request.value, request.headers)
    (output,) = fallback_batch([fallback_in], _fetcher({page.ref(): page}))
    record = msgspec.json.decode(output.value)
    assert output.topic == "records" and record["extractor"] == "dripper:learned"
    assert "morning ferry" in record["markdown"] and "second_opinion" in record["timings_ms"]


def test_the_sink_stage_writes_records_and_counts_them_by_outcome(tmp_path) -> None:
    from dripstream.streams import metrics

    def count(outcome: str) -> float:
        value = metrics.REGISTRY.get_sample_value(
            "dripstream_sink_documents_total", {"outcome": outcome}
        )
        return value or 0.0

    before = {outcome: count(outcome) for outcome in ("written", "deleted")}
    page = PageRecord(id="a", url="https://a.example/", title="A", markdown="# A", extractor="x")
    gone = PageRecord(id="g", url="https://g.example/", title="", markdown="", extractor="gone")
    messages = [
        Inbound("p.records", 0, 3, b"a", to_json(page), {}),
        Inbound("p.records", 0, 4, b"g", to_json(msgspec.structs.replace(gone, gone=True)), {}),
    ]
    out = tmp_path / "records.jsonl"
    settings = StreamSettings.from_env({"DRIPSTREAM_STAGES": "sink", "DRIPSTREAM_SINK": str(out)})
    stage = STAGES["sink"].build(settings, Provisions())
    assert isinstance(stage, SinkHandler)
    assert asyncio.run(stage(messages)) == []
    stage.sink.close()
    assert len(out.read_text().splitlines()) == 2
    assert count("written") == before["written"] + 1
    assert count("deleted") == before["deleted"] + 1
