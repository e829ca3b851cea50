"""Per-page work under a hard time and memory bound: a child process that can be killed.

The CPU stages parse untrusted HTML. Cheap checks before parsing reject most hostile
pages, but only the operating system can bound what a parser does with the rest. A
``Sandbox`` runs ``function(context, item)`` for each item in a child process whose data
segment is capped (``RLIMIT_DATA``), and waits for each result at most ``timeout_s``:

- a page that runs past its time is killed with the child: ``PageTimeout``;
- a page that exhausts the memory cap (``MemoryError`` in the child, or the child dying
  because an allocation failed): ``PageMemoryExceeded``; an item too large for the
  child to receive at all: ``TooLarge``;
- a child that died for another reason (a crash in native code): ``WorkerCrashed``.

The batch then goes on with a new child, so one page costs its own result and a fork,
never its neighbours' results or the caller's process. What earlier pages left in a
child's heap counts against a page's budget, so a child retires after a page that left
its heap a third of a budget grown, and a page over its memory in a used child runs
again in a fresh one before its error stands. Items go one at a time, so the caller
holds at most one pickled page. ``InProcess`` is the same interface without a child
(tests, trusted input).

Children are forked from a zygote that imports the work's module and receives the context
once, then forks a child per request over a socket pair (the child's socket is passed
with the request), so a new child costs a fork, not an interpreter's start. A caller that
runs one thread and holds little free heap (the command line) forks the zygote from
itself, so nothing is imported twice; any other (a faust worker, a threaded script, a
process that has freed much memory) starts it as a fresh interpreter
(``python -m dripstream.processors.extract.sandbox``), which inherits no threads or locks.
The zygote never runs a page; it reaps its children and reports their exit codes.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import importlib
import logging
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from dripstream.processors.errors import (
    PageError,
    PageMemoryExceeded,
    PageTimeout,
    TooLarge,
    WorkerCrashed,
)

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")
Function = Callable[[Any, Any], Any]

log = logging.getLogger("dripstream.sandbox")
_data_limit: int | None = None  # the data segment cap, in a sandbox child
MIB = 1024 * 1024
# libxml2 reports a refused allocation as e.g. XPathEvalError("unknown error"): an error
# raised while the data segment is this close to the cap counts as memory.
NEAR_LIMIT_BYTES = 8 * 1024 * 1024
MEMORY_EXIT = 75  # the child's exit code when a request could not be received for memory
FREE_HEAP_SHARE = 8  # a caller with more free heap than a page's budget / 8 is not forked
RETAINED_SHARE = 3  # a child whose heap stays a budget / 3 above its start retires
STARTUP_TIMEOUT_S = 120.0  # a fresh child imports the work's modules before its first page


@dataclass(frozen=True)
class Limits:
    """Per-page bounds: wall time for one item, and the memory a page may add to the
    child's data segment beyond what its code and context hold."""

    timeout_s: float = 15.0
    memory_mib: int = 160


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

    def start(self, function: Function) -> None:
        """Nothing to start."""

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> InProcess[C]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def zygote_main(fd: int, memory_mib: int) -> None:
    """The zygote's loop: receive the context and import the work's module once, then
    fork a child per ``"fork"`` request (its socket arrives with the request) and reap
    one per ``("wait", pid)``; EOF or None ends it, and its children with it."""
    connection = Connection(fd)
    control = socket.socket(fileno=os.dup(fd))
    context, module, warm_up, late_warm_up = connection.recv()
    faulthandler.disable()  # a page's crash is reported by its exit code, not a dump
    importlib.import_module(module)  # before "ready": imports are not a page's time
    if warm_up is not None:
        warm_up()  # what page work loads on first use, loaded once for every child
    gc.freeze()  # the children's collections leave the shared objects (and their pages) be
    connection.send("ready")
    children: set[int] = set()
    forked = 0
    try:
        while True:
            try:
                request = connection.recv()
            except EOFError:
                return
            if request is None:
                return
            if request == "fork":
                _, fds, _, _ = socket.recv_fds(control, 1, 1)
                if forked and late_warm_up is not None:  # a second child: more may follow
                    with contextlib.suppress(Exception):  # a child builds it on first use
                        late_warm_up()
                    late_warm_up = None
                    gc.freeze()
                forked += 1
                pid = os.fork()
                if pid == 0:
                    connection.close()
                    control.close()
                    try:
                        _serve(Connection(fds[0]), context, memory_mib)
                    finally:
                        os._exit(0)
                os.close(fds[0])
                children.add(pid)
                connection.send(pid)
            else:
                _, pid = request
                children.discard(pid)
                connection.send(_exit_code(pid))
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _exit_code(pid: int) -> int | None:
    """A child's exit code as ``Popen.returncode`` gives it (-N: killed by signal N)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def _serve(connection: Connection, context: Any, memory_mib: int) -> None:
    """A forked child's loop: one (function, item) request at a time, answered with
    (ok, value, retiring); it leaves after a page that left its heap grown."""
    # The budget is per page, on top of what the code and the context (a tokenizer can
    # take a hundred MiB) already hold.
    global _data_limit
    budget = memory_mib * MIB
    base = _data_bytes()
    # Free heap inherited from the zygote is reused before the segment grows: it is
    # budget too (at most ``FREE_HEAP_SHARE`` of it: a zygote forked from its caller).
    _data_limit = base + budget - min(_free_heap(), budget // FREE_HEAP_SHARE)
    resource.setrlimit(resource.RLIMIT_DATA, (_data_limit, _data_limit))
    connection.send("ready")
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        except MemoryError:  # the request itself does not fit: the pipe is out of step
            os._exit(MEMORY_EXIT)
        if request is None:
            return
        function, item = request
        del request
        try:
            reply: tuple[bool, Any] = (True, function(context, item))
        except MemoryError:
            reply = (False, PageMemoryExceeded(f"over the {memory_mib} MiB limit"))
        except PageError as error:
            reply = (False, error)
        except Exception as error:  # a bug, or a library's report of a failed allocation
            reply = (False, memory_error_for(error) or WorkerCrashed(_describe(error)))
        del item
        retiring = _grown(base, budget // RETAINED_SHARE)
        try:
            connection.send((*reply, retiring))
        except MemoryError:
            connection.send((False, PageMemoryExceeded("the result is over the limit"), True))
            return
        if retiring:
            return


def memory_error_for(error: Exception) -> PageMemoryExceeded | None:
    """In a sandbox child at its memory cap, the error as PageMemoryExceeded (libxml2, for
    one, reports a refused allocation as ``XPathEvalError("unknown error")``); else None."""
    if _data_limit is None or _data_bytes() <= _data_limit - NEAR_LIMIT_BYTES:
        return None
    return PageMemoryExceeded(f"at the page memory limit: {_describe(error)}")


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


def _grown(base: int, allowance: int) -> bool:
    """Whether the heap kept more than ``allowance`` over ``base`` after a page (fragments
    the allocator did not give back even when asked): the next page would start short of
    its budget, so the child leaves and the next page gets a fresh fork."""
    if _data_bytes() - base <= allowance:
        return False
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
    return _data_bytes() - base > allowance


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _free_heap() -> int:
    """Bytes malloc holds free in this process's heap (glibc's ``mallinfo2``; 0 where
    there is none)."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return 0
    mallinfo2.restype = _MallInfo2
    return int(mallinfo2().fordblks)


