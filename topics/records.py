"""Every record that crosses a topic, as one msgspec schema.

Records are frozen and carry ``schema_version`` so a consumer can refuse (dead-letter)
a record written by an incompatible producer instead of misreading it.
"""

from __future__ import annotations

import hashlib

import msgspec

SCHEMA_VERSION = 2  # 2: lean pages (SourceRef instead of the source HTML on every hop)

Label = str  # "main" | "other"
MAIN = "main"
OTHER = "other"
LABELS = (MAIN, OTHER)


def page_id(url: str, content: bytes) -> str:
    """Deterministic page id: the same URL and bytes always give the same id (output key)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(url.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(content)
    return digest.hexdigest()


class RawPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page as fetched by the crawler (topic: pages)."""

    url: str
    html: bytes
    content_type: str | None = None
    charset: str | None = None
    status: int | None = None
    fetched_at: float | None = None
    crawl_id: str | None = None
    headers: dict[str, str] = {}
    schema_version: int = SCHEMA_VERSION


class SourceRef(msgspec.Struct, frozen=True):
    """Where a page's input message lies on the pages topic. Later stages carry this
    pointer instead of the page; the fallback stage fetches the page by it."""

    topic: str
    partition: int
    offset: int


class SimplifiedPage(msgspec.Struct, frozen=True, kw_only=True):
    """Both aligned branches of a page (topic: simplified).

    ``simplified_html`` is what the labeller reads: the cleaned page with every block
    tagged ``_item_id="1".."n"``. ``mapping_blocks[i]`` is the full-content HTML of block
    ``i + 1``, which reconstruction needs. ``source`` points at the input page (None
    offline, where the caller holds the page).
    """

    page_id: str
    url: str
    title: str
    simplified_html: str
    mapping_blocks: list[str]
    token_count: int
    tokenizer: str
    source: SourceRef | None = None
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION

    @property
    def block_count(self) -> int:
        return len(self.mapping_blocks)


class LabelledPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page with one label per block (topic: labelled); ``confidence`` is the
    labeller's calibrated page-level confidence when it gives one."""

    page_id: str
    url: str
    title: str
    mapping_blocks: list[str]
    labels: list[Label]
    labeller: str
    token_count: int
    confidence: float | None = None
    source: SourceRef | None = None
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION


class FallbackRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A page the model path could not serve, with the reason (topic: fallback). The
    fallback stage reads the page itself from ``source``."""

    page_id: str
    url: str
    title: str
    reason: str
    stage: str
    source: SourceRef | None = None
    token_count: int = 0
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION


class PageRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The output record (topic: records, JSON)."""

    id: str
    url: str
    title: str
    markdown: str
    extractor: str
    language: str | None = None
    fallback_reason: str | None = None
    block_count: int = 0
    main_block_count: int = 0
    token_count: int = 0
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION


class ClusterState(msgspec.Struct, frozen=True, kw_only=True):
    """One layout cluster of a site template: label counts per block signature
    (main, other) and the agreement with the teacher on its last teacher pages."""

    counts: dict[str, tuple[int, int]]
    recent: list[float] = []
    suspended: bool = False
    served: int = 0
    taught: int = 0


class SiteState(msgspec.Struct, frozen=True, kw_only=True):
    """A site's templates (topic: templates, compacted, keyed by site)."""

    site: str
    clusters: list[ClusterState]
    schema_version: int = SCHEMA_VERSION


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """An input that could not be processed, with enough to inspect and replay it."""

    stage: str
    error_class: str
    message: str
    attempts: int
    first_failure_at: float
    last_failure_at: float
    source_topic: str | None = None
    key: bytes | None = None
    headers: dict[str, bytes] = {}
    """The input message's headers, restored on replay."""
    payload: bytes | None = None
    payload_size: int = 0
    payload_sha256: str = ""
    schema_version: int = SCHEMA_VERSION
