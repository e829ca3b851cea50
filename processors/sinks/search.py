"""The search-index sink: every record upserted into OpenSearch (or any engine that speaks
its REST API: Elasticsearch 7/8-compatible ``_bulk``), keyed by the stable document id.

Spec: ``opensearch:URL/INDEX`` (``opensearch:http://127.0.0.1:9200/dripstream``; without a
path the index is ``dripstream``). The sink creates the index when it is missing (one
shard, ``DRIPSTREAM_SEARCH_REPLICAS`` replicas, the mapping below; unmapped record fields
stay in ``_source``). Remote clusters: ``https://`` URLs, basic-auth credentials and the
CA bundle come from ``SearchOptions``, which the entry points build from the
``DRIPSTREAM_SEARCH_*`` settings (``dripstream.streams.settings``); this module reads no
environment.

- **Idempotent.** The document ``_id`` is the record's ``id`` (one per canonical URL), so
  a re-delivered record or a re-crawl of a URL updates one document. With a
  ``fetched_at``, writes carry it as an external version (milliseconds, ``external_gte``):
  an older crawl arriving late never overwrites a newer one (the engine answers 409 and
  the write counts as done), while a re-delivery of the same crawl is accepted again. A
  crawl time too far in the future never gets here: the pipeline clamps it
  (``MAX_CLOCK_SKEW_S``), so it cannot outrank later crawls.
- **Deletions.** A record marked ``gone`` (the crawler got HTTP 404/410) deletes its
  document; deleting a document that is not there is done too.
- **Bulk with back-pressure.** ``write`` only queues; ``flush`` sends the queue in bulk
  requests of at most ``DRIPSTREAM_SEARCH_BULK_DOCS`` documents and
  ``DRIPSTREAM_SEARCH_BULK_BYTES`` bytes and returns only once every write is durable or
  refused. While the engine is unreachable or overloaded (connection errors, timeouts,
  HTTP 429, 5xx) it waits and tries again, backing off up to 30 s, for as long as it
  takes: the stream's sink stage then stops consuming (nothing is acknowledged, nothing
  is lost). A document the engine refuses (any other 4xx, e.g. a mapping error) is
  retried ``DRIPSTREAM_SEARCH_RETRIES`` times in all, then reported as a ``Refusal``,
  which the stream turns into a dead letter (``DocumentRefused``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from dripstream.processors.pipeline import Outcome
from dripstream.processors.sinks import Refusal, SinkError

log = logging.getLogger("dripstream.sinks.search")

DEFAULT_INDEX = "dripstream"
DEFAULT_TARGET = f"http://127.0.0.1:9200/{DEFAULT_INDEX}"
MAX_BACKOFF_S = 30.0

MAPPING: dict[str, Any] = {
    "dynamic": False,
    "properties": {
        "url": {"type": "keyword"},
        "title": {"type": "text"},
        "markdown": {"type": "text"},
        "language": {"type": "keyword"},
        "extractor": {"type": "keyword"},
        "version": {"type": "keyword"},
        "fetched_at": {"type": "date", "format": "epoch_millis"},
        "claimed_fetched_at": {"type": "date", "format": "epoch_millis"},
        "crawl_id": {"type": "keyword"},
        "http_status": {"type": "short"},
        "truncated": {"type": "keyword"},
        "fallback_reason": {"type": "keyword"},
        "token_count": {"type": "integer"},
    },
}


@dataclass(frozen=True)
class SearchOptions:
    """Connection and batching settings; the defaults are the ``DRIPSTREAM_SEARCH_*``
    settings' defaults. ``password`` is the password itself (a ``_FILE`` variant is read
    by the settings, never here)."""

    username: str = ""
    password: str = ""
    cafile: str = ""
    verify_tls: bool = True
    bulk_docs: int = 500
    bulk_bytes: int = 8 * 1024 * 1024
    retries: int = 5
    backoff_ms: int = 200
    timeout_s: float = 30.0
    replicas: int = 0


def split_target(target: str) -> tuple[str, str]:
    """``URL/INDEX`` -> (engine URL, index name)."""
    parts = urlsplit(target or DEFAULT_TARGET)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SinkError(f"search sink target {target!r}: expected http(s)://HOST:PORT/INDEX")
    prefix, _, index = parts.path.rstrip("/").rpartition("/")
    index = index or DEFAULT_INDEX
    if index != index.lower() or index.startswith(("_", "-", "+")) or "," in index:
        raise SinkError(f"search sink target {target!r}: {index!r} is not a valid index name")
    return urlunsplit((parts.scheme, parts.netloc, prefix, "", "")), index


def connect(url: str, options: SearchOptions | None = None) -> Any:
    """An opensearch-py client for the engine at ``url`` (no client-side retries: the
    sink does its own, with back-off)."""
    from opensearchpy import OpenSearch

    options = options or SearchOptions()
    tls = url.startswith("https:")
    return OpenSearch(
        hosts=[url],
        http_auth=(options.username, options.password) if options.username else None,
        use_ssl=tls,
        verify_certs=tls and options.verify_tls,
        ssl_assert_hostname=tls and options.verify_tls,
        ssl_show_warn=False,
        ca_certs=options.cafile or None,
        timeout=options.timeout_s,
        max_retries=0,
        retry_on_timeout=False,
    )


@dataclass
class _Write:
    input_id: str | None
    action: bytes
    source: bytes | None
    attempts: int = 0
    last_error: tuple[str, str] = ("", "")

    @property
    def size(self) -> int:
        return len(self.action) + len(self.source or b"") + 2


@dataclass
class SinkStats:
    indexed: int = 0
    deleted: int = 0
    stale: int = 0  # an older crawl than the engine holds: skipped
    refused: int = 0
    requests: int = 0
    waits: int = 0
    unavailable_s: float = 0.0


def _document(record: Any) -> dict[str, Any]:
    document = msgspec.to_builtins(record)
    for name in ("id", "gone", "schema_version"):
        document.pop(name, None)
    for name in ("fetched_at", "claimed_fetched_at"):
        if document.get(name) is not None:
            document[name] = round(document[name] * 1000)
    return document


class OpenSearchSink:
    """Upserts records into an index, deletes pages gone (see the module docstring)."""

    def __init__(self, target: str, options: SearchOptions | None = None) -> None:
        self.url, self.index = split_target(target)
        self.options = options or SearchOptions()
        self.client = connect(self.url, self.options)
        self.stats = SinkStats()
        self._queue: list[_Write] = []
        self._index_ready = False

    # -- the Sink protocol ----------------------------------------------------------

    def write(self, outcome: Outcome, input_id: str | None = None) -> None:
        record = outcome.record
        if record is None:
            return  # an error outcome: nothing to index
        meta: dict[str, Any] = {"_index": self.index, "_id": record.id}
        if record.fetched_at is not None:
            meta.update(version=round(record.fetched_at * 1000), version_type="external_gte")
        if record.gone:
            action = json.dumps({"delete": meta}).encode()
            self._queue.append(_Write(input_id, action, None))
            return
        source = json.dumps(_document(record), ensure_ascii=False).encode("utf-8")
        self._queue.append(_Write(input_id, json.dumps({"index": meta}).encode(), source))

    def flush(self) -> list[Refusal]:
        """Send everything queued; returns what the engine refused for good."""
        refusals: list[Refusal] = []
        queue, self._queue = self._queue, []
        unavailable = 0
        while queue:
            batch, queue = self._take(queue)
            try:
                self._ensure_index()
                response = self._bulk(batch)
            except _Unavailable as error:
                unavailable += 1
                self._wait(unavailable, str(error))
                queue = batch + queue
                continue
            except _BadRequest as error:
                if len(batch) > 1:  # split until the write the engine cannot take is alone
                    self._split_limit = max(1, len(batch) // 2)
                    queue = batch + queue
                    continue
                refusals.append(self._refuse(batch[0], error.kind, str(error)))
                continue
            unavailable = 0
            retry, busy = self._results(batch, response, refusals)
            if busy:
                unavailable += 1
                self._wait(unavailable, f"{len(busy)} documents: the engine is busy")
            elif retry:
                self._sleep(self._backoff(max(write.attempts for write in retry)))
            queue = busy + retry + queue
        self._split_limit = None
        return refusals

    def close(self) -> None:
        refusals = self.flush()
        for refusal in refusals:
            log.error("search sink: refused %s: %s", refusal.error_class, refusal.message)
        self.client.close()

    # -- bulk requests --------------------------------------------------------------

    _split_limit: int | None = None

    def _take(self, queue: list[_Write]) -> tuple[list[_Write], list[_Write]]:
        limit = min(self.options.bulk_docs, self._split_limit or self.options.bulk_docs)
        size = count = 0
        for write in queue:
            if count >= limit or (count and size + write.size > self.options.bulk_bytes):
                break
            size += write.size
            count += 1
        return queue[:count], queue[count:]

    def _bulk(self, batch: list[_Write]) -> dict[str, Any]:
        from opensearchpy.exceptions import ConnectionError as EngineDown
        from opensearchpy.exceptions import TransportError

        lines: list[bytes] = []
        for write in batch:
            lines.append(write.action)
            if write.source is not None:
                lines.append(write.source)
        body = b"\n".join(lines) + b"\n"
        self.stats.requests += 1
        try:
            return self.client.bulk(body=body)
        except EngineDown as error:  # includes timeouts
            raise _Unavailable(f"{type(error).__name__}: {error}") from None
        except TransportError as error:
            status = error.status_code if isinstance(error.status_code, int) else 0
            if status in (400, 413):
                raise _BadRequest(f"http_{status}", f"HTTP {status}: {error.error}") from None
            # Overloaded, failing, or refusing us (credentials, a proxy): wait for the
            # engine or the operator; nothing is acknowledged meanwhile.
            raise _Unavailable(f"HTTP {status}: {error.error}") from None

    def _results(
        self, batch: list[_Write], response: dict[str, Any], refusals: list[Refusal]
    ) -> tuple[list[_Write], list[_Write]]:
        """Sort the bulk answer: done, retry (refused, attempts left), busy (wait)."""
        retry: list[_Write] = []
        busy: list[_Write] = []
        for write, item in zip(batch, response.get("items", ()), strict=True):
            [(operation, result)] = item.items()
            status = int(result.get("status", 0))
            if status < 300 or status == 409 or (operation == "delete" and status == 404):
                self._count(operation, status)
                continue
            error = result.get("error") or {}
            kind = str(error.get("type", f"http_{status}")) if isinstance(error, dict) else ""
            reason = str(error.get("reason", error))[:500] if isinstance(error, dict) else ""
            if kind == "index_not_found_exception":
                self._index_ready = False
                busy.append(write)
            elif status == 429 or status >= 500:
                busy.append(write)
            else:
                write.attempts += 1
                write.last_error = (kind, reason)
                if write.attempts >= self.options.retries:
                    refusals.append(self._refuse(write, kind, reason))
                else:
                    retry.append(write)
        return retry, busy

    def _count(self, operation: str, status: int) -> None:
        if status == 409:
            self.stats.stale += 1
        elif operation == "delete":
            self.stats.deleted += 1
        else:
            self.stats.indexed += 1

    def _refuse(self, write: _Write, kind: str, reason: str) -> Refusal:
        self.stats.refused += 1
        document = json.loads(write.action)
        [(operation, meta)] = document.items()
        log.warning(
            "search sink: the engine refused %s of %s after %d attempts: %s: %s",
            operation,
            meta.get("_id"),
            max(write.attempts, 1),
            kind,
            reason,
        )
        return Refusal(
            write.input_id, kind or "refused", f"{operation} {meta.get('_id')}: {reason}"
        )

    def _ensure_index(self) -> None:
        if self._index_ready:
            return
        from opensearchpy.exceptions import ConnectionError as EngineDown
        from opensearchpy.exceptions import RequestError, TransportError

        body = {
            "settings": {"number_of_shards": 1, "number_of_replicas": self.options.replicas},
            "mappings": MAPPING,
        }
        try:
            if not self.client.indices.exists(index=self.index):
                self.client.indices.create(index=self.index, body=body)
        except RequestError as error:
            if error.error != "resource_already_exists_exception":  # another worker won
                raise
        except EngineDown as error:
            raise _Unavailable(f"{type(error).__name__}: {error}") from None
        except TransportError as error:
            status = error.status_code if isinstance(error.status_code, int) else 0
            raise _Unavailable(f"index {self.index}: HTTP {status}: {error.error}") from None
        self._index_ready = True

    # -- waiting ---------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        return min(MAX_BACKOFF_S, self.options.backoff_ms / 1000 * 2 ** max(attempt - 1, 0))

    def _wait(self, attempt: int, why: str) -> None:
        delay = self._backoff(attempt)
        self.stats.waits += 1
        self.stats.unavailable_s += delay
        log.warning(
            "search sink: %s unavailable (%s); waiting %.1f s (try %d), nothing is acknowledged",
            self.url,
            why[:300],
            delay,
            attempt,
        )
        self._sleep(delay)

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _Unavailable(Exception):
    """The engine did not take the request: unreachable, overloaded or failing."""


class _BadRequest(Exception):
    """The engine refused the whole request (HTTP 400, 413): split it, refuse one alone."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    url: str
    title: str
    snippet: str
    language: str | None