_status: tuple[int, int] | None = None  # (pid, fd of its /proc status), read again per page


def _data_bytes() -> int:
    """This process's data segment (what RLIMIT_DATA counts), from /proc (the file is
    opened once per process and read again in place: a child reads it after every page)."""
    global _status
    if _status is None or _status[0] != os.getpid():  # a fork's inherited fd is its parent's
        _status = (os.getpid(), os.open(f"/proc/{os.getpid()}/status", os.O_RDONLY))
    status = os.pread(_status[1], 8192, 0)
    start = status.find(b"VmData:")
    if start < 0:
        return 0
    return int(status[start + 7 : status.index(b"\n", start)].split()[0]) * 1024


def _fork_caller(memory_mib: int) -> bool:
    """Whether the zygote may be forked from the caller: it runs one thread (a fork
    inherits no lock held mid-use) and holds little free heap (which the children would
    reuse beyond their budget): under ``1 / FREE_HEAP_SHARE`` of a page's."""
    return threading.active_count() == 1 and _free_heap() <= memory_mib * MIB // FREE_HEAP_SHARE


class _ForkedZygote:
    """A zygote forked from the caller, with the ``Popen`` calls ``_Zygote`` makes."""

    def __init__(self, fd: int, callers_fd: int, memory_mib: int) -> None:
        self.pid = os.fork()
        if self.pid == 0:
            os.close(callers_fd)
            code = 1
            try:
                zygote_main(fd, memory_mib)
                code = 0
            finally:
                os._exit(code)  # never back into the caller's code, nor its exit handlers
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        """Its exit code, waiting at most ``timeout`` (woken by its exit, not a poll)."""
        if self.poll() is None:
            exited = os.pidfd_open(self.pid)
            try:
                select.select([exited], [], [], timeout)
            finally:
                os.close(exited)
            if self.poll() is None:
                raise subprocess.TimeoutExpired("zygote", timeout)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 9)


