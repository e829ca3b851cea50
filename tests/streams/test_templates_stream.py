"""Site templates on the real broker: learned by one worker, used by the next one after
it was killed with kill -9 (its partitions rebalanced to a fresh worker)."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from dripstream.processors.label.templates import SIGNATURE_RULES
from dripstream.streams.envelope import SOURCE_HEADER
from dripstream.streams.settings import StreamSettings
from dripstream.streams.template_store import read_site_states
from dripstream.streams.tools import produce_pages, wait_for_outputs
from dripstream.topics.records import RawPage

pytestmark = pytest.mark.kafka
TEMPLATE_ENV = {
    "DRIPSTREAM_LABELLER": "heuristic",
    "DRIPSTREAM_TEMPLATE_VERIFY_PAGES": "2",
    "DRIPSTREAM_TEMPLATE_SHADOW_RATE": "0",
    "DRIPSTREAM_MAX_BATCH": "1",
}


def site_page(number: int) -> RawPage:
    paragraphs = "".join(
        f"<p>Paragraph {i} of report {number} has enough ordinary words to be the story.</p>"
        for i in range(4)
    )
    html = (
        '<html><body><div class="menu"><a href="/">Home</a></div>'
        f'<article class="report"><h1>Report {number}</h1>{paragraphs}</article>'
        '<div class="extras"><p>Contact the newsroom at the address below.</p></div>'
    )
    return RawPage(url=f"https://www.templates.example/r/{number}", html=html.encode())


def extractors(settings: StreamSettings, numbers: range) -> list[str]:
    """Produce the pages one at a time (each waits for the one before) and return the
    extractor of each record, in order."""
    found = []
    for number in numbers:
        [produce_id] = asyncio.run(produce_pages(settings, [site_page(number)], progress=False))
        outputs = asyncio.run(wait_for_outputs(settings, [produce_id], deadline_s=90))
        [output] = [m for m in outputs if m.headers.get(SOURCE_HEADER) == produce_id]
        found.append(json.loads(output.value)["extractor"])
    return found


def test_templates_survive_kill_9_and_serve_on_the_next_worker(
    stream_settings: StreamSettings, workers
) -> None:
    first = workers.start(**TEMPLATE_ENV)
    learned = extractors(stream_settings, range(6))
    assert learned[0] == "dripper:heuristic", workers.logs()
    assert learned[-1] == "dripper:template", (learned, workers.logs())
    os.kill(first.pid, signal.SIGKILL)
    first.wait()

    states = asyncio.run(read_site_states(stream_settings))
    assert states["templates.example"].signature_rules == SIGNATURE_RULES

    workers.start(**TEMPLATE_ENV)
    after = extractors(stream_settings, range(100, 103))
    assert after == ["dripper:template"] * 3, (after, workers.logs())
