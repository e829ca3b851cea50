"""The per-page sandbox: a page's time, memory or crash costs its own result only."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_work import echo, fallback_state, misbehave, warm, warmed_in

from dripstream.processors.errors import (
    NotHtml,
    PageMemoryExceeded,
    PageTimeout,
    TooLarge,
    WorkerCrashed,
)
from dripstream.processors.extract.fallback import warm_up_extractor
from dripstream.processors.extract.sandbox import InProcess, Limits, Sandbox, memory_error_for


@pytest.fixture(scope="module")
def sandbox():
    """A sandbox whose zygote is a fresh interpreter, as from a threaded caller (a test
    process has freed too much heap to be forked; the forked zygote is tested below, from
    a fresh process)."""
    with Sandbox("ctx", Limits(timeout_s=2.0, memory_mib=256)) as box:
        yield box


FORKED_CALLER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from sandbox_work import echo, misbehave
from dripstream.processors.extract import sandbox
with sandbox.Sandbox("ctx", sandbox.Limits(timeout_s=2.0, memory_mib=256)) as box:
    results = box.map(misbehave, ["one", "sleep", "eat", "segfault", "bug", "two"])
    forked = isinstance(box._zygote.process, sandbox._ForkedZygote)
    results.append(box.map(echo, ["three"])[0])
print(json.dumps({"forked": forked, "results": [
    r if isinstance(r, str) else type(r).__name__ for r in results]}))
"""


def test_a_single_threaded_caller_forks_its_zygote_and_every_limit_still_holds() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED_CALLER, str(Path(__file__).parents[1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["forked"], "a fresh single-threaded process forks its zygote"
    one, slow, hungry, crashed, bug, two, three = report["results"]
    assert one.startswith("ok:one") and two.startswith("ok:two") and three == "ctx:three"
    assert (slow, hungry, crashed, bug) == (
        "PageTimeout",
        "PageMemoryExceeded",
        "PageMemoryExceeded",
        "WorkerCrashed",
    )
    assert "Fatal Python error" not in done.stderr, "a crash is an exit code, not a dump"


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


def test_an_error_raised_at_the_memory_cap_counts_as_memory(sandbox: Sandbox) -> None:
    failed, after = sandbox.map(misbehave, ["eat-then-fail", "fine"])
    assert isinstance(failed, PageMemoryExceeded) and "unknown error" in str(failed)
    assert after.startswith("ok:fine")


def test_the_work_code_can_tell_an_error_at_the_memory_cap(sandbox: Sandbox) -> None:
    assert sandbox.map(misbehave, ["eat-then-ask"]) == ["PageMemoryExceeded"]
    assert memory_error_for(RuntimeError("a bug")) is None  # outside a child: never


def test_a_child_holding_over_a_third_of_a_budget_retires_after_its_page(sandbox: Sandbox) -> None:
    retired = sandbox.retirements
    kept, after = sandbox.map(misbehave, ["keep:160", "fine"])  # of a 256 MiB budget
    assert kept.startswith("ok:keep") and after.startswith("ok:fine")
    assert kept.split(":")[-1] != after.split(":")[-1], "the next page got a fresh child"
    assert sandbox.retirements == retired + 1


def test_a_page_over_its_memory_in_a_used_child_gets_a_fresh_child_first() -> None:
    with Sandbox("ctx", Limits(timeout_s=5.0, memory_mib=256)) as box:
        kept, big, hungry = box.map(misbehave, ["keep:64", "use:224", "eat"])
        assert kept.startswith("ok:keep"), "under a third of a budget kept: the child stays"
        assert big.startswith("ok:use") and big.split(":")[-1] != kept.split(":")[-1]
        assert isinstance(hungry, PageMemoryExceeded), "and a fresh child's error stands"
        assert box.retries == 2 and box.retirements == 0  # the big page, then the bomb


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


def test_an_item_too_big_to_receive_is_too_large_not_a_crash(sandbox: Sandbox) -> None:
    huge, after = sandbox.map(echo, ["x" * (400 * 1024 * 1024), "fine"])
    assert isinstance(huge, TooLarge)
    assert after == "ctx:fine"


def test_children_are_forked_from_one_warm_zygote_so_a_new_child_is_cheap() -> None:
    with Sandbox("ctx", Limits(timeout_s=5.0, memory_mib=256), warm_up=warm) as box:
        [(warmed, first, zygote)] = box.map(warmed_in, ["a"])
        assert warmed == [zygote], "the warm-up ran once, in the zygote, before the fork"
        started = time.monotonic()
        for _ in range(5):  # each crash costs its child
            assert isinstance(box.map(misbehave, ["segfault"])[0], PageMemoryExceeded)
        [(warmed, later, same_zygote)] = box.map(warmed_in, ["b"])
        assert (warmed, same_zygote) == ([zygote], zygote) and later != first
        # The first child, one to run the first crash again (its child had served a page:
        # a death by signal counts as memory), then one after each crash.
        assert box.forks == 7
        assert time.monotonic() - started < 10  # five children, not five interpreters


def test_a_late_warm_up_is_built_once_the_first_child_is_forked_for_the_next_ones() -> None:
    limits = Limits(timeout_s=30.0, memory_mib=256)
    with Sandbox("ctx", limits, late_warm_up=warm_up_extractor) as box:
        assert box.map(fallback_state, ["first"]) == [False], "a lone child never waits for it"
        assert isinstance(box.map(misbehave, ["segfault"])[0], PageMemoryExceeded)
        assert box.map(fallback_state, ["next"]) == [True]
