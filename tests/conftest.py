"""Shared fixtures and checks: no stale compiled module, the development data beside the
repository (../shared/data), a real Apache Kafka broker for the integration tests, and
worker processes.

The broker is started with the project's own script (jars from Maven Central) unless one
is already running; every test gets its own topic prefix and consumer groups.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dripstream.processors.native import stale_extensions
from dripstream.streams.kafka import create_topics
from dripstream.streams.settings import StreamSettings

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to test a compiled module older than its source: Python would import the
    extension, and the run would test code that is no longer there."""
    stale = stale_extensions()
    if stale:
        pytest.exit(
            "stale compiled modules (rebuild: make compile):\n  " + "\n  ".join(stale),
            returncode=2,
        )


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "webmainbench_sample.jsonl").exists():
        pytest.fail(f"development data not found at {DATA_DIR}")
    return DATA_DIR


ROOT = Path(__file__).resolve().parents[1]
BROKER = ["bash", str(ROOT / "scripts" / "broker.sh")]


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    started = subprocess.run([*BROKER, "status"], capture_output=True).returncode != 0
    if started:
        result = subprocess.run([*BROKER, "up"], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.fail(f"the local Kafka broker did not start:\n{result.stdout}{result.stderr}")
    yield os.environ.get("DRIPSTREAM_BROKERS", "127.0.0.1:9092")
    if started:
        subprocess.run([*BROKER, "down"], capture_output=True)


@pytest.fixture
def stream_settings(kafka_broker: str) -> StreamSettings:
    """Settings with a fresh topic prefix and group prefix; topics already created."""
    run = uuid.uuid4().hex[:10]
    settings = StreamSettings.from_env(
        {"DRIPSTREAM_BROKERS": kafka_broker},
        topic_prefix=f"test-{run}.",
        group_prefix=f"test-{run}-",
        web_port=0,
    )
    asyncio.run(create_topics(settings))
    return settings


class Workers:
    """Worker processes of one test, stopped (or killed) at the end."""

    def __init__(self, settings: StreamSettings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(
        self, stages: str = "simplify,label,reconstruct,fallback", **env: str
    ) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ,
            "DRIPSTREAM_BROKERS": self.settings.brokers,
            "DRIPSTREAM_TOPIC_PREFIX": self.settings.topic_prefix,
            "DRIPSTREAM_GROUP_PREFIX": self.settings.group_prefix,
            "DRIPSTREAM_STAGES": stages,
            "DRIPSTREAM_WEB_PORT": "0",
            "DRIPSTREAM_DATA_DIR": str(self.log_dir / "data"),
            **env,
        }
        log = (self.log_dir / f"worker-{len(self.processes)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "dripstream.streams.cli", "worker"],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-3000:]
            for path in sorted(self.log_dir.glob("worker-*.log"))
        )

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def workers(stream_settings: StreamSettings, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(stream_settings, tmp_path)
    yield pool
    pool.stop_all()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers from what a test needs, so the fast path can leave it out: ``kafka`` for
    the real broker (Java; started by the tests), ``vllm`` for the vLLM CPU build."""
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if "kafka_broker" in needs:
            item.add_marker(pytest.mark.kafka)
        if "vllm_installed" in needs:
            item.add_marker(pytest.mark.vllm)
