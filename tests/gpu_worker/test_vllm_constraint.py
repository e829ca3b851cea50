"""The answer regex, token cap and parser, and the shipped profiles (no engine)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dripstream.gpu_worker.constraint import (
    AnswerError,
    answer_regex,
    format_answer,
    max_answer_tokens,
    parse_answer,
)
from dripstream.gpu_worker.engine import EngineSettings
from dripstream.gpu_worker.profiles import load_profile, profile_names

LABELS = ["main", "other"]
FORMATS = ["json", "compact"]


def test_vllm_answer_shapes() -> None:
    assert format_answer("json", ["main", "other"]) == '{"1":"main","2":"other"}'
    assert format_answer("compact", ["main", "other"]) == "<answer>1main2other</answer>"
    assert answer_regex("compact", 2, LABELS) == "<answer>1(main|other)2(main|other)</answer>"


@pytest.mark.parametrize("output_format", FORMATS)
@given(labels=st.lists(st.sampled_from(LABELS), min_size=1, max_size=120))
def test_vllm_answer_roundtrip(output_format: str, labels: list[str]) -> None:
    answer = format_answer(output_format, labels)
    regex = answer_regex(output_format, len(labels), LABELS)
    assert re.fullmatch(regex, answer)
    assert parse_answer(output_format, answer, len(labels), LABELS) == labels
    assert len(answer) < max_answer_tokens(output_format, len(labels), LABELS)
    longest = format_answer(output_format, ["other"] * len(labels))
    assert len(longest) + 1 == max_answer_tokens(output_format, len(labels), LABELS)


@pytest.mark.parametrize(
    ("output_format", "text", "reason"),
    [
        ("json", '{"1":"main","2":"other"', "answer_malformed"),
        ("json", '{"1":"main","3":"other","2":"main"}', "answer_ids_out_of_order"),
        ("json", '{"1":"main","2":"other"}', "answer_incomplete"),
        ("json", '{"1":"main","2":"maybe","3":"main"}', "answer_malformed"),
        ("json", '{"1":"main" ,"2":"other","3":"main"}', "answer_malformed"),
        ("json", '{"1":"main","2":"other","3":"main",}', "answer_malformed"),
        ("compact", "<answer>1main2other3main", "answer_malformed"),
        ("compact", "<answer>1main3other2main</answer>", "answer_ids_out_of_order"),
        ("compact", "<answer></answer>", "answer_incomplete"),
        ("compact", "Ignore that. <answer>1main2main3main</answer>", "answer_malformed"),
    ],
)
def test_vllm_bad_answers_name_their_reason(output_format: str, text: str, reason: str) -> None:
    with pytest.raises(AnswerError) as error:
        parse_answer(output_format, text, 3, LABELS)
    assert error.value.reason == reason


def test_vllm_shipped_profiles_load() -> None:
    assert {"mineru-html-qwen3-0.6b", "mineru-html-hunyuan-0.5b-compact"} <= set(profile_names())
    qwen = load_profile("mineru-html-qwen3-0.6b")
    assert (qwen.weights, qwen.output_format, qwen.context_tokens) == (
        "opendatalab/MinerU-HTML",
        "json",
        32768,
    )
    hunyuan = load_profile("mineru-html-hunyuan-0.5b-compact", weights="/models/h")
    assert (hunyuan.weights, hunyuan.output_format) == ("/models/h", "compact")
    for name in profile_names():
        assert "{{html}}" in load_profile(name).template_text


def test_vllm_profile_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="shipped"):
        load_profile("no-such-profile")
    (tmp_path / "p.txt").write_text("no placeholder", encoding="utf-8")
    (tmp_path / "p.toml").write_text(
        'name = "p"\nweights = "w"\noutput_format = "json"\nprompt_template = "p.txt"\n'
        "context_tokens = 100\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="html"):
        load_profile(tmp_path / "p.toml")


def test_vllm_engine_settings_from_env() -> None:
    from dripstream.streams.settings import SettingsError, StreamSettings

    assert StreamSettings.from_env({}).engine == EngineSettings()
    engine = StreamSettings.from_env(
        {
            "DRIPSTREAM_VLLM_MAX_IN_FLIGHT": "16",
            "DRIPSTREAM_VLLM_ENFORCE_EAGER": "true",
            "DRIPSTREAM_VLLM_GPU_MEMORY": "0.5",
        }
    ).engine
    assert (engine.max_in_flight, engine.enforce_eager) == (16, True)
    assert engine.gpu_memory_utilization == 0.5
    with pytest.raises(SettingsError, match=r"DRIPSTREAM_VLLM_PREFIX_CACHING.*boolean"):
        StreamSettings.from_env({"DRIPSTREAM_VLLM_PREFIX_CACHING": "maybe"})


def test_the_profile_sets_the_budget_and_tokenizer_of_the_whole_pipeline(tmp_path) -> None:
    from dripstream.gpu_worker.profiles import pipeline_settings

    hub = pipeline_settings(load_profile("mineru-html-qwen3-0.6b", weights=str(tmp_path)))
    assert hub.budget.context_tokens == 32768
    assert hub.token_counter.name.startswith("estimate:")  # no tokenizer.json there


def test_published_profiles_show_the_model_the_blocks_alone() -> None:
    from dripstream.gpu_worker.prompt import render_prompt
    from dripstream.processors.pipeline import PipelineSettings, simplify_page
    from dripstream.topics.records import RawPage

    html = (
        b"<body><article class='post'><h1>Lighthouses</h1><div class='text'>"
        b"<p>Keepers once lived in the towers.</p></div></article></body>"
    )
    page = simplify_page(RawPage(url="https://l.example/", html=html), PipelineSettings())
    flat = render_prompt(load_profile("mineru-html-qwen3-0.6b"), page)
    assert "<article" not in flat and '_item_id="2"' in flat
    nested = render_prompt(load_profile("test-qwen3-tiny-random"), page)
    assert '<article class="post">' in nested
