"""What ``/healthz`` and the lag gauge read from a running faust app.

A stage agent runs as a faust actor under a supervisor that replaces an actor which
crashed. The replacement goes on reading the stream, but the crashed batch's messages
were never acknowledged and are not delivered again: the partition's committed offset
stops there until the worker restarts (at-least-once then replays them). So an agent
counts as dead from its first crash, and ``/healthz`` fails until the liveness probe has
the pod restarted. It also counts as dead while its actor, its supervisor or the agent
itself is crashed, or when an actor's task has ended (nothing restarts that).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from dripstream.streams import metrics

AgentFun = Callable[[Any], Awaitable[None]]


class AgentHealth:
    """Crashes of one app's agents (``watch``) and what ``/healthz`` reports."""

    def __init__(self) -> None:
        self.crashes: dict[str, str] = {}

    def watch(self, name: str, agent: AgentFun) -> AgentFun:
        """``agent`` that records its crash (anything but a cancellation) and re-raises."""

        async def watched(stream: Any) -> None:
            try:
                await agent(stream)
            except asyncio.CancelledError:
                raise
            except BaseException as error:
                self.crashes[name] = f"{type(error).__name__}: {error}"
                metrics.AGENT_CRASHES.labels(name).inc()
                raise

        return watched

    def dead_agents(self, app: Any) -> dict[str, str]:
        """Agent name -> why it no longer (reliably) processes its topic."""
        dead = dict(self.crashes)
        for name, agent in app.agents.items():
            supervisor = agent.supervisor
            if name in dead or supervisor is None:  # None: not started yet, or stopping
                continue
            if agent.crashed or supervisor.crashed:
                dead[name] = "crashed"
                continue
            for actor in list(getattr(supervisor, "_services", None) or agent._actors):
                task = getattr(actor, "actor_task", None)
                if actor.crashed or (task is not None and task.done()):
                    dead[name] = "actor crashed" if actor.crashed else "actor ended"
                    break
        return dead


def update_lag(app: Any) -> None:
    """``dripstream_consumer_lag``: per assigned partition, the messages between the
    partition's end (as last fetched) and this worker's committed position."""
    consumer = getattr(app, "_consumer", None)  # never create one here
    metrics.CONSUMER_LAG.clear()
    if consumer is None:
        return
    try:
        assigned = consumer.assignment()
    except Exception:  # not subscribed yet, or rebalancing
        return
    committed = getattr(consumer, "_committed_offset", {})
    for tp in assigned:
        try:
            end = consumer.highwater(tp)
        except Exception:
            continue
        if end is None:
            continue
        position = committed.get(tp)  # the next offset to process, as committed
        if position is not None:
            metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(0, end - position))
