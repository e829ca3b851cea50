"""Top-level work functions for the sandbox tests (a child process imports them by name)."""

from __future__ import annotations

import os
import signal
import time

from processors.errors import NotHtml


def echo(context: str, item: str) -> str:
    return f"{context}:{item}"


def misbehave(context: object, item: str) -> str:
    """Each item names what the page's work does."""
    if item == "sleep":
        time.sleep(60)
    elif item == "eat":
        hoard = []
        while True:
            hoard.append(bytearray(16 * 1024 * 1024))
    elif item == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif item == "exit":
        os._exit(3)
    elif item == "bad":
        raise NotHtml("not a page")
    elif item == "bug":
        raise KeyError("oops")
    return f"ok:{item}:{os.getpid()}"