class SearchIndex:
    """Read side of the sink's index: search, count, get, refresh (CLI, demo, tests)."""

    def __init__(self, target: str = DEFAULT_TARGET, options: SearchOptions | None = None):
        self.url, self.index = split_target(target)
        self.client = connect(self.url, options)

    def refresh(self) -> None:
        self.client.indices.refresh(index=self.index)

    def count(self) -> int:
        return int(self.client.count(index=self.index)["count"])

    def get(self, doc_id: str) -> dict[str, Any] | None:
        from opensearchpy.exceptions import NotFoundError

        try:
            return self.client.get(index=self.index, id=doc_id)["_source"]
        except NotFoundError:
            return None

    def search(self, query: str, size: int = 10, phrase: bool = True) -> list[Hit]:
        """Documents whose title or Markdown hold ``query``: as a phrase (the words in
        this order), or, with ``phrase=False``, all its words anywhere (simple query
        syntax: ``"quoted phrase"``, ``-word``, ``a | b``)."""
        fields = ["title^2", "markdown"]
        if phrase:
            match: dict[str, Any] = {
                "multi_match": {"query": query, "fields": fields, "type": "phrase"}
            }
        else:
            match = {
                "simple_query_string": {
                    "query": query,
                    "fields": fields,
                    "default_operator": "and",
                }
            }
        body = {
            "query": match,
            "size": size,
            "_source": ["url", "title", "language"],
            "highlight": {
                "fields": {"markdown": {"fragment_size": 160, "number_of_fragments": 1}},
                "pre_tags": ["**"],
                "post_tags": ["**"],
            },
        }
        response = self.client.search(index=self.index, body=body)
        hits = []
        for hit in response["hits"]["hits"]:
            source = hit.get("_source", {})
            fragments = hit.get("highlight", {}).get("markdown") or [""]
            hits.append(
                Hit(
                    id=hit["_id"],
                    score=float(hit.get("_score") or 0.0),
                    url=source.get("url", ""),
                    title=source.get("title", ""),
                    snippet=" ".join(fragments[0].split()),
                    language=source.get("language"),
                )
            )
        return hits

    def close(self) -> None:
        self.client.close()
