"""End-to-end stream throughput and latency on the local broker, next to offline extract.

One run: the same pages (articles_dev, repeated with distinct URLs) go (1) through
``extract_pages`` in this process (offline, ``--labeller``; once before the stream and
once after it, the mean of both) and (2) through the Kafka pipeline with one worker
process running every stage. Reported: pages/s of both, the
ratio, p50/p99 latency from the input's produce timestamp to its output's timestamp, the
worker's RSS sampled over the run (it should plateau, not grow with the pages), and the
bytes each topic received per input page (key + value + headers, before compression).
Worker CPU and RSS include the worker's child processes (the per-page sandbox).

    .venv/bin/python benchmarks/stream_e2e.py --data ../shared/data/articles_dev.jsonl --copies 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path

from dripstream.processors.extract.fallback import warm_up_extractor
from dripstream.processors.extract.sandbox import Limits, Sandbox
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.registry import DEFAULT_LABELLER, build_labeller
from dripstream.processors.pipeline import PipelineSettings, extract_pages, warm_up_page_work
from dripstream.streams.demo import broker, start_worker, stop_process
from dripstream.streams.envelope import SOURCE_HEADER
from dripstream.streams.kafka import create_topics
from dripstream.streams.settings import StreamSettings
from dripstream.streams.soak import process_tree, rss_mib
from dripstream.streams.tools import TopicMessage, produce_pages, read_topics, wait_for_outputs
from dripstream.topics.catalog import ALL_TOPICS, PAGES
from dripstream.topics.records import RawPage


def process_cpu_seconds(pid: int, reaped: bool = False) -> float:
    """CPU time of a process (``reaped``: plus that of the children it has waited for)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its descendants, live ones and those already reaped (a
    sandbox child that retired during the run still counts)."""
    return sum(process_cpu_seconds(member, reaped=True) for member in process_tree(pid))


def offline_run(pages: list[RawPage], labeller: Labeller) -> tuple[float, float, float]:
    """``extract_pages`` over ``pages``: wall and CPU seconds in this process, then CPU
    seconds with per-page work in the sandbox child, as ``dripstream extract`` runs it
    (each after a warm-up batch: the model and the zygote are loaded)."""
    extract_pages(pages[:16], labeller, PipelineSettings())
    started, cpu_started = time.perf_counter(), time.process_time()
    extract_pages(pages, labeller, PipelineSettings())
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    with Sandbox(PipelineSettings(), Limits(), warm_up_page_work, warm_up_extractor) as sandbox:
        extract_pages(pages[:16], labeller, PipelineSettings(), sandbox)
        cpu_started = cpu_seconds(os.getpid())
        for start in range(0, len(pages), 32):
            extract_pages(pages[start : start + 32], labeller, PipelineSettings(), sandbox)
        sandboxed = cpu_seconds(os.getpid()) - cpu_started
    return wall, cpu, sandboxed


def message_bytes(message: TopicMessage) -> int:
    headers = sum(len(name) + len(value or b"") for name, value in message.headers.items())
    return len(message.key or b"") + len(message.value) + headers


def broker_pid() -> int:
    home = Path(os.environ.get("DRIPSTREAM_KAFKA_HOME", ".cache/kafka"))
    return int((home / "broker.pid").read_text().split()[0])


def sample_rss(
    process: subprocess.Popen[bytes], samples: list[tuple[float, float]], stop: threading.Event
) -> None:
    started = time.monotonic()
    while not stop.is_set() and process.poll() is None:
        samples.append((time.monotonic() - started, rss_mib(process.pid)))
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--copies", type=int, default=5)
    parser.add_argument("--labeller", default=DEFAULT_LABELLER, help="offline and in the worker")
    parser.add_argument(
        "--no-chain",
        action="store_true",
        help="DRIPSTREAM_CHAIN=0: every hop through Kafka (measures the intermediate topics)",
    )
    args = parser.parse_args()
    with open(args.data, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    pages = [
        RawPage(url=f"{row['url']}#copy{copy}", html=row["html"].encode("utf-8"), charset="utf-8")
        for copy in range(args.copies)
        for row in rows
    ]

    labeller = build_labeller(args.labeller)
    offline = [offline_run(pages, labeller)]  # and again after the stream: see below

    already_running = broker("status") == 0
    if not already_running:
        broker("up")
    run = uuid.uuid4().hex[:8]
    settings = StreamSettings.from_env().for_run(f"bench-{run}", web_port=0)
    asyncio.run(create_topics(settings))
    log = Path("out") / f"bench-worker-{run}.log"
    log.parent.mkdir(exist_ok=True)
    os.environ["DRIPSTREAM_LABELLER"] = args.labeller
    if args.no_chain:
        os.environ["DRIPSTREAM_CHAIN"] = "0"
    worker = start_worker(settings, log)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(worker, samples, stop))
    sampler.start()
    try:
        time.sleep(8)  # let the worker join its group before the clock starts
        cpu_before = {
            "worker": cpu_seconds(worker.pid),
            "worker_main": process_cpu_seconds(worker.pid),
            "broker": cpu_seconds(broker_pid()),
        }
        produced = asyncio.run(produce_pages(settings, pages, progress=False))
        outputs = asyncio.run(wait_for_outputs(settings, produced, deadline_s=900))
        cpu_used = {
            "worker": cpu_seconds(worker.pid) - cpu_before["worker"],
            "worker_main": process_cpu_seconds(worker.pid) - cpu_before["worker_main"],
            "broker": cpu_seconds(broker_pid()) - cpu_before["broker"],
        }
        inputs = asyncio.run(read_topics(settings, [PAGES], idle_s=1.0))
        everything = asyncio.run(read_topics(settings, list(ALL_TOPICS), idle_s=2.0))
    finally:
        stop.set()
        sampler.join()
        stop_process(worker)
        if not already_running:
            broker("down")
    # The machine's speed drifts within minutes: the offline figures are the mean of one
    # run before the stream and one after it.
    offline.append(offline_run(pages, labeller))
    offline_rate = len(pages) / statistics.fmean(run[0] for run in offline)
    offline_cpu = statistics.fmean(run[1] for run in offline)
    sandboxed_cpu = statistics.fmean(run[2] for run in offline)

    produced_at = {
        message.headers.get(SOURCE_HEADER, message.key): message.timestamp_ms for message in inputs
    }
    bytes_by_topic: dict[str, int] = {}
    for message in everything:
        bytes_by_topic[message.topic] = bytes_by_topic.get(message.topic, 0) + message_bytes(
            message
        )
    input_bytes = bytes_by_topic.get(PAGES, 0)
    written = {topic: size for topic, size in bytes_by_topic.items() if topic != PAGES}
    latencies = sorted(
        message.timestamp_ms - produced_at[message.headers[SOURCE_HEADER]]
        for message in outputs
        if message.headers.get(SOURCE_HEADER) in produced_at
    )
    first_in = min(produced_at.values())
    last_out = max(message.timestamp_ms for message in outputs)
    stream_rate = len(pages) / ((last_out - first_in) / 1000)
    quarter = max(1, len(samples) // 4)
    result = {
        "pages": len(pages),
        "outputs": len(outputs),
        "offline_pages_per_s": round(offline_rate, 1),
        "stream_pages_per_s": round(stream_rate, 1),
        "stream_vs_offline": round(stream_rate / offline_rate, 3),
        "chain": not args.no_chain,
        "offline_pages_per_cpu_s": round(len(pages) / offline_cpu, 1),
        "offline_sandboxed_pages_per_cpu_s": round(len(pages) / sandboxed_cpu, 1),
        "offline_sandboxed_pages_per_cpu_s_before_after": [
            round(len(pages) / run[2], 1) for run in offline
        ],
        "worker_cpu_s": round(cpu_used["worker"], 2),
        "worker_main_process_cpu_s": round(cpu_used["worker_main"], 2),
        "broker_cpu_s": round(cpu_used["broker"], 2),
        "stream_pages_per_worker_cpu_s": round(len(pages) / cpu_used["worker"], 1),
        "stream_vs_offline_per_cpu_s": round(offline_cpu / cpu_used["worker"], 3),
        "stream_vs_offline_sandboxed_per_cpu_s": round(sandboxed_cpu / cpu_used["worker"], 3),
        "latency_ms_p50": latencies[len(latencies) // 2],
        "latency_ms_p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "worker_rss_mib_peak": round(max(rss for _, rss in samples), 1),
        "worker_rss_mib_by_quarter": [
            round(max(rss for _, rss in samples[i : i + quarter]), 1)
            for i in range(0, len(samples), quarter)
        ][:4],
        "worker_rss_mib_median": round(statistics.median(rss for _, rss in samples), 1),
        "input_bytes_per_page": round(input_bytes / len(pages)),
        "bytes_per_page_by_topic": {
            topic: round(size / len(pages)) for topic, size in sorted(written.items())
        },
        "written_vs_input": round(sum(written.values()) / input_bytes, 3),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
