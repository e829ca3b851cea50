"""Operator chaining: stages of one worker pass pages in memory; between workers, topics."""

from __future__ import annotations

import asyncio

from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.pipeline import PipelineSettings
from dripstream.streams.app import chained_handler
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import CpuContext, Inbound, StageContext

ARTICLE = (
    b"<html><body><article><h1>Harbours</h1><p>"
    + b"Fishing boats leave the harbour before dawn and return with the tide. " * 4
    + b"</p></article></body></html>"
)


def run(stages: str, chain: str) -> list[str]:
    settings = StreamSettings.from_env({"DRIPSTREAM_STAGES": stages, "DRIPSTREAM_CHAIN": chain})
    context = StageContext(cpu=CpuContext(PipelineSettings()), labeller=HeuristicLabeller())
    handle = chained_handler(settings, context)
    message = Inbound("dripstream.pages", 0, 3, b"https://harbour.example/", ARTICLE, {})
    return [output.topic for output in asyncio.run(handle("simplify", [message]))]


def test_a_worker_with_every_stage_writes_only_the_record() -> None:
    assert run("simplify,label,reconstruct,fallback", "1") == ["records"]


def test_without_chaining_every_hop_goes_through_its_topic() -> None:
    assert run("simplify,label,reconstruct,fallback", "0") == ["simplified"]


def test_a_stage_the_worker_does_not_run_is_reached_through_its_topic() -> None:
    assert run("simplify,reconstruct", "1") == ["simplified"]
    assert run("simplify,label", "1") == ["labelled"]
