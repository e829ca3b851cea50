"""Worker health on the real broker: /healthz says ok while every stage agent runs and
fails (503, naming the agent) once one has died; /metrics carries the standard process
and Python series and the consumer lag."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from agent_fault import KILL_KEY
from stream_helpers import wait_for_records

from dripstream.processors.native import compiled_modules
from dripstream.streams import metrics
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import produce_pages
from dripstream.topics.catalog import PAGES
from dripstream.topics.codecs import to_msgpack
from dripstream.topics.records import RawPage

ROOT = Path(__file__).resolve().parents[2]
PAGE = b"<html><body><article><h1>Harbour</h1><p>Boats leave at dawn.</p></article></body>"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _wait_for(port: int, path: str, want: int, deadline_s: float) -> tuple[int, str]:
    deadline = time.monotonic() + deadline_s
    last: tuple[int, str] = (0, "")
    while time.monotonic() < deadline:
        try:
            last = _get(port, path)
            if last[0] == want:
                return last
        except OSError:
            pass
        time.sleep(0.5)
    return last


async def _send(settings: StreamSettings, key: bytes, value: bytes) -> None:
    from dripstream.streams.kafka import producer

    client = producer(settings)
    await client.start()
    try:
        await client.send_and_wait(settings.topic_prefix + PAGES, value, key=key)
    finally:
        await client.stop()


def test_process_and_python_metrics_are_exported() -> None:
    text = metrics.render().decode()
    for series in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "python_info",
        "python_gc_objects_collected_total",
    ):
        assert f"\n{series}" in text, series


@pytest.mark.kafka
def test_healthz_fails_when_a_stage_agent_has_died(
    stream_settings: StreamSettings, tmp_path: Path
) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "DRIPSTREAM_BROKERS": stream_settings.brokers,
        "DRIPSTREAM_TOPIC_PREFIX": stream_settings.topic_prefix,
        "DRIPSTREAM_GROUP_PREFIX": stream_settings.group_prefix,
        "DRIPSTREAM_STAGES": "simplify,label,reconstruct,fallback",
        "DRIPSTREAM_WEB_PORT": str(port),
        "DRIPSTREAM_DATA_DIR": str(tmp_path / "data"),
    }
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "agent_fault.py")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    try:
        # Healthy while it works: a page becomes a record, /healthz says ok.
        page = RawPage(url="https://harbour.example/", html=PAGE)
        asyncio.run(produce_pages(stream_settings, [page], progress=False))
        assert wait_for_records(stream_settings, 1, deadline_s=120) == 1
        status, body = _wait_for(port, "/healthz", 200, 30)
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        deadline = time.monotonic() + 40  # the lag gauge is refreshed every 10 s
        while "dripstream_consumer_lag{" not in (text := _get(port, "/metrics")[1]):
            assert time.monotonic() < deadline, text[-2000:]
            time.sleep(1)
        assert "process_resident_memory_bytes" in text
        simplify = "dripstream.processors.extract.simplify"
        compiled = float(compiled_modules()[simplify])  # the same install
        assert f'dripstream_compiled_module{{module="{simplify}"}} {compiled}' in text

        # A fatal error kills the simplify agent; the process lives on, /healthz says so.
        asyncio.run(_send(stream_settings, KILL_KEY, to_msgpack(page)))
        status, body = _wait_for(port, "/healthz", 503, 60)
        logs = (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
        assert status == 503, logs
        assert json.loads(body) == {
            "status": "dead",
            "dead_agents": {"dripstream.simplify": "AgentKilled: killed by tests/agent_fault.py"},
        }
        # It stays dead (the crashed batch is never acknowledged) until restarted.
        time.sleep(6)  # past the supervisor's replacement of the actor
        assert _get(port, "/healthz")[0] == 503
        assert (
            'dripstream_agent_crashes_total{agent="dripstream.simplify"} 1.0'
            in (_get(port, "/metrics")[1])
        )
        assert worker.poll() is None
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