class _Zygote:
    """The process that forks the children (``zygote_main``): forked from the caller
    where ``_fork_caller`` allows (the command line: nothing to import again), else a
    fresh interpreter (no threads or locks inherited)."""

    def __init__(
        self,
        context: Any,
        module: str,
        memory_mib: int,
        warm_ups: tuple[Callable[[], None] | None, Callable[[], None] | None],
    ) -> None:
        ours, theirs = socket.socketpair()
        self.process: subprocess.Popen[bytes] | _ForkedZygote
        if _fork_caller(memory_mib):
            self.process = _ForkedZygote(theirs.fileno(), ours.fileno(), memory_mib)
        else:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dripstream.processors.extract.sandbox",
                    str(theirs.fileno()),
                    str(memory_mib),
                ],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                # The caller's import path, so work functions resolve as they do here.
                env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, sys.path))},
            )
        theirs.close()
        self.control = ours
        self.connection = Connection(os.dup(ours.fileno()))
        try:
            self.connection.send((context, module, *warm_ups))
            ready = self.connection.poll(STARTUP_TIMEOUT_S) and self.connection.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.close()
            raise RuntimeError(f"the sandbox did not start within {STARTUP_TIMEOUT_S} s")

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self) -> tuple[int, Connection]:
        """A new child, and the connection to it once it is ready."""
        ours, theirs = socket.socketpair()
        try:
            self.connection.send("fork")
            socket.send_fds(self.control, [b"F"], [theirs.fileno()])
            pid = self.connection.recv()
        finally:
            theirs.close()
        connection = Connection(ours.detach())
        if not (connection.poll(STARTUP_TIMEOUT_S) and connection.recv() == "ready"):
            raise RuntimeError("a sandbox child did not start")
        return pid, connection

    def exit_code(self, pid: int) -> int | None:
        """Reap a child (it has ended or been killed); its exit code."""
        try:
            self.connection.send(("wait", pid))
            return self.connection.recv()
        except (EOFError, OSError):
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.send(None)
        self.connection.close()
        self.control.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Sandbox(Generic[C]):
    """A killable child process for per-page work (see the module docstring).

    ``map`` is thread-safe (one batch at a time), so a stream stage can call it from a
    worker thread while its event loop keeps heartbeats and health checks answering.
    """

    def __init__(
        self,
        context: C,
        limits: Limits | None = None,
        warm_up: Callable[[], None] | None = None,
        late_warm_up: Callable[[], None] | None = None,
    ) -> None:
        """``warm_up`` (a module-level function) runs once in the zygote, so every child
        starts with what it loads; ``late_warm_up`` runs there before the second child is
        forked, for the children from then on (what a child may never need: a batch that
        one child serves never pays for it)."""
        self.context = context
        self.limits = limits or Limits()
        self.warm_ups = (warm_up, late_warm_up)
        self.restarts = 0
        self.retirements = 0  # children that left on their own after a page (heap grown)
        self.retries = 0  # pages over their memory in a used child, run again in a fresh one
        self.forks = 0
        self._served = 0  # items the current child has answered
        self._lock = threading.Lock()
        self._zygote: _Zygote | None = None
        self._pid: int | None = None
        self._connection: Connection | None = None

    def _start(self, function: Function) -> Connection:
        if self._connection is not None:
            return self._connection
        for attempt in (1, 2):  # a zygote that died is started again, once
            if self._zygote is None or not self._zygote.alive():
                if self._zygote is not None:
                    self._zygote.close()
                self._zygote = _Zygote(
                    self.context, function.__module__, self.limits.memory_mib, self.warm_ups
                )
            try:
                self._pid, self._connection = self._zygote.fork()
            except (EOFError, OSError, RuntimeError):
                if attempt == 2:
                    raise
                self._zygote.close()
                self._zygote = None
                continue
            self.forks += 1
            self._served = 0
            return self._connection
        raise AssertionError("unreachable")

    def _stop(self) -> int | None:
        """End the child (killed if still there) and reap it; its exit code."""
        if self._connection is not None:
            self._connection.close()
        code = None
        if self._pid is not None and self._zygote is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, 9)
            code = self._zygote.exit_code(self._pid)
        self._pid = self._connection = None
        return code

    @property
    def pid(self) -> int | None:
        return self._pid

    def start(self, function: Function) -> None:
        """Start the zygote and the first child now, as the first item would, so that it
        finds them warm; a failure is logged and left to the first item to retry."""
        with self._lock:
            try:
                self._start(function)
            except (EOFError, OSError, RuntimeError) as error:
                log.warning("the sandbox did not start ahead of its first page: %s", error)

    def map(self, function: Function, items: Sequence[Any]) -> list[Any | PageError]:
        """One result per item, in order: the function's value or a PageError. Items go
        to the child one at a time, so the caller never holds more than one pickled."""
        with self._lock:
            return [self._run(function, item) for item in items]

    def _run(self, function: Function, item: Any) -> Any | PageError:
        used = self._connection is not None and self._served > 0
        result = self._attempt(function, item)
        if used and isinstance(result, PageMemoryExceeded):
            # What earlier pages left in the child's heap counts against this page's
            # budget: the memory error stands only when a fresh child gives it too.
            self.retries += 1
            self._stop()
            result = self._attempt(function, item)
        return result

    def _attempt(self, function: Function, item: Any) -> Any | PageError:
        connection = self._start(function)
        try:
            connection.send((function, item))
        except OSError:  # the child died between requests
            error: PageError | None = self._death()
        else:
            error = self._wait(connection, time.monotonic() + self.limits.timeout_s)
        if error is None:
            try:
                _ok, value, retiring = connection.recv()
            except (EOFError, OSError):
                error = self._death()
            else:
                self._served += 1
                if retiring:
                    self.retirements += 1
                    self._stop()
                return value
        self.restarts += 1
        self._stop()
        return error

    def _wait(self, connection: Connection, deadline: float) -> PageError | None:
        """None when a reply is ready; the error to record when the child timed out or
        died first."""
        reply = select.poll()  # one poll object, not a selector per wait: a page's round trip
        try:
            reply.register(connection.fileno(), select.POLLIN)
        except OSError:
            return self._death()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return PageTimeout(f"page work exceeded {self.limits.timeout_s:g} s (killed)")
            try:
                if reply.poll(min(left, 0.5) * 1000):
                    return None  # a reply, or the end of a child that died: recv tells
            except OSError:
                return self._death()

    def _death(self) -> PageError:
        code = self._stop()
        log.warning("sandbox child died (exit code %s); restarting", code)
        # An allocation the cap refused ends as SIGSEGV/SIGABRT in native code as often as
        # a MemoryError: both are the page's doing, so both count as memory.
        if code == MEMORY_EXIT:  # the input itself could not be received
            return TooLarge(f"the input itself is over the {self.limits.memory_mib} MiB limit")
        if code is not None and code < 0:
            return PageMemoryExceeded(
                f"the page's work died with signal {-code} under the "
                f"{self.limits.memory_mib} MiB limit"
            )
        return WorkerCrashed(f"the page's work ended the child process (exit code {code})")

    def close(self) -> None:
        """Stop the child and the zygote (idempotent)."""
        with self._lock:
            if self._connection is not None:
                with contextlib.suppress(OSError):
                    self._connection.send(None)
            self._stop()
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    def __enter__(self) -> Sandbox[C]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PageRunner = InProcess[Any] | Sandbox[Any]


if __name__ == "__main__":
    # Run the importable module's copy, so the work code sees the child's memory cap.
    from dripstream.processors.extract.sandbox import zygote_main as main

    main(int(sys.argv[1]), int(sys.argv[2]))
