"""Top-level work functions for the sandbox tests (a child process imports them by name)."""

from __future__ import annotations

import os
import signal
import time

from dripstream.processors.errors import NotHtml
from dripstream.processors.extract.sandbox import memory_error_for


def echo(context: str, item: str) -> str:
    return f"{context}:{item}"


KEPT: list[bytearray] = []


def misbehave(context: object, item: str) -> str:
    """Each item names what the page's work does."""
    if item == "sleep":
        time.sleep(60)
    elif item == "eat":
        hoard = []
        while True:
            hoard.append(bytearray(16 * 1024 * 1024))
    elif item == "eat-then-fail":  # as libxml2 does: a refused allocation, another error
        hoard = []
        try:
            while True:
                hoard.append(bytearray(1024 * 1024))
        except MemoryError:
            raise RuntimeError("unknown error") from None
    elif item == "eat-then-ask":  # what the stages ask when a library's error arrives
        hoard = []
        try:
            while True:
                hoard.append(bytearray(1024 * 1024))
        except MemoryError:
            return type(memory_error_for(RuntimeError("unknown error"))).__name__
    elif item.startswith("keep"):  # memory that outlives the page (as heap fragments do)
        KEPT.append(bytearray(int(item.partition(":")[2] or 160) * 1024 * 1024))
    elif item.startswith("use:"):  # memory the page frees before it ends
        used = bytearray(int(item.partition(":")[2]) * 1024 * 1024)
        del used
    elif item == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif item == "exit":
        os._exit(3)
    elif item == "bad":
        raise NotHtml("not a page")
    elif item == "bug":
        raise KeyError("oops")
    return f"ok:{item}:{os.getpid()}"


WARMED: list[int] = []


def warm() -> None:
    """A warm-up: records the process it ran in."""
    WARMED.append(os.getpid())


def warmed_in(context: object, item: str) -> tuple[list[int], int, int]:
    """Where the warm-up ran, this child's pid and its parent's (the zygote)."""
    return WARMED, os.getpid(), os.getppid()


def fallback_state(context: object, item: str) -> bool:
    """Whether trafilatura's jusText stop words (built on first use) are already built in
    this child, before it extracts anything."""
    from trafilatura import external

    return bool(external.JT_STOPLIST)
