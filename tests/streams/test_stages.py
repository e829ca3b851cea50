"""Stage logic without Kafka: one output per input, routing, dead letters, retries."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from processors.labellers.base import LabelOutcome
from processors.labellers.heuristic import HeuristicLabeller
from processors.pipeline import PipelineSettings
from processors.tokens import TokenBudget
from streams.adapter import MalformedInput, parse_raw_page
from streams.stages import (
    ERROR_HEADER,
    SOURCE_HEADER,
    Inbound,
    StageContext,
    fallback_message,
    label_messages,
    reconstruct_message,
    simplify_message,
)
from topics.codecs import from_msgpack, to_msgpack
from topics.records import DeadLetter, RawPage, SimplifiedPage

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


def context(**changes: object) -> StageContext:
    base = StageContext(
        pipeline=PipelineSettings(), labeller=HeuristicLabeller(), retry_backoff_s=0.0
    )
    for name, value in changes.items():
        setattr(base, name, value)
    return base


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
    ],
)
def test_input_adapter_refuses_malformed_messages(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(MalformedInput):
        parse_raw_page(key, value, {})


def test_simplify_routes_a_page_to_the_simplified_topic_keyed_by_page_id() -> None:
    output = simplify_message(inbound(ARTICLE), context())
    assert output.topic == "simplified" and output.route == "simplified"
    page = from_msgpack(output.value, SimplifiedPage)
    assert output.key == page.page_id.encode()
    assert output.headers[SOURCE_HEADER] == b"https://ferry.example/"


def test_simplify_sends_an_over_budget_page_to_fallback() -> None:
    tight = PipelineSettings(budget=TokenBudget(context_tokens=50))
    output = simplify_message(inbound(ARTICLE), context(pipeline=tight))
    assert output.topic == "fallback"


def test_unusable_input_becomes_a_dead_letter_with_class_and_payload() -> None:
    output = simplify_message(inbound(b"%PDF-1.5 data"), context())
    assert output.topic == "deadletters" and output.headers[ERROR_HEADER] == b"NotHtml"
    letter = from_msgpack(output.value, DeadLetter)
    assert (letter.stage, letter.error_class, letter.attempts) == ("simplify", "NotHtml", 1)
    assert letter.payload == b"%PDF-1.5 data" and letter.key == b"https://ferry.example/"


def test_dead_letter_keeps_only_a_digest_above_the_payload_limit() -> None:
    output = simplify_message(inbound(b"\x00" * 5000), context(payload_limit=1000))
    letter = from_msgpack(output.value, DeadLetter)
    assert letter.payload is None and letter.payload_size == 5000
    assert len(letter.payload_sha256) == 64


def test_replayed_input_counts_its_attempts() -> None:
    message = inbound(b"", headers={"dripstream-attempts": b"2", SOURCE_HEADER: b"orig"})
    letter = from_msgpack(simplify_message(message, context()).value, DeadLetter)
    assert letter.attempts == 3


def test_wrong_record_type_on_an_internal_topic_is_a_dead_letter() -> None:
    for handle in (reconstruct_message, fallback_message):
        output = handle(inbound(b"\x93\x01\x02\x03"), context())
        assert output.topic == "deadletters"


def test_label_reconstruct_give_a_json_record() -> None:
    simplified = simplify_message(inbound(ARTICLE), context())
    (labelled,) = asyncio.run(label_messages([inbound(simplified.value)], context()))
    assert labelled.topic == "labelled"
    record_out = reconstruct_message(inbound(labelled.value), context())
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
    simplified = simplify_message(inbound(ARTICLE), context()).value
    recovering = FlakyLabeller(failures=2)
    outputs = asyncio.run(
        label_messages([inbound(simplified)], context(labeller=recovering, label_retries=3))
    )
    assert [o.topic for o in outputs] == ["labelled"] and recovering.calls == 3
    broken = FlakyLabeller(failures=99)
    outputs = asyncio.run(
        label_messages(
            [inbound(simplified), inbound(b"junk")], context(labeller=broken, label_retries=2)
        )
    )
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
    simplified = simplify_message(inbound(ARTICLE), context()).value
    labeller = SlowAsyncLabeller()
    outputs = asyncio.run(
        label_messages([inbound(simplified)], context(labeller=labeller, label_timeout_s=0.2))
    )
    assert [o.topic for o in outputs] == ["labelled"] and labeller.calls == 2


def test_fallback_stage_writes_a_fallback_record() -> None:
    tight = PipelineSettings(budget=TokenBudget(context_tokens=50))
    request = simplify_message(inbound(ARTICLE), context(pipeline=tight))
    record = msgspec.json.decode(fallback_message(inbound(request.value), context()).value)
    assert record["extractor"] == "fallback:trafilatura"
    assert record["fallback_reason"] == "over_token_budget"
    assert "morning ferry" in record["markdown"]
