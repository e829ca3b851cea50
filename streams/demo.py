"""``dripstream demo``: the whole stream on a local broker, then the ledger, then a search.

Starts the broker and the local search engine (unless they run), creates a fresh set of
topics, starts one worker process with every stage and the search sink (a fresh index),
feeds the pages, prints each record and the ledger, searches the index for a phrase of
one record (as ``dripstream search "phrase"`` does), then stops what it started.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dripstream.processors.ingest.sources import read_pages
from dripstream.streams.kafka import create_topics, ready_partitions, specs
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import compute_ledger, produce_pages, wait_for_outputs
from dripstream.topics.catalog import DEAD_LETTERS

if TYPE_CHECKING:
    from dripstream.processors.sinks.search import SearchOptions

ROOT = Path(__file__).resolve().parents[1]
BROKER_SCRIPT = ROOT / "scripts" / "broker.sh"
SEARCH_SCRIPT = ROOT / "scripts" / "search.sh"
SEARCH_URL = "http://127.0.0.1:9200"
_WORD = re.compile(r"[^\W\d_][\w'’-]*$")


def broker(command: str) -> int:
    return subprocess.run(["bash", str(BROKER_SCRIPT), command], check=False).returncode


def search_engine(command: str, quiet: bool = False) -> int:
    output = subprocess.DEVNULL if quiet else None
    return subprocess.run(
        ["bash", str(SEARCH_SCRIPT), command], check=False, stdout=output, stderr=output
    ).returncode


def demo_phrase(markdown: str, words: int = 4) -> str | None:
    """Some consecutive plain words of a record's text: what a reader might search for."""
    for line in markdown.splitlines():
        if line.startswith(("#", "|", "!", "```", "$")):
            continue
        run: list[str] = []
        for word in line.split():
            run = [*run, word] if _WORD.match(word) else []
            if len(run) == words:
                return " ".join(run)
    return None


def show_search(
    target: str, records: list[dict], deadline_s: float = 60.0, options: SearchOptions | None = None
) -> bool:
    """Wait until the sink indexed every record with content, then search for a phrase
    of one of them and print the hits as ``dripstream search`` does (``options``: the
    settings' search options)."""
    from dripstream.processors.sinks.search import SearchIndex

    expected = {record["id"] for record in records if not record.get("gone")}
    phrases = [demo_phrase(record["markdown"]) for record in records if not record.get("gone")]
    phrase = next((p for p in phrases if p), None)
    index = SearchIndex(target, options)
    try:
        deadline = time.monotonic() + deadline_s
        count = -1
        while time.monotonic() < deadline:
            try:
                index.refresh()
                count = index.count()
            except Exception:  # the engine still starting, the index not made yet
                count = -1
            if count >= len(expected):
                break
            time.sleep(1.0)
        print(f"\nsearch index {target}: {max(count, 0)} documents ({len(expected)} expected)")
        if phrase is None or count < len(expected):
            return False
        print(f'$ dripstream search "{phrase}"')
        hits = index.search(phrase)
        for number, hit in enumerate(hits, 1):
            print(f"{number}. {hit.title or '(untitled)'}  [{hit.language or '?'}]")
            print(f"   {hit.url}\n   {hit.snippet}")
        return bool(hits)
    finally:
        index.close()


def start_worker(settings: StreamSettings, log_path: Path, **extra: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DRIPSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "DRIPSTREAM_GROUP_PREFIX": settings.group_prefix,
        "DRIPSTREAM_STAGES": ",".join(settings.stages),
        "DRIPSTREAM_WEB_PORT": str(settings.web_port),
        "DRIPSTREAM_LABELLER": settings.labeller,
        **extra,
    }
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "dripstream.streams.cli", "worker"],
        env=env,
        stdout=log,
        stderr=log,
        cwd=ROOT,
    )


def stop_process(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def clip(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters (0: no limit), else cut at the
    last paragraph, line or word break before it, with the cut said in so many words."""
    if not limit or len(text) <= limit:
        return text
    head = text[:limit]
    for boundary in ("\n\n", "\n", " "):
        at = head.rfind(boundary)
        if at >= limit // 2:
            head = head[:at]
            break
    head = head.rstrip()
    return f"{head}\n... ({len(text) - len(head):,} more characters)"


def run_demo(
    settings: StreamSettings,
    sources: list[str],
    deadline_s: float = 180.0,
    max_chars: int = 0,
    search: bool = True,
) -> int:
    search_running = not search or search_engine("status", quiet=True) == 0
    search_up = None
    if not search_running:  # starts while the broker does; the sink waits for it anyway
        search_up = subprocess.Popen(["bash", str(SEARCH_SCRIPT), "up"], stdout=subprocess.DEVNULL)
    already_running = broker("status") == 0
    if not already_running and broker("up") != 0:
        print(
            "error: the local Kafka broker did not start (see scripts/broker.sh logs)",
            file=sys.stderr,
        )
        return 1
    run_id = time.strftime("%Y%m%d%H%M%S")
    settings = settings.for_run(f"demo-{run_id}")
    log_path = ROOT / "out" / f"demo-worker-{run_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    index_target = f"{SEARCH_URL}/dripstream-demo-{run_id}"
    sink = (
        {
            "DRIPSTREAM_STAGES": ",".join((*settings.stages, "sink")),
            "DRIPSTREAM_SINK": f"opensearch:{index_target}",
        }
        if search and "sink" not in settings.stages
        else {}
    )
    worker = None
    try:
        asyncio.run(create_topics(settings))
        names = [spec.name(settings.topic_prefix) for spec in specs(settings)]
        asyncio.run(ready_partitions(settings, names, timeout_s=30))  # before the worker joins
        worker = start_worker(settings, log_path, **sink)
        pages = (page.raw for source in sources for page in read_pages(source))
        started = time.monotonic()
        produced = asyncio.run(produce_pages(settings, pages, progress=False))
        outputs = asyncio.run(
            wait_for_outputs(settings, produced, deadline_s, alive=lambda: worker.poll() is None)
        )
        if worker.poll() is not None:
            print(
                f"error: the worker exited with {worker.returncode}; see {log_path}",
                file=sys.stderr,
            )
        ledger = compute_ledger(produced, outputs, time.monotonic() - started)
        records = []
        for message in outputs:
            if message.topic == DEAD_LETTERS:
                print(f"--- dead letter {message.headers.get('dripstream-source', b'').decode()}")
                continue
            record = json.loads(message.value)
            records.append(record)
            print(f"--- {record['url']} [{record['extractor']}] {record['title']}")
            print(clip(record["markdown"], max_chars))
        print("\nledger:", json.dumps(ledger.as_dict(), indent=1))
        found = True
        if sink:
            if search_up is not None and search_up.wait() != 0:
                print("error: the local search engine did not start (scripts/search.sh logs)")
                found = False
            else:
                found = show_search(index_target, records, options=settings.search)
        print(f"worker log: {log_path}")
        return 0 if ledger.lost == 0 and found else 1
    finally:
        if worker is not None:
            stop_process(worker)
        if not already_running:
            broker("down")
        if search_up is not None:
            search_up.wait()
            search_engine("down", quiet=True)
