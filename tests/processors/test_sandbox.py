"""The per-page sandbox: a page's time, memory or crash costs its own result only."""

from __future__ import annotations

import time

import pytest
from sandbox_work import echo, misbehave

from processors.errors import NotHtml, PageMemoryExceeded, PageTimeout, WorkerCrashed
from processors.sandbox import InProcess, Limits, Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox("ctx", Limits(timeout_s=2.0, memory_mib=256)) as box:
        yield box


def test_results_come_back_in_order_with_the_context(sandbox: Sandbox) -> None:
    assert sandbox.map(echo, ["a", "b", "c"]) == ["ctx:a", "ctx:b", "ctx:c"]


def test_a_page_past_its_time_is_killed_and_its_neighbours_still_finish(
    sandbox: Sandbox,
) -> None:
    started = time.monotonic()
    first, slow, after = sandbox.map(misbehave, ["one", "sleep", "two"])
    assert time.monotonic() - started < 15
    assert first.startswith("ok:one") and after.startswith("ok:two")
    assert isinstance(slow, PageTimeout)
    assert first.split(":")[2] != after.split(":")[2], "the child was replaced"


def test_a_page_over_the_memory_limit_is_a_typed_error(sandbox: Sandbox) -> None:
    hungry, after = sandbox.map(misbehave, ["eat", "fine"])
    assert isinstance(hungry, PageMemoryExceeded)
    assert after.startswith("ok:fine")


@pytest.mark.parametrize("item", ["segfault", "exit"])
def test_a_crashing_child_costs_one_result(sandbox: Sandbox, item: str) -> None:
    crashed, after = sandbox.map(misbehave, [item, "fine"])
    assert isinstance(crashed, PageMemoryExceeded | WorkerCrashed)
    assert after.startswith("ok:fine")


def test_page_errors_and_bugs_come_back_typed(sandbox: Sandbox) -> None:
    bad, bug, fine = sandbox.map(misbehave, ["bad", "bug", "fine"])
    assert isinstance(bad, NotHtml)
    assert isinstance(bug, WorkerCrashed) and "KeyError" in str(bug)
    assert fine.startswith("ok:fine")


def test_in_process_runner_has_the_same_interface() -> None:
    runner = InProcess("ctx")
    assert runner.map(echo, ["a"]) == ["ctx:a"]
    [bad] = runner.map(misbehave, ["bad"])
    assert isinstance(bad, NotHtml)


def test_an_item_too_big_to_receive_is_a_memory_error_not_a_crash(sandbox: Sandbox) -> None:
    huge, after = sandbox.map(echo, ["x" * (400 * 1024 * 1024), "fine"])
    assert isinstance(huge, PageMemoryExceeded)
    assert after == "ctx:fine"
