"""The faust app: one agent per chosen stage, moving its handler's outputs between topics.

The app knows no stage by name: it builds each chosen stage from its declaration
(``dripstream.streams.stages``) with what this worker provides (``worker_provisions``),
and derives in-memory chaining from the stages' declared routes.

Delivery is at-least-once: every agent takes micro-batches (``noack_take``), awaits the
broker's acknowledgement of every output the batch caused, and only then acks the
batch's messages, strictly in offset order, so a committed offset never passes an
unfinished message (faust-streaming#606 needs out-of-order acks; there are none).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import faust
from aiokafka.errors import KafkaError
from faust.types import TP

from dripstream.processors.extract.sandbox import Sandbox
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.registry import build_labeller
from dripstream.processors.pipeline import warm_up
from dripstream.streams import health, metrics
from dripstream.streams.breaker import CrashLedger
from dripstream.streams.envelope import ERROR_HEADER, Inbound, Outbound, dead_letter_by_reference
from dripstream.streams.kafka import FETCH_BYTES, SourceReader, next_offsets, ssl_context
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import STAGES, Handler, PageRunners, Provisions, Stage, chosen
from dripstream.streams.template_store import TemplateStore
from dripstream.topics.catalog import ALL_TOPICS, MAX_MESSAGE_BYTES

log = logging.getLogger("dripstream.app")
LAG_INTERVAL_S = 10.0  # dripstream_consumer_lag refresh


def _credentials(settings: StreamSettings) -> faust.types.auth.CredentialsT | None:
    context = ssl_context(settings)
    if settings.security_protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password,
            mechanism=settings.sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def _headers(event: Any) -> dict[str, bytes]:
    headers = event.message.headers or {}
    items = headers.items() if isinstance(headers, dict) else headers
    return {name: value for name, value in items if value is not None}


def inbound(event: Any) -> Inbound:
    message = event.message
    return Inbound(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        headers=_headers(event),
    )


def worker_provisions(settings: StreamSettings, labeller: Labeller | None = None) -> Provisions:
    """What this worker provides the stage builders: one sandbox for every CPU stage's
    per-page work, the labeller (``labeller``, else built by name from the settings when a
    stage asks for one), the pages-topic reader and the templates-topic store."""
    limits = settings.limits()
    return Provisions(
        runners=PageRunners(lambda contexts: Sandbox(contexts, limits, warm_up)),
        labeller=(lambda: labeller)
        if labeller is not None
        else (lambda: build_labeller(settings.labeller, settings.labeller_options())),
        source_reader=lambda: SourceReader(settings),
        template_store=lambda cache: TemplateStore(settings, cache),
    )


def build_handlers(
    settings: StreamSettings, provisions: Provisions, stages: Sequence[Stage]
) -> dict[str, Handler]:
    """Each stage's handler, from its builder; a stage that cannot be built raises
    ``StageSetupError`` here, before the worker takes a message."""
    return {stage.name: stage.build(settings, provisions) for stage in stages}


def build_app(
    settings: StreamSettings,
    labeller: Labeller | None = None,
    registry: Mapping[str, Stage] = STAGES,
) -> faust.App:
    """A faust app running ``settings.stages`` (declared in ``registry``); its consumer
    group is per set of stages."""
    stages = chosen(settings.stages, registry)
    provisions = worker_provisions(settings, labeller)
    handlers = build_handlers(settings, provisions, stages)
    provisions.runners.start()  # the sandbox warms while the worker joins its group
    datadir = Path(settings.data_dir) / settings.group_id()
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.group_id(),
        broker=[f"kafka://{server}" for server in settings.brokers.split(",")],
        broker_credentials=_credentials(settings),
        store="memory://",
        datadir=str(datadir),
        topic_disable_leader=True,
        topic_allow_declare=False,
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        broker_commit_every=50,
        broker_commit_interval=1.0,
        producer_acks=-1,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        producer_compression_type="zstd",
        consumer_max_fetch_size=FETCH_BYTES,
        stream_buffer_maxsize=settings.max_batch,
        web_enabled=settings.web_port > 0,
        web_port=settings.web_port or 6066,
        web_bind=settings.web_host,
        web_in_thread=False,
    )
    topics = {
        short: app.topic(
            settings.topic_prefix + short, value_serializer="raw", key_serializer="raw"
        )
        for short in ALL_TOPICS
    }

    async def send(output: Outbound) -> None:
        pending = await topics[output.topic].send(
            key=output.key, value=output.value, headers=output.headers, force=True
        )
        await pending  # the broker acknowledged it (acks=all)

    async def deliver(stage: str, outputs: list[Outbound]) -> None:
        await asyncio.gather(*(send(output) for output in outputs))

    ledger = CrashLedger(datadir, settings.crash_loop_limit)
    _crash_loop_breaker(app, settings, stages, ledger, send)
    handle = chained_handler(stages, handlers, bool(settings.chain), settings.topic_prefix)
    agent_health = health.AgentHealth()
    for stage in stages:
        agent = _batch_agent(stage.name, settings, handle, deliver)
        agent = agent_health.watch(f"dripstream.{stage.name}", agent)
        app.agent(topics[stage.input_topic], name=f"dripstream.{stage.name}")(agent)

    @app.page("/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    @app.page("/healthz")
    async def health_view(web: Any, request: Any) -> Any:
        dead = agent_health.dead_agents(app)
        if dead:
            return web.json({"status": "dead", "dead_agents": dead}, status=503)
        return web.json({"status": "ok"})

    @app.timer(interval=LAG_INTERVAL_S)
    async def lag_gauge() -> None:
        health.update_lag(app)

    @app.page("/readyz")
    async def ready_view(web: Any, request: Any) -> Any:
        ready = app.started and not app.rebalancing
        return web.json(
            {"ready": ready, "stages": list(settings.stages)}, status=200 if ready else 503
        )

    return app


def _crash_loop_breaker(
    app: faust.App,
    settings: StreamSettings,
    stages: Sequence[Stage],
    ledger: CrashLedger,
    send: Callable[[Outbound], Awaitable[None]],
) -> None:
    """Wire the crash ledger (``dripstream.streams.breaker``): when a rebalance completes,
    before faust seeks and fetches, record the offsets about to be read, and dead-letter
    by reference and skip a message the worker has died at too often; a partition given
    up, or a clean stop, leaves the ledger."""
    readers = {settings.topic_prefix + stage.input_topic: stage.name for stage in stages}

    async def assigned(sender: Any, **kwargs: Any) -> None:
        assignment = app.consumer.assignment()
        mine = sorted((tp.topic, tp.partition) for tp in assignment if tp.topic in readers)
        try:
            positions = await next_offsets(settings, settings.group_id(), mine)
        except KafkaError as error:
            log.warning("crash ledger: offsets unavailable (%s); not checked this time", error)
            return
        for trip in ledger.starting(positions):
            stage = readers[trip.topic]
            log.error("crash loop: %s", trip.error())
            letter = dead_letter_by_reference(
                stage, trip.topic, trip.partition, trip.offset, trip.error()
            )
            _count(stage, letter)
            await send(letter)
            # Right after this signal faust seeks each stream partition to its
            # committed offset and resumes fetching: the skip has to be a commit.
            await app.consumer._commit({TP(trip.topic, trip.partition): trip.offset + 1})

    async def revoked(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
        ledger.release((tp.topic, tp.partition) for tp in revoked)

    async def stopping(sender: Any, **kwargs: Any) -> None:
        if app.crash_reason is None:
            ledger.clear()

    app.on_rebalance_complete.connect(assigned)
    app.on_partitions_revoked.connect(revoked)
    app.on_before_shutdown.connect(stopping)


Deliver = Callable[[str, list[Outbound]], Awaitable[None]]
Handle = Callable[[str, list[Inbound]], Awaitable[list[Outbound]]]


def chaining(stages: Sequence[Stage]) -> dict[tuple[str, str], str]:
    """(stage, route) -> the other stage among ``stages`` that reads the route's topic,
    for every route declared chainable. Undeclared outputs (dead letters) and routes
    declared ``chain=False`` (records) always go to Kafka."""
    readers = {stage.input_topic: stage.name for stage in stages}
    return {
        (stage.name, route.route): readers[route.topic]
        for stage in stages
        for route in stage.routes
        if route.chain and readers.get(route.topic, stage.name) != stage.name
    }


def chained_handler(
    stages: Sequence[Stage],
    handlers: Mapping[str, Handler],
    chain: bool = True,
    topic_prefix: str = "",
) -> Handle:
    """A batch handler that, with ``chain`` on (``DRIPSTREAM_CHAIN``), hands outputs bound
    for a stage this worker also runs straight to that stage in memory (operator
    chaining), so a worker running simplify+label+reconstruct writes only records,
    fallback requests and dead letters. The input is still acknowledged only after every
    final output is: at-least-once holds. Workers running one stage each (the k8s
    layout) use the topics."""
    local = chaining(stages) if chain else {}

    async def handle(stage: str, messages: list[Inbound]) -> list[Outbound]:
        outputs = await handlers[stage](messages)
        final: list[Outbound] = []
        onward: dict[str, list[Inbound]] = {}
        for output in outputs:
            _count(stage, output)
            target = local.get((stage, output.route))
            if target is None:
                final.append(output)
                continue
            name = topic_prefix + output.topic
            onward.setdefault(target, []).append(
                Inbound(name, -1, -1, output.key, output.value, output.headers)
            )
        for target, batch in onward.items():
            metrics.PAGES_IN.labels(target).inc(len(batch))
            final.extend(await handle(target, batch))
        return final

    return handle


def _count(stage: str, output: Outbound) -> None:
    """An output of ``stage``, by route (dead letters also by error class)."""
    metrics.PAGES_OUT.labels(stage, output.route).inc()
    if output.route == "deadletter":
        error_class = output.headers.get(ERROR_HEADER, b"").decode() or "unknown"
        metrics.ERRORS.labels(stage, error_class).inc()


def _batch_agent(
    stage: str, settings: StreamSettings, handle: Handle, deliver: Deliver
) -> Callable[[Any], Any]:
    """Micro-batches: handle up to ``max_batch`` messages, deliver every output (all
    acknowledged by the broker), then ack the batch's messages in offset order."""
    within = settings.max_wait_ms / 1000

    async def agent(stream: Any) -> None:
        async for events in stream.noack_take(settings.max_batch, within=within):
            metrics.PAGES_IN.labels(stage).inc(len(events))
            metrics.IN_FLIGHT.labels(stage).inc(len(events))
            started = time.perf_counter()
            try:
                outputs = await handle(stage, [inbound(e) for e in events])
                await deliver(stage, outputs)
            finally:
                metrics.IN_FLIGHT.labels(stage).dec(len(events))
                metrics.STAGE_SECONDS.labels(stage).observe(
                    (time.perf_counter() - started) / len(events)
                )
            for event in events:
                await stream.ack(event)

    return agent
