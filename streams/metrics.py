"""Prometheus metrics of a worker (one registry per process)."""

from __future__ import annotations

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from dripstream.processors.native import compiled_modules

REGISTRY = CollectorRegistry()
# The standard process_* (CPU, memory, open files) and python_* (version, GC) series.
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)

PAGES_IN = Counter("dripstream_pages_in_total", "messages consumed", ["stage"], registry=REGISTRY)
PAGES_OUT = Counter(
    "dripstream_pages_out_total",
    "messages produced, by route",
    ["stage", "route"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "dripstream_errors_total",
    "dead letters, by error class",
    ["stage", "error_class"],
    registry=REGISTRY,
)
STAGE_SECONDS = Histogram(
    "dripstream_stage_seconds",
    "processing time per message (batch time / batch size)",
    ["stage"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
BATCH_SIZE = Histogram(
    "dripstream_label_batch_size",
    "pages per labeller call",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "dripstream_consumer_lag",
    "messages between a partition's end and this worker's committed offset",
    ["topic", "partition"],
    registry=REGISTRY,
)
AGENT_CRASHES = Counter(
    "dripstream_agent_crashes_total",
    "stage agent crashes (the worker then fails /healthz until restarted)",
    ["agent"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge("dripstream_in_flight", "messages being processed", ["stage"], registry=REGISTRY)
LABEL_TOKENS = Counter(
    "dripstream_label_tokens_total", "labeller tokens", ["direction"], registry=REGISTRY
)


SINK_DOCUMENTS = Counter(
    "dripstream_sink_documents_total",
    "records the sink stage wrote, by outcome: written, deleted (gone pages), refused",
    ["outcome"],
    registry=REGISTRY,
)
SINK_SECONDS = Histogram(
    "dripstream_sink_write_seconds",
    "time to write and flush one batch of records through the sink",
    registry=REGISTRY,
)


TEMPLATE_PAGES = Counter(
    "dripstream_template_pages_total",
    "label stage pages by path: template (served), teacher, shadow (served and checked)",
    ["path"],
    registry=REGISTRY,
)
TEMPLATE_EVENTS = Counter(
    "dripstream_template_events_total",
    "template cache events: disagreement (a shadow check failed), suspended, unsure_teacher"
    " (teacher labels under the confidence bar, not learned), stale_state (a stored state of"
    " other signature rules, not loaded: the site is relearnt)",
    ["event"],
    registry=REGISTRY,
)

COMPILED = Gauge(
    "dripstream_compiled_module",
    "1: the CPU module runs compiled (setup.py, mypyc); 0: pure Python (slower)",
    ["module"],
    registry=REGISTRY,
)
for _module, _compiled in compiled_modules().items():
    COMPILED.labels(_module).set(int(_compiled))


def render() -> bytes:
    return generate_latest(REGISTRY)
