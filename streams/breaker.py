"""The crash-loop breaker: a message that kills its worker before the worker finishes it
(a value that decompresses past the pod's memory limit while it is fetched, a fault in
native code) would stall its partition forever, the worker restarted and killed again at
the same offset.

Before anything is fetched after a partition assignment, the worker writes the offset it
is about to read on each of its partitions to ``crash-ledger.json`` in its data dir
(``DRIPSTREAM_DATA_DIR``: one per worker; in k8s an emptyDir, which outlives container
restarts). A clean stop clears the ledger. A partition found in it again at the same
offset, with a message still there, means the worker died there. After
``DRIPSTREAM_CRASH_LOOP_LIMIT`` such deaths the message is dead-lettered by reference
(``CrashLoop``: topic, partition, offset; its value is never read) and the partition
resumes after it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dripstream.processors.errors import PageError

log = logging.getLogger("dripstream.breaker")
LEDGER_NAME = "crash-ledger.json"


class CrashLoop(PageError):
    """The worker died this many times at this message before finishing it."""

    reason = "crash_loop"


@dataclass(frozen=True)
class Trip:
    """A message to skip: the worker died ``deaths`` times at ``offset``."""

    topic: str
    partition: int
    offset: int
    deaths: int

    def error(self) -> CrashLoop:
        return CrashLoop(
            f"the worker died {self.deaths} times at {self.topic}[{self.partition}] offset "
            f"{self.offset} before finishing it; skipped by reference, its value not read"
        )


class CrashLedger:
    """The offsets a worker is about to read, kept across its deaths (module docstring).

    ``starting`` takes each assigned partition's (next offset, end offset) and returns the
    partitions whose next message has now killed the worker ``limit`` times; the ledger
    is on disk (fsync'd) before it returns, so a death during the fetch that follows is
    counted."""

    def __init__(self, folder: Path, limit: int) -> None:
        self.path = folder / LEDGER_NAME
        self.limit = limit
        self.entries: dict[str, dict[str, int]] = self._load()

    def _load(self) -> dict[str, dict[str, int]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.warning("crash ledger %s unreadable (%s): starting afresh", self.path, error)
            return {}
        return {
            key: {"offset": int(entry["offset"]), "starts": int(entry["starts"])}
            for key, entry in data.items()
            if isinstance(entry, dict) and {"offset", "starts"} <= entry.keys()
        }

    def starting(self, positions: Mapping[tuple[str, int], tuple[int, int]]) -> list[Trip]:
        trips = []
        for (topic, partition), (offset, end) in positions.items():
            key = f"{topic}:{partition}"
            entry = self.entries.get(key)
            starts = entry["starts"] + 1 if entry and entry["offset"] == offset else 1
            if offset >= end:
                starts = 1  # nothing to read: no message can be at fault
            if starts > self.limit:
                trips.append(Trip(topic, partition, offset, starts - 1))
                offset, starts = offset + 1, 1
            self.entries[key] = {"offset": offset, "starts": starts}
        self._save()
        return trips

    def release(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Partitions given up cleanly (a rebalance took them): no death to count."""
        for topic, partition in partitions:
            self.entries.pop(f"{topic}:{partition}", None)
        self._save()

    def clear(self) -> None:
        """A clean stop."""
        self.entries = {}
        self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        with partial.open("w") as out:
            json.dump(self.entries, out, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, self.path)
