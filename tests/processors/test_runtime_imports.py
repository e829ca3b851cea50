"""The runtime never imports the training package: importing the stream's and the
pipeline's entry modules, building the default labeller and extracting a page in process
leave no ``dripstream.processors.training`` module loaded."""

from __future__ import annotations

import json
import subprocess
import sys

RUNTIME_MODULES = (
    "dripstream.streams.app",
    "dripstream.streams.worker",
    "dripstream.processors.pipeline",
    "dripstream.processors.label.registry",
    "dripstream.processors.label.learned",
    "dripstream.processors.label.templates",
    "dripstream.processors.extract.sandbox",
    "dripstream.processors.sinks",
)

SCRIPT = """
import importlib, json, sys
for module in {modules!r}:
    importlib.import_module(module)
from dripstream.processors.extract.sandbox import InProcess
from dripstream.processors.label.registry import build_labeller
from dripstream.processors.pipeline import PipelineSettings, extract_pages
from dripstream.topics.records import RawPage

labeller = build_labeller("learned")
settings = PipelineSettings()
paragraph = "The rivers of the northern plains carry snow melt from the mountains. " * 4
html = (
    "<html><head><title>Rivers</title></head><body><nav><a href='/'>Home</a></nav>"
    f"<article><h1>Rivers</h1><p>{{paragraph}}</p><p>{{paragraph}}</p></article></body></html>"
)
with InProcess(settings) as runner:
    [outcome] = extract_pages(
        [RawPage(url="https://example.com/rivers", html=html.encode())],
        labeller,
        settings,
        runner,
    )
print(json.dumps({{
    "markdown": outcome.record.markdown if outcome.record else None,
    "training": sorted(m for m in sys.modules if m.startswith("dripstream.processors.training")),
}}))
"""


def test_the_runtime_imports_no_training_module() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(modules=RUNTIME_MODULES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["markdown"] and "snow melt" in report["markdown"]
    assert report["training"] == []


def _loaded_at_start_and_after(warm_up: str, module: str, started: str) -> list[str]:
    """Whether ``module`` is imported once ``started`` is, then after the pipeline's
    ``warm_up`` function ran (as a sandbox's zygote runs it)."""
    script = (
        f"import sys, {started}\n"
        f"print({module!r} in sys.modules)\n"
        f"from dripstream.processors.pipeline import {warm_up}\n"
        f"{warm_up}()\n"
        f"print({module!r} in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_cli_and_the_stream_import_the_fallback_extractor_only_when_used() -> None:
    started = "dripstream.streams.cli.offline, dripstream.streams.app"
    # start-up skips it; the zygote loads it
    assert _loaded_at_start_and_after("warm_up", "trafilatura", started) == ["False", "True"]


def test_the_zygote_imports_the_url_canonicalizer_so_no_child_pays_for_it() -> None:
    loaded = _loaded_at_start_and_after(
        "warm_up_page_work", "w3lib.url", "dripstream.streams.cli.offline"
    )
    assert loaded == ["False", "True"]  # start-up skips it; the zygote loads it
