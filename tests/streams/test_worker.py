"""The worker process: its threads share a capped number of malloc arenas."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dripstream.streams.settings import StreamSettings

# Eight threads allocate and free buffers of 64 KiB (glibc's heap, under its mmap
# threshold), then glibc describes its arenas; the script prints how many there were.
ARENAS_AFTER_THREADS = """
import ctypes, sys, tempfile, threading
from dripstream.streams.worker import cap_malloc_arenas
cap_malloc_arenas(int(sys.argv[1]))
barrier = threading.Barrier(8)
def work():
    barrier.wait()
    for _ in range(200):
        held = [bytearray(65536) for _ in range(8)]
        del held
threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile() as report:
    stream = libc.fopen(report.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(stream))
    libc.fclose(ctypes.c_void_p(stream))
    print(open(report.name).read().count("<heap nr="))
"""


def _arenas(cap: int) -> int:
    environment = {key: value for key, value in os.environ.items() if key != "MALLOC_ARENA_MAX"}
    result = subprocess.run(
        [sys.executable, "-c", ARENAS_AFTER_THREADS, str(cap)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(result.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_workers_threads_share_a_capped_number_of_malloc_arenas() -> None:
    cap = StreamSettings.from_env({}).malloc_arenas
    assert _arenas(0) > cap, "glibc's own rule gives threads arenas of their own"
    assert _arenas(cap) <= cap
