"""The crash-loop breaker on the real broker: a zstd value that expands past an emulated
pod memory limit kills its worker while it is fetched, every time; after
``DRIPSTREAM_CRASH_LOOP_LIMIT`` deaths it is one ``CrashLoop`` dead letter by reference
and the partition goes on with the next message."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from dripstream.streams.breaker import CrashLedger
from dripstream.streams.envelope import SOURCE_HEADER
from dripstream.streams.kafka import client_options
from dripstream.streams.settings import StreamSettings
from dripstream.streams.soak import process_tree, rss_mib
from dripstream.streams.tools import read_topics
from dripstream.topics.catalog import DEAD_LETTERS, PAGES, SIMPLIFIED
from dripstream.topics.codecs import from_msgpack
from dripstream.topics.records import DeadLetter

ROOT = Path(__file__).resolve().parents[2]
BOMB_MIB = 400  # the value's size once decompressed
POD_LIMIT_MIB = 500  # the emulated pod limit: the worker is killed above it
LIMIT = 2  # DRIPSTREAM_CRASH_LOOP_LIMIT


def test_the_ledger_trips_only_after_the_limit_of_deaths_at_one_offset(tmp_path: Path) -> None:
    ledger = CrashLedger(tmp_path, limit=2)
    tp = ("pages", 0)
    assert ledger.starting({tp: (7, 9)}) == []  # first start at 7
    assert CrashLedger(tmp_path, 2).starting({tp: (7, 9)}) == []  # died once at 7
    [trip] = CrashLedger(tmp_path, 2).starting({tp: (7, 9)})  # died twice at 7
    assert (trip.topic, trip.partition, trip.offset, trip.deaths) == ("pages", 0, 7, 2)
    assert CrashLedger(tmp_path, 2).entries == {"pages:0": {"offset": 8, "starts": 1}}
    assert CrashLedger(tmp_path, 2).starting({tp: (8, 9)}) == []  # moving on: counted afresh
    idle = CrashLedger(tmp_path, 1)
    assert idle.starting({tp: (9, 9)}) == [] and idle.starting({tp: (9, 9)}) == []


def test_a_clean_stop_or_a_rebalance_is_not_a_death(tmp_path: Path) -> None:
    tp = ("pages", 0)
    CrashLedger(tmp_path, 1).starting({tp: (3, 5)})
    ledger = CrashLedger(tmp_path, 1)
    ledger.release([tp])
    assert CrashLedger(tmp_path, 1).starting({tp: (3, 5)}) == []
    CrashLedger(tmp_path, 1).clear()
    assert CrashLedger(tmp_path, 1).starting({tp: (3, 5)}) == []


def _oom_killer(worker: subprocess.Popen[bytes], killed: threading.Event) -> None:
    """SIGKILL the worker (and its children) once their memory passes the pod limit."""
    while worker.poll() is None:
        if rss_mib(worker.pid) > POD_LIMIT_MIB:
            for pid in process_tree(worker.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed.set()
            return
        time.sleep(0.02)


async def _send(settings: StreamSettings, values: list[tuple[bytes, bytes]]) -> None:
    client = AIOKafkaProducer(
        **client_options(settings),
        compression_type="zstd",
        max_request_size=BOMB_MIB * 2**20 + 2**20,
    )
    await client.start()
    try:
        for source, value in values:
            await client.send_and_wait(
                settings.topic_prefix + PAGES,
                value,
                key=b"https://bomb.example/",
                partition=0,
                headers=[(SOURCE_HEADER, source)],
            )
    finally:
        await client.stop()


@pytest.mark.slow
def test_a_value_that_kills_its_worker_becomes_one_dead_letter_and_the_partition_goes_on(
    stream_settings: StreamSettings, tmp_path: Path
) -> None:
    page = (
        b"<html><body><article><h1>After the bomb</h1><p>"
        + b"This ordinary page waits behind the value that kills the worker. " * 4
        + b"</p></article></body></html>"
    )
    asyncio.run(_send(stream_settings, [(b"bomb", b"<p>" + b"a" * (BOMB_MIB * 2**20))]))
    asyncio.run(_send(stream_settings, [(b"after", page)]))
    env = {
        **os.environ,
        "DRIPSTREAM_BROKERS": stream_settings.brokers,
        "DRIPSTREAM_TOPIC_PREFIX": stream_settings.topic_prefix,
        "DRIPSTREAM_GROUP_PREFIX": stream_settings.group_prefix,
        "DRIPSTREAM_STAGES": "simplify",
        "DRIPSTREAM_WEB_PORT": "0",
        "DRIPSTREAM_DATA_DIR": str(tmp_path / "data"),  # the pod's emptyDir
        "DRIPSTREAM_CRASH_LOOP_LIMIT": str(LIMIT),
        "DRIPSTREAM_LABELLER": "heuristic",
    }
    log = (tmp_path / "worker.log").open("ab")
    kills = 0
    simplified: list = []
    deadline = time.monotonic() + 600
    # The kubelet's part: kill the container above its memory limit, then restart it.
    while not simplified and time.monotonic() < deadline and kills <= LIMIT + 1:
        worker = subprocess.Popen(
            [sys.executable, "-m", "dripstream.streams.cli", "worker"],
            env=env,
            stdout=log,
            stderr=log,
            cwd=ROOT,
        )
        killed = threading.Event()
        threading.Thread(target=_oom_killer, args=(worker, killed), daemon=True).start()
        until = time.monotonic() + 150
        while time.monotonic() < until and worker.poll() is None and not simplified:
            simplified = asyncio.run(read_topics(stream_settings, [SIMPLIFIED], idle_s=1.0))
        if worker.poll() is None:
            worker.terminate()
            worker.wait(30)
        kills += killed.is_set()
    letters = [
        from_msgpack(message.value, DeadLetter)
        for message in asyncio.run(read_topics(stream_settings, [DEAD_LETTERS], idle_s=2.0))
    ]
    logs = (tmp_path / "worker.log").read_text(errors="replace")[-4000:]
    assert kills == LIMIT, (kills, logs)
    [letter] = letters
    assert letter.error_class == "CrashLoop", letter
    assert (letter.source_partition, letter.source_offset) == (0, 0)
    assert letter.payload is None and letter.source_topic.endswith(PAGES)
    assert len(simplified) == 1 and simplified[0].headers[SOURCE_HEADER] == b"after"
