"""The labeller registry: one list, lazily imported members, protocol checks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dripstream.processors.label.base import AnnotationReader, AsyncLabeller, Labeller
from dripstream.processors.label.registry import (
    LABELLERS,
    LabellerOptions,
    UnknownLabeller,
    build_labeller,
)
from dripstream.streams.cli import make_parser
from dripstream.streams.settings import SettingsError, StreamSettings


@pytest.mark.parametrize("name", ["heuristic", "oracle", "fallback"])
def test_every_cpu_labeller_builds_by_name_and_implements_the_protocol(name: str) -> None:
    labeller = build_labeller(name)
    assert isinstance(labeller, Labeller)
    assert not isinstance(labeller, AsyncLabeller)


def test_the_oracle_is_recognised_by_its_protocol_not_its_class() -> None:
    assert isinstance(build_labeller("oracle"), AnnotationReader)
    assert not isinstance(build_labeller("heuristic"), AnnotationReader)


def test_an_unknown_labeller_is_refused_with_the_choices() -> None:
    with pytest.raises(UnknownLabeller, match="heuristic"):
        build_labeller("magic")
    with pytest.raises(SettingsError, match="DRIPSTREAM_LABELLER"):
        StreamSettings.from_env({"DRIPSTREAM_LABELLER": "magic"})


def test_the_cli_and_the_stream_offer_the_same_labellers() -> None:
    parser = make_parser()
    for command in (["extract", "x.html"], ["eval", "d.jsonl"], ["worker"]):
        for name in LABELLERS:
            assert parser.parse_args([*command, "--labeller", name]).labeller == name
        assert StreamSettings.from_env({"DRIPSTREAM_LABELLER": name}).labeller == name


def test_heavy_labellers_are_imported_only_when_built() -> None:
    code = (
        "import sys; import dripstream.processors.label.registry, dripstream.streams.cli,"
        " dripstream.streams.settings;"
        "print('dripstream.gpu_worker.labeller' in sys.modules, 'vllm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_a_factory_that_takes_options_gets_the_profile(monkeypatch) -> None:
    seen = {}

    def factory(options: LabellerOptions):
        seen["options"] = options
        return build_labeller("heuristic")

    monkeypatch.setitem(LABELLERS, "probe", f"{__name__}:_probe")
    monkeypatch.setitem(globals(), "_probe", factory)
    build_labeller("probe", LabellerOptions(profile="p", model="/m"))
    assert seen["options"] == LabellerOptions(profile="p", model="/m")


class Unsure:
    name = "unsure"

    def label(self, pages):
        from dripstream.processors.label.base import LabelOutcome

        return [
            LabelOutcome(None, failure="low_confidence", confidence=0.2)
            if "low" in page.url
            else LabelOutcome(["main"] * page.block_count, confidence=0.9)
            for page in pages
        ]


class Expert:
    name = "expert"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def label(self, pages):
        from dripstream.processors.label.base import LabelOutcome

        self.seen += [page.url for page in pages]
        return [LabelOutcome(["other"] * page.block_count) for page in pages]


def test_a_cascade_sends_only_low_confidence_pages_to_the_second_labeller() -> None:
    from dripstream.processors.label.handoff import CascadeLabeller
    from dripstream.processors.pipeline import PipelineSettings, label_pages, simplify_page
    from dripstream.topics.records import RawPage

    html = b"<html><body><article><p>" + b"Words of a paragraph. " * 20 + b"</p></article>"
    pages = [
        simplify_page(RawPage(url=f"https://x.example/{name}", html=html), PipelineSettings())
        for name in ("high", "low")
    ]
    expert = Expert()
    high, low = label_pages(pages, CascadeLabeller(Unsure(), expert))
    assert expert.seen == ["https://x.example/low"]
    assert (high.labeller, high.labels[0]) == ("unsure", "main")
    assert (low.labeller, low.labels[0]) == ("expert", "other")


def test_a_labeller_without_a_prompt_gets_a_block_cap_instead_of_the_models_context() -> None:
    """Large pages reach a CPU labeller instead of the fallback; a prompt labeller keeps
    its profile's context (and tokenizer) as its budget. Each registry entry declares
    its budget (``budget_for``)."""
    from dripstream.gpu_worker.profiles import load_profile, pipeline_settings
    from dripstream.processors.extract.tokens import EstimatedTokenCounter
    from dripstream.processors.label.registry import budget_for, reads_prompt
    from dripstream.processors.pipeline import simplify_page
    from dripstream.topics.records import FallbackRequest, RawPage, SimplifiedPage

    profile = load_profile("mineru-html-qwen3-0.6b")
    page = RawPage(
        url="https://long.example/",
        html=("<html><body>" + "<p>A sentence of a very long page.</p>" * 6000).encode(),
    )
    prompt = budget_for("vllm", LabellerOptions(profile="mineru-html-qwen3-0.6b"))
    assert prompt.budget.context_tokens == profile.context_tokens
    assert prompt.token_counter.name == pipeline_settings(profile).token_counter.name
    over = simplify_page(page, prompt)
    assert isinstance(over, FallbackRequest) and over.reason == "over_token_budget"
    for name in ("learned", "heuristic"):
        cpu = budget_for(name)
        assert cpu.token_counter.name == EstimatedTokenCounter.name  # no profile read
        assert isinstance(simplify_page(page, cpu), SimplifiedPage)
        assert not reads_prompt(name) and reads_prompt("learned+vllm")
    capped = simplify_page(page, budget_for("learned", cpu_max_blocks=5000))
    assert isinstance(capped, FallbackRequest) and capped.reason == "too_many_blocks"
