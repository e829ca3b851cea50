"""A compressed value that expands past every limit: what a worker holds, measured.

The broker checks ``max.message.bytes`` against the *compressed* batch, so a zstd value
of a few hundred MiB of one repeated byte is accepted (it compresses to kilobytes). The
consumer decompresses the whole batch before any dripstream code sees the value. This
produces one such value (``--mib``, with a producer whose request limit is raised, as a
hostile client would), runs a simplify worker, and reports the worker tree's peak memory
and what the value became.

    .venv/bin/python benchmarks/decompression_bomb.py --mib 600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaProducer

from dripstream.streams.demo import broker, start_worker, stop_process
from dripstream.streams.envelope import SOURCE_HEADER
from dripstream.streams.kafka import client_options, create_topics
from dripstream.streams.settings import StreamSettings
from dripstream.streams.soak import rss_mib
from dripstream.streams.tools import describe_dead_letter, wait_for_outputs
from dripstream.topics.catalog import PAGES


async def send_bomb(settings: StreamSettings, size: int) -> None:
    client = AIOKafkaProducer(
        **client_options(settings), compression_type="zstd", max_request_size=size + 2**20
    )
    await client.start()
    try:
        await client.send_and_wait(
            settings.topic_prefix + PAGES,
            b"<p>" + b"a" * size,
            key=b"https://bomb.example/",
            headers=[(SOURCE_HEADER, b"bomb")],
        )
    finally:
        await client.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=600)
    args = parser.parse_args()
    already_running = broker("status") == 0
    if not already_running:
        broker("up")
    run = uuid.uuid4().hex[:8]
    settings = StreamSettings.from_env().for_run(f"bomb-{run}", stages=("simplify",), web_port=0)
    asyncio.run(create_topics(settings))
    log = Path("out") / f"bomb-worker-{run}.log"
    log.parent.mkdir(exist_ok=True)
    worker = start_worker(settings, log)
    peak = [0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib(worker.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        time.sleep(8)
        idle = rss_mib(worker.pid)
        started = time.monotonic()
        asyncio.run(send_bomb(settings, args.mib * 2**20))
        outputs = asyncio.run(wait_for_outputs(settings, [b"bomb"], deadline_s=300))
        seconds = time.monotonic() - started
    finally:
        stop.set()
        sampler.join()
        alive = worker.poll() is None
        stop_process(worker)
        if not already_running:
            broker("down")
    outcome = [describe_dead_letter(m)["error_class"] for m in outputs] or ["none"]
    result = {
        "value_mib": args.mib,
        "outcome": outcome,
        "seconds": round(seconds, 1),
        "worker_idle_mib": round(idle, 1),
        "worker_peak_mib": round(peak[0], 1),
        "worker_alive": alive,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
