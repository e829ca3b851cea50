"""``dripstream soak``: the whole pipeline under a simulated crawl, with faults injected.

One worker process per stage, a crawler simulator producing pages at a steady rate
(about 1 in 10 of them bad: empty, binary, JSON, truncated or wrong-version messages),
``kill -9`` of a worker every ``kill_every`` seconds (round robin over the stages, then
restarted), optionally the broker stopped for ``broker_pause`` seconds, and at the end the
ledger: produced, records, fallback, dead letters, duplicates, lost, peak RSS per worker,
p50/p99 latency.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from aiokafka.errors import KafkaError

from dripstream.streams.demo import broker, start_worker, stop_process
from dripstream.streams.envelope import SOURCE_HEADER
from dripstream.streams.kafka import create_topics, producer
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import DEFAULT_STAGES
from dripstream.streams.tools import compute_ledger, read_topics, wait_for_outputs
from dripstream.topics.catalog import PAGES
from dripstream.topics.codecs import to_msgpack
from dripstream.topics.records import RawPage

_WORDS = (
    "river harbour council budget festival engine library orchard storm museum "
    "ferry bridge station market teacher village summit rainfall archive season "
    "runner climate garden factory lantern valley signal"
).split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 20))]
    return " ".join(words).capitalize() + "."


def simulated_page(rng: random.Random, number: int) -> tuple[bytes, bytes]:
    """(key, value) of one crawled page; about one in ten is unusable on purpose."""
    url = f"https://site{number % 37}.example/articles/{number}"
    kind = rng.random()
    if kind < 0.02:
        return url.encode(), b""
    if kind < 0.04:
        return url.encode(), bytes(rng.getrandbits(8) for _ in range(2048))
    if kind < 0.06:
        return url.encode(), json.dumps({"id": number, "items": [1, 2, 3]}).encode()
    if kind < 0.08:
        whole = to_msgpack(RawPage(url=url, html=b"<p>cut</p>" * 20))
        return url.encode(), whole[: len(whole) // 2]
    if kind < 0.10:
        return url.encode(), to_msgpack(RawPage(url=url, html=b"<p>x</p>", schema_version=99))
    paragraphs = "".join(
        f"<p>{' '.join(_sentence(rng) for _ in range(rng.randint(2, 6)))}</p>"
        for _ in range(rng.randint(3, 12))
    )
    html = (
        f"<html><head><title>Story {number}</title></head><body>"
        f"<nav><a href='/'>Home</a> <a href='/news'>News</a></nav>"
        f"<article><h1>Story {number}</h1>{paragraphs}</article>"
        f"<footer>© Site {number % 37}</footer></body></html>"
    )
    return url.encode(), to_msgpack(RawPage(url=url, html=html.encode()))


async def produce_steadily(
    settings: StreamSettings, pages: int, rate: float, seed: int
) -> list[bytes]:
    """Send pages at ``rate`` per second, like a crawler: a send that fails (the broker is
    away) is retried with a new producer until it is acknowledged."""
    rng = random.Random(seed)
    keys = []
    started = time.monotonic()
    client = None
    try:
        for number in range(pages):
            key, value = simulated_page(rng, number)
            while True:
                if client is None:
                    client = producer(settings, request_timeout_ms=10000)
                    try:
                        await client.start()
                    except KafkaError:
                        await client.stop()
                        client = None
                        await asyncio.sleep(1.0)
                        continue
                try:
                    await client.send_and_wait(settings.topic_prefix + PAGES, value, key=key)
                    break
                except KafkaError:
                    await client.stop()
                    client = None
                    await asyncio.sleep(1.0)
            keys.append(key)
            ahead = started + (number + 1) / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
    finally:
        if client is not None:
            await client.stop()
    return keys


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a worker's sandbox child and its fork server)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, queue = [], [pid]
    while queue:
        current = queue.pop()
        tree.append(current)
        queue.extend(children.get(current, []))
    return tree


def rss_mib(pid: int, children: bool = True) -> float:
    """Memory of a process and (by default) its descendants in MiB (0 when it is gone).

    Each process counts its proportional set size (``Pss`` in ``smaps_rollup``): a
    library page mapped by the worker and its sandbox child counts once, as the pod's
    memory cgroup charges it; ``VmRSS`` where ``smaps_rollup`` is missing.
    """
    total = 0.0
    for member in process_tree(pid) if children else [pid]:
        total += _memory_kib(member) / 1024
    return total


def _memory_kib(pid: int) -> int:
    for name, prefix in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            text = Path(f"/proc/{pid}/{name}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(prefix):
                return int(line.split()[1])
    return 0


@dataclass
class _Fleet:
    """One worker process per stage, restartable, with RSS sampling."""

    settings: StreamSettings
    log_dir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    kills: int = 0
    restarts: int = 0

    def start(self, stage: str) -> None:
        settings = replace(self.settings, stages=(stage,))
        self.processes[stage] = start_worker(settings, self.log_dir / f"soak-{stage}.log")

    def kill(self, stage: str) -> None:
        process = self.processes[stage]
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.kills += 1
        self.start(stage)

    def supervise(self) -> list[str]:
        """Restart workers that exited (a worker cannot start while the broker is away),
        as Kubernetes would; returns the stages restarted."""
        restarted = [
            stage for stage, process in self.processes.items() if process.poll() is not None
        ]
        for stage in restarted:
            self.restarts += 1
            self.start(stage)
        return restarted

    def keep_alive(self) -> bool:
        """While the pipeline drains: restart exited workers; the fleet never gives up."""
        self.supervise()
        return True

    def sample(self) -> None:
        for stage, process in self.processes.items():
            rss = rss_mib(process.pid)
            self.peak_rss_mib[stage] = max(self.peak_rss_mib.get(stage, 0.0), rss)

    def stop(self) -> None:
        for process in self.processes.values():
            stop_process(process)


def run_soak(
    settings: StreamSettings,
    pages: int,
    rate: float,
    kill_every: float,
    broker_pause: float,
    seed: int = 7,
    deadline_s: float = 3600,
) -> dict[str, object]:
    """Run the soak and return its ledger (``lost`` must be 0)."""
    already_running = broker("status") == 0
    if not already_running and broker("up") != 0:
        raise RuntimeError("the local Kafka broker did not start")
    run_id = time.strftime("%Y%m%d%H%M%S")
    settings = settings.for_run(f"soak-{run_id}", web_port=0)
    log_dir = Path("out") / f"soak-{run_id}"
    log_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(create_topics(settings))
    fleet = _Fleet(settings, log_dir)
    for stage in DEFAULT_STAGES:
        fleet.start(stage)
    stop = threading.Event()
    events: list[str] = []

    def inject_faults() -> None:
        started = time.monotonic()
        next_kill = started + kill_every if kill_every else float("inf")
        # Mid-crawl, once the workers have long joined their groups.
        pause_at = started + max(20.0, 0.4 * pages / rate) if broker_pause else float("inf")
        victim = 0
        while not stop.wait(0.5):
            fleet.sample()
            now = time.monotonic()
            for stage in fleet.supervise():
                events.append(f"{now - started:.0f}s restarted exited {stage} worker")
            if now >= pause_at:
                events.append(f"{now - started:.0f}s broker down for {broker_pause:.0f}s")
                broker("down")
                stop.wait(broker_pause)
                broker("up")
                pause_at = float("inf")
            if now >= next_kill:
                stage = DEFAULT_STAGES[victim % len(DEFAULT_STAGES)]
                victim += 1
                events.append(f"{now - started:.0f}s kill -9 {stage} worker")
                fleet.kill(stage)
                next_kill = now + kill_every

    injector = threading.Thread(target=inject_faults, daemon=True)
    injector.start()
    started = time.monotonic()
    try:
        produced = asyncio.run(produce_steadily(settings, pages, rate, seed))
        stop.set()  # no faults once the crawl is over: let the pipeline drain
        injector.join()
        outputs = asyncio.run(
            wait_for_outputs(
                settings, produced, deadline_s, alive=lambda: not fleet.supervise() or True
            )
        )
        fleet.sample()
        inputs = asyncio.run(read_topics(settings, [PAGES], idle_s=2.0, deadline_s=600))
    finally:
        stop.set()
        fleet.stop()
        if not already_running:
            broker("down")
    ledger = compute_ledger(produced, outputs, time.monotonic() - started)
    produced_at = {m.key: m.timestamp_ms for m in inputs}
    first_output: dict[bytes, int] = {}
    for message in outputs:
        source = message.headers.get(SOURCE_HEADER, b"")
        if source in produced_at and source not in first_output:
            first_output[source] = message.timestamp_ms - produced_at[source]
    latencies = sorted(first_output.values())
    return {
        **ledger.as_dict(),
        "worker_kills": fleet.kills,
        "worker_restarts_after_exit": fleet.restarts,
        "faults": events,
        "peak_rss_mib": {k: round(v, 1) for k, v in fleet.peak_rss_mib.items()},
        "latency_ms_p50": latencies[len(latencies) // 2] if latencies else None,
        "latency_ms_p99": latencies[int(len(latencies) * 0.99)] if latencies else None,
        "logs": str(log_dir),
    }
