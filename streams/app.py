"""The faust app: one agent per stage, moving ``dripstream.streams.stages`` outputs between topics.

Delivery is at-least-once: every agent takes micro-batches (``noack_take``), awaits the
broker's acknowledgement of every output the batch caused, and only then acks the
batch's messages, strictly in offset order, so a committed offset never passes an
unfinished message (faust-streaming#606 needs out-of-order acks; there are none).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import faust

from dripstream.gpu_worker.profiles import load_profile, pipeline_settings
from dripstream.processors.extract.sandbox import Limits, Sandbox
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.templates import TemplateCache, TemplateCascade
from dripstream.processors.sinks import open_sink
from dripstream.streams import health, metrics
from dripstream.streams.kafka import FETCH_BYTES, SourceReader, ssl_context
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import (
    ERROR_HEADER,
    STAGES,
    CpuContext,
    Inbound,
    Outbound,
    StageContext,
)
from dripstream.streams.template_store import TemplateStore
from dripstream.topics.catalog import ALL_TOPICS, DEAD_LETTERS, MAX_MESSAGE_BYTES, RECORDS

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


def stage_context(settings: StreamSettings, labeller: Labeller | None) -> StageContext:
    """The stages' context: the labeller's budget (the profile's context, or a block cap
    for a labeller without one), a sandbox for the per-page CPU work, the
    labeller behind the site-template cache (``DRIPSTREAM_TEMPLATES``), the pages-topic
    reader (fallback) and the sink (sink stage), as the stages need them."""
    profile = load_profile(settings.profile, weights=settings.model or None)
    pipeline = pipeline_settings(profile, settings.labeller, settings.cpu_max_blocks)
    cpu = CpuContext(pipeline, payload_limit=settings.dlq_payload_limit)
    limits = Limits(timeout_s=settings.page_timeout_s, memory_mib=settings.page_memory_mib)
    reader = SourceReader(settings) if "fallback" in settings.stages else None
    store = None
    if labeller is not None and settings.templates:
        cache = TemplateCache(settings.template_settings())
        labeller = TemplateCascade(labeller, cache)
        store = TemplateStore(settings, cache)
    return StageContext(
        cpu=cpu,
        runner=Sandbox(cpu, limits),
        labeller=labeller,
        templates=store,
        fetch_sources=reader.fetch if reader else None,
        sink=open_sink(settings.sink) if "sink" in settings.stages else None,
        label_retries=settings.label_retries,
        retry_backoff_s=settings.retry_backoff_ms / 1000,
    )


def build_app(settings: StreamSettings, labeller: Labeller | None = None) -> faust.App:
    """A faust app running ``settings.stages``; its consumer group is per set of stages."""
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
    context = stage_context(settings, labeller)

    async def send(output: Outbound) -> None:
        pending = await topics[output.topic].send(
            key=output.key, value=output.value, headers=output.headers, force=True
        )
        await pending  # the broker acknowledged it (acks=all)

    async def deliver(stage: str, outputs: list[Outbound]) -> None:
        await asyncio.gather(*(send(output) for output in outputs))

    handle = chained_handler(settings, context)
    agent_health = health.AgentHealth()
    for name in settings.stages:
        stage = STAGES[name]
        agent = _batch_agent(name, settings, handle, deliver)
        agent = agent_health.watch(f"dripstream.{name}", agent)
        app.agent(topics[stage.input_topic], name=f"dripstream.{name}")(agent)

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


Deliver = Callable[[str, list[Outbound]], Awaitable[None]]
Handle = Callable[[str, list[Inbound]], Awaitable[list[Outbound]]]
UNCHAINED = (RECORDS, DEAD_LETTERS)  # the pipeline's outputs always go to Kafka


def chained_handler(settings: StreamSettings, context: StageContext) -> Handle:
    """A batch handler that, with ``DRIPSTREAM_CHAIN`` on, hands outputs bound for a
    stage this worker also runs straight to that stage in memory (operator chaining), so
    a worker running simplify+label+reconstruct writes only records, fallback requests
    and dead letters. The input is still acknowledged only after every final output is:
    at-least-once holds. Workers running one stage each (the k8s layout) use the topics."""
    local = (
        {
            STAGES[name].input_topic: name
            for name in settings.stages
            if STAGES[name].input_topic not in UNCHAINED
        }
        if settings.chain
        else {}
    )

    async def handle(stage: str, messages: list[Inbound]) -> list[Outbound]:
        outputs = await STAGES[stage].handle(messages, context)
        final: list[Outbound] = []
        onward: dict[str, list[Inbound]] = {}
        for output in outputs:
            _count(stage, output)
            target = local.get(output.topic)
            if target is None or target == stage:
                final.append(output)
                continue
            name = settings.topic_prefix + output.topic
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
