"""Every record that crosses a topic, as one msgspec schema.

Records are frozen and carry ``schema_version`` so a consumer can refuse (dead-letter)
a record written by an incompatible producer instead of misreading it.
"""

from __future__ import annotations

import hashlib

import msgspec

SCHEMA_VERSION = 1

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


class SimplifiedPage(msgspec.Struct, frozen=True, kw_only=True):
    """Both aligned branches of a page (topic: simplified).

    ``simplified_html`` is what the labeller reads: the cleaned page with every block
    tagged ``_item_id="1".."n"``. ``mapping_blocks[i]`` is the full-content HTML of block
    ``i + 1``. ``source_html`` is the decoded input, kept for the fallback extractor.
    """

    page_id: str
    url: str
    title: str
    simplified_html: str
    mapping_blocks: list[str]
    token_count: int
    tokenizer: str
    source_html: str
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION

    @property
    def block_count(self) -> int:
        return len(self.mapping_blocks)


class LabelledPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page with one label per block (topic: labelled)."""

    page_id: str
    url: str
    title: str
    mapping_blocks: list[str]
    labels: list[Label]
    labeller: str
    token_count: int
    source_html: str
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION


class FallbackRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A page the model path could not serve, with the reason (topic: fallback)."""

    page_id: str
    url: str
    title: str
    source_html: str
    reason: str
    stage: str
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
    payload: bytes | None = None
    payload_size: int = 0
    payload_sha256: str = ""
    schema_version: int = SCHEMA_VERSION
