"""Per-page work under a hard time and memory bound: a child process that can be killed.

The CPU stages parse untrusted HTML. Cheap checks before parsing reject most hostile
pages, but only the operating system can bound what a parser does with the rest. A
``Sandbox`` runs ``function(context, item)`` for each item in one long-lived child
process whose data segment is capped (``RLIMIT_DATA``), and waits for each result at
most ``timeout_s``:

- a page that runs past its time is killed with the child: ``PageTimeout``;
- a page that exhausts the memory cap (``MemoryError`` in the child, or the child dying
  because an allocation failed): ``PageMemoryExceeded``;
- a child that died for another reason (a crash in native code): ``WorkerCrashed``.

The child is then restarted and the batch goes on with the next item, so one page can
cost its own result and the restart, never its neighbours' results or the caller's
process. ``InProcess`` is the same interface without a child (tests, trusted input).

The child is a fresh interpreter (``python -m processors.sandbox``) talking over a socket
pair: it inherits no threads, locks or main-module state from the caller (a faust worker,
pytest, a script). Items, contexts and results cross by pickle, once per batch; the
context (settings, tokenizer) is sent once when the child starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from processors.errors import PageError, PageMemoryExceeded, PageTimeout, WorkerCrashed

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")
Function = Callable[[Any, Any], Any]

log = logging.getLogger("dripstream.sandbox")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Per-page bounds: wall time for one item, and the child's data-segment size."""

    timeout_s: float = 15.0
    memory_mib: int = 384


class InProcess(Generic[C]):
    """Runs items in the calling process: no isolation, no limits beyond the function's."""

    def __init__(self, context: C) -> None:
        self.context = context

    def map(self, function: Function, items: Sequence[Any]) -> list[Any | PageError]:
        results: list[Any | PageError] = []
        for item in items:
            try:
                results.append(function(self.context, item))
            except PageError as error:
                results.append(error)
        return results

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> InProcess[C]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def child_main(fd: int, memory_mib: int) -> None:
    """The child's loop: receive the context, then (function, items) requests; send back
    one (index, ok, value) per item as soon as it is done."""
    limit = memory_mib * MIB
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    connection = Connection(fd)
    context = connection.recv()
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        function, items = request
        for index, item in enumerate(items):
            try:
                reply = (index, True, function(context, item))
            except MemoryError:
                reply = (index, False, PageMemoryExceeded(f"over the {memory_mib} MiB limit"))
            except PageError as error:
                reply = (index, False, error)
            except Exception as error:  # a bug: the caller classifies it
                reply = (index, False, WorkerCrashed(f"{type(error).__name__}: {error}"))
            try:
                connection.send(reply)
            except MemoryError:
                connection.send((index, False, PageMemoryExceeded("result over the limit")))


class Sandbox(Generic[C]):
    """A killable child process for per-page work (see the module docstring).

    ``map`` is thread-safe (one batch at a time), so a stream stage can call it from a
    worker thread while its event loop keeps heartbeats and health checks answering.
    """

    def __init__(self, context: C, limits: Limits | None = None) -> None:
        self.context = context
        self.limits = limits or Limits()
        self.restarts = 0
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._connection: Connection | None = None

    def _start(self) -> Connection:
        if self._process is not None and self._process.poll() is None and self._connection:
            return self._connection
        self._stop()
        ours, theirs = socket.socketpair()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "processors.sandbox",
                str(theirs.fileno()),
                str(self.limits.memory_mib),
            ],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            # The caller's import path, so work functions resolve as they do here.
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, sys.path))},
        )
        theirs.close()
        connection = Connection(ours.detach())
        connection.send(self.context)
        self._process, self._connection = process, connection
        return connection

    def _stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
        self._process = self._connection = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def map(self, function: Function, items: Sequence[Any]) -> list[Any | PageError]:
        """One result per item, in order: the function's value or a PageError."""
        with self._lock:
            results: list[Any | PageError] = [None] * len(items)
            start = 0
            while start < len(items):
                start = self._run_from(function, items, start, results)
            return results

    def _run_from(
        self, function: Function, items: Sequence[Any], start: int, results: list[Any]
    ) -> int:
        """Send items[start:]; collect results until done or one fails hard. Returns the
        index to resume from."""
        connection = self._start()
        pending = list(items[start:])
        connection.send((function, pending))
        for offset in range(len(pending)):
            index = start + offset
            deadline = time.monotonic() + self.limits.timeout_s
            error = self._wait(connection, deadline)
            if error is None:
                try:
                    _, _ok, value = connection.recv()
                except (EOFError, OSError):
                    error = self._death()
                else:
                    results[index] = value
                    continue
            results[index] = error
            self.restarts += 1
            self._stop()
            return index + 1
        return len(items)

    def _wait(self, connection: Connection, deadline: float) -> PageError | None:
        """None when a reply is ready; the error to record when the child timed out or
        died first."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return PageTimeout(f"page work exceeded {self.limits.timeout_s:g} s (killed)")
            try:
                if connection.poll(min(left, 0.5)):
                    return None
            except (EOFError, OSError):
                return self._death()
            if self._process is not None and self._process.poll() is not None:
                if connection.poll(0):
                    return None
                return self._death()

    def _death(self) -> PageError:
        process = self._process
        code = None
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(timeout=5)
        log.warning("sandbox child died (exit code %s); restarting", code)
        # An allocation the cap refused ends as SIGSEGV/SIGABRT in native code as often as
        # a MemoryError: both are the page's doing, so both count as memory.
        if code is not None and code < 0:
            return PageMemoryExceeded(
                f"the page's work died with signal {-code} under the "
                f"{self.limits.memory_mib} MiB limit"
            )
        return WorkerCrashed(f"the page's work ended the child process (exit code {code})")

    def close(self) -> None:
        """Stop the child (idempotent)."""
        with self._lock:
            if self._connection is not None:
                with contextlib.suppress(OSError):
                    self._connection.send(None)
            self._stop()

    def __enter__(self) -> Sandbox[C]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PageRunner = InProcess[Any] | Sandbox[Any]


if __name__ == "__main__":
    child_main(int(sys.argv[1]), int(sys.argv[2]))
