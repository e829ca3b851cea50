"""Fault injection on the live stream: rebalances, worker kills per stage, broker restart."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from stream_helpers import dev_pages, wait_for_records

from streams.settings import StreamSettings
from streams.soak import rss_mib, run_soak
from streams.tools import compute_ledger, produce_pages, read_topics, wait_for_outputs
from topics.topics import RECORDS

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_a_second_worker_joining_and_leaving_mid_run_loses_nothing(
    stream_settings: StreamSettings, workers, data_dir: Path
) -> None:
    pages = dev_pages(data_dir, copies=3, tag="r")
    produced = asyncio.run(produce_pages(stream_settings, pages, progress=False))
    workers.start()
    wait_for_records(stream_settings, 20)
    second = workers.start()  # same consumer group: partitions are rebalanced
    wait_for_records(stream_settings, 120)
    second.terminate()  # leaves: its partitions go back to the first worker
    second.wait(60)
    outputs = asyncio.run(wait_for_outputs(stream_settings, produced, deadline_s=300))
    ledger = compute_ledger(produced, outputs, 1)
    assert ledger.lost == 0, workers.logs()
    print(f"rebalance ledger: {ledger.as_dict()}")


def test_soak_with_per_stage_kills_and_a_broker_restart_loses_nothing(
    kafka_broker: str,
) -> None:
    settings = StreamSettings.from_env({"DRIPSTREAM_BROKERS": kafka_broker})
    ledger = run_soak(settings, pages=600, rate=20, kill_every=4, broker_pause=10, deadline_s=600)
    assert ledger["lost"] == 0, ledger
    assert ledger["worker_kills"] >= 4  # every stage's worker was killed at least once
    assert any("broker down" in fault for fault in ledger["faults"])
    assert ledger["dead_letters"] > 0  # the simulator's bad inputs came out as dead letters
    print(f"soak ledger: {json.dumps(ledger)}")


def test_unread_records_do_not_grow_worker_memory(
    stream_settings: StreamSettings, workers, data_dir: Path
) -> None:
    """Nobody reads the records topic while 4 bursts go through: memory stays flat."""
    worker = workers.start()
    peaks = []
    for burst in range(4):
        pages = dev_pages(data_dir, copies=1, tag=f"m{burst}")
        asyncio.run(produce_pages(stream_settings, pages, progress=False))
        peak = 0.0
        # Wait for this burst to come out (counting dead letters too), sampling memory.
        wanted = (burst + 1) * len(pages)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            peak = max(peak, rss_mib(worker.pid))
            done = asyncio.run(
                read_topics(
                    stream_settings,
                    [RECORDS, "deadletters"],
                    idle_s=0.5,
                    deadline_s=10,
                    done=lambda messages, wanted=wanted: len(messages) >= wanted,
                )
            )
            if len(done) >= wanted:
                break
        else:
            pytest.fail(f"burst {burst} did not come out: {workers.logs()}")
        peaks.append(peak)
    print(f"worker peak RSS per burst (MiB): {peaks}")
    assert max(peaks[2:]) <= 1.25 * max(peaks[:2]), peaks
