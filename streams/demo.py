"""``dripstream demo``: the whole stream on a local broker, then the ledger.

Starts the broker (unless one is running), creates a fresh set of topics, starts one
worker process with every stage, feeds the pages, prints each record and the ledger,
then stops what it started.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from processors.sources import read_pages
from streams.kafka import create_topics
from streams.settings import StreamSettings
from streams.tools import compute_ledger, produce_pages, wait_for_outputs
from topics.topics import DEAD_LETTERS

ROOT = Path(__file__).resolve().parents[1]
BROKER_SCRIPT = ROOT / "scripts" / "broker.sh"


def broker(command: str) -> int:
    return subprocess.run(["bash", str(BROKER_SCRIPT), command], check=False).returncode


def start_worker(settings: StreamSettings, log_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DRIPSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "DRIPSTREAM_GROUP_PREFIX": settings.group_prefix,
        "DRIPSTREAM_STAGES": ",".join(settings.stages),
        "DRIPSTREAM_WEB_PORT": str(settings.web_port),
        "DRIPSTREAM_LABELLER": settings.labeller,
    }
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker"], env=env, stdout=log, stderr=log, cwd=ROOT
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
) -> int:
    already_running = broker("status") == 0
    if not already_running and broker("up") != 0:
        print(
            "error: the local Kafka broker did not start (see scripts/broker.sh logs)",
            file=sys.stderr,
        )
        return 1
    run_id = time.strftime("%Y%m%d%H%M%S")
    settings = replace(
        settings,
        topic_prefix=f"{settings.topic_prefix}demo-{run_id}.",
        group_prefix=f"{settings.group_prefix}demo-{run_id}-",
    )
    log_path = ROOT / "out" / f"demo-worker-{run_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    worker = None
    try:
        asyncio.run(create_topics(settings))
        worker = start_worker(settings, log_path)
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
        for message in outputs:
            if message.topic == DEAD_LETTERS:
                print(f"--- dead letter {message.headers.get('dripstream-source', b'').decode()}")
                continue
            record = json.loads(message.value)
            print(f"--- {record['url']} [{record['extractor']}] {record['title']}")
            print(clip(record["markdown"], max_chars))
        print("\nledger:", json.dumps(ledger.as_dict(), indent=1))
        print(f"worker log: {log_path}")
        return 0 if ledger.lost == 0 else 1
    finally:
        if worker is not None:
            stop_process(worker)
        if not already_running:
            broker("down")
