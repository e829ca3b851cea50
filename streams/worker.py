"""Running a worker process: JSON logs and the faust worker."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import time
from typing import Any

import faust

from dripstream.streams.app import build_app
from dripstream.streams.kafka import wait_for_topics
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import chosen

M_ARENA_MAX = -8  # mallopt's parameter number for the arena cap


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def logging_config(level: str) -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level, "handlers": ["stderr"]},
    }


def cap_malloc_arenas(arenas: int) -> None:
    """Cap glibc's malloc arenas (``DRIPSTREAM_MALLOC_ARENAS``) before the worker starts
    its threads: otherwise each thread that allocates gets an arena of its own, and what
    it freed stays resident (a worker's memory bound counts it). 0 leaves glibc's own
    rule; off glibc this does nothing."""
    if arenas > 0:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas)


def run_worker(settings: StreamSettings) -> None:
    """Run the configured stages until SIGTERM/SIGINT, once the pipeline topics exist
    (``wait_for_topics``: MissingTopics when they do not)."""
    chosen(settings.stages)  # an unknown stage is refused before the broker is asked
    cap_malloc_arenas(settings.malloc_arenas)
    kafka_log = logging.getLogger("aiokafka")
    level = kafka_log.level
    kafka_log.setLevel(logging.CRITICAL)  # a failure is the CLI's one error line
    loop = asyncio.new_event_loop()  # not set as the current loop: faust makes its own
    try:
        loop.run_until_complete(wait_for_topics(settings))
    finally:
        loop.close()
        kafka_log.setLevel(level)
    app = build_app(settings)  # a stage that needs the labeller builds it by name
    worker = faust.Worker(
        app,
        loglevel=settings.log_level,
        redirect_stdouts=False,
        logging_config=logging_config(settings.log_level),
    )
    worker.execute_from_commandline()
