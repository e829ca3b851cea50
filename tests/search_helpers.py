"""A private local OpenSearch server for tests (scripts/search.sh): its own state folder
and ports, so stopping it disturbs nobody; and waiting for a condition."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEARCH = ["bash", str(ROOT / "scripts" / "search.sh")]


def free_port() -> int:
    """A loopback TCP port free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Engine:
    """A private local OpenSearch: up, down, and its URL."""

    def __init__(self, home: Path) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            "DRIPSTREAM_SEARCH_HOME": str(home),
            "DRIPSTREAM_SEARCH_PORT": str(self.port),
            "DRIPSTREAM_SEARCH_TRANSPORT_PORT": str(free_port()),
        }
        self.url = f"http://127.0.0.1:{self.port}"

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SEARCH, command], env=self.env, capture_output=True, text=True)

    def up(self) -> None:
        result = self.run("up")
        if result.returncode != 0:
            pytest.fail(f"the search engine did not start:\n{result.stdout}{result.stderr}")

    def down(self) -> None:
        self.run("down")


def wait_until(
    check: Callable[[], bool], deadline_s: float, what: str, logs: Callable[[], str]
) -> None:
    """Return once ``check()`` is true; fail the test with ``logs()`` past the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # the index not there yet, the engine restarting
            pass
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}\n{logs()}")


@pytest.fixture(scope="module", name="engine")
def engine_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    server = Engine(tmp_path_factory.mktemp("search-engine"))
    server.up()
    yield server
    server.down()
