"""Operator chaining: stages of one worker pass pages in memory; between workers, topics.

Chaining is derived from the stages' declared routes, so a stage added as one module and
one registry entry chains (and routes) without any change to the app.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import pytest

from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.streams import app
from dripstream.streams.app import build_handlers, chained_handler
from dripstream.streams.envelope import Inbound, Outbound, Route, dead_letter, forward
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import (
    STAGES,
    Provisions,
    Stage,
    StageSetupError,
    chosen,
    registry,
)
from dripstream.streams.stages.base import INPUT_ERRORS
from dripstream.topics.catalog import DEAD_LETTERS, LABELLED, SIMPLIFIED
from dripstream.topics.codecs import from_msgpack
from dripstream.topics.records import LabelledPage, SimplifiedPage

ARTICLE = (
    b"<html><body><article><h1>Harbours</h1><p>"
    + b"Fishing boats leave the harbour before dawn and return with the tide. " * 4
    + b"</p></article></body></html>"
)


class NoPages:
    async def fetch(self, refs: list) -> dict:
        return {}


def _handle(names: Sequence[str], chain: bool, stages=STAGES):
    settings = StreamSettings.from_env({"DRIPSTREAM_TEMPLATES": "0"})
    provisions = Provisions(labeller=HeuristicLabeller, source_reader=NoPages)
    picked = chosen(names, stages)
    return chained_handler(picked, build_handlers(settings, provisions, picked), chain, "p.")


def run(stages: str, chain: str) -> list[str]:
    handle = _handle(stages.split(","), chain == "1")
    message = Inbound("dripstream.pages", 0, 3, b"https://harbour.example/", ARTICLE, {})
    return [output.topic for output in asyncio.run(handle("simplify", [message]))]


def test_a_worker_with_every_stage_writes_only_the_record() -> None:
    assert run("simplify,label,reconstruct,fallback", "1") == ["records"]


def test_without_chaining_every_hop_goes_through_its_topic() -> None:
    assert run("simplify,label,reconstruct,fallback", "0") == ["simplified"]


def test_a_stage_the_worker_does_not_run_is_reached_through_its_topic() -> None:
    assert run("simplify,reconstruct", "1") == ["simplified"]
    assert run("simplify,label", "1") == ["labelled"]


def test_chaining_follows_the_declared_routes_only() -> None:
    every = chosen(("simplify", "label", "reconstruct", "fallback", "sink"))
    assert app.chaining(every) == {
        ("simplify", "simplified"): "label",
        ("simplify", "fallback"): "fallback",
        ("label", "labelled"): "reconstruct",
        ("label", "fallback"): "fallback",
        ("reconstruct", "fallback"): "fallback",
    }  # records (and dead letters) always go to Kafka, even with the sink stage here


# A stage added the way the registry says: one module (here, this test) and one entry.


@dataclass
class AllMainHandler:
    """Labels every block main: a toy label stage with no labeller."""

    async def __call__(self, messages: Sequence[Inbound]) -> list[Outbound]:
        outputs = []
        for message in messages:
            try:
                page = from_msgpack(message.value or b"", SimplifiedPage)
            except INPUT_ERRORS as error:
                outputs.append(dead_letter("allmain", message, error, 1024))
                continue
            labelled = LabelledPage(
                page_id=page.page_id,
                url=page.url,
                title=page.title,
                mapping_blocks=page.mapping_blocks,
                labels=["main"] * page.block_count,
                labeller="allmain",
                token_count=page.token_count,
                source=page.source,
            )
            outputs.append(forward(message, labelled, ALL_MAIN_ROUTES, 1024 * 1024))
        return outputs


ALL_MAIN_ROUTES = (Route(LabelledPage, LABELLED, "labelled"),)
ALL_MAIN = Stage(
    "allmain",
    SIMPLIFIED,
    ALL_MAIN_ROUTES,
    lambda settings, provisions: AllMainHandler(),
    "every block main",
)


def test_a_new_stage_is_one_declaration_and_the_app_routes_it_by_its_routes() -> None:
    with_toy = registry([*STAGES.values(), ALL_MAIN])
    message = Inbound("p.pages", 0, 3, b"https://harbour.example/", ARTICLE, {})

    chained = _handle(("simplify", "allmain", "reconstruct"), True, with_toy)
    (record,) = asyncio.run(chained("simplify", [message]))
    assert record.topic == "records" and record.route == "record"
    assert msgspec.json.decode(record.value)["extractor"] == "dripper:allmain"

    alone = _handle(("allmain",), True, with_toy)
    simplified = asyncio.run(_handle(("simplify",), True)("simplify", [message]))[0]
    junk = Inbound("p.simplified", 0, 9, b"k", b"\x93junk", {})
    page = Inbound("p.simplified", 0, 8, simplified.key, simplified.value, simplified.headers)
    labelled, letter = asyncio.run(alone("allmain", [page, junk]))
    assert (labelled.topic, labelled.route) == (LABELLED, "labelled")
    assert labelled.key == simplified.key  # keyed by page id, as every declared route
    assert (letter.topic, letter.route) == (DEAD_LETTERS, "deadletter")

    unchained = _handle(("simplify", "allmain", "reconstruct"), False, with_toy)
    assert [o.topic for o in asyncio.run(unchained("simplify", [message]))] == ["simplified"]


def test_the_registry_refuses_a_stage_declared_twice_and_an_unknown_stage() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        registry([*STAGES.values(), STAGES["label"]])
    with pytest.raises(StageSetupError, match="allmain"):
        chosen(("allmain",))


def test_the_app_names_no_stage() -> None:
    """Stage behaviour lives in the stages' declarations; the app only loops over them."""
    source = inspect.getsource(app)
    strings = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not strings & set(STAGES), strings & set(STAGES)
