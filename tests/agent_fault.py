"""A worker whose stage agents crash on a marked message: ``python tests/agent_fault.py``
(same settings as ``dripstream worker``). A message keyed ``kill-agent`` raises inside the
agent, outside the stages' own error handling, as a bug in the wiring or a failed
delivery would; the process keeps running."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dripstream.streams.app
from dripstream.streams.cli import main

KILL_KEY = b"kill-agent"


class AgentKilled(RuntimeError):
    """The crash."""


_inbound = dripstream.streams.app.inbound


def inbound(event):  # type: ignore[no-untyped-def]
    if event.message.key == KILL_KEY:
        raise AgentKilled("killed by tests/agent_fault.py")
    return _inbound(event)


dripstream.streams.app.inbound = inbound

if __name__ == "__main__":
    sys.exit(main(["worker"]))
