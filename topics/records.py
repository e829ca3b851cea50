"""Every record that crosses a topic, as one msgspec schema.

Records are frozen and carry ``schema_version`` so a consumer can refuse (dead-letter)
a record written by an incompatible producer instead of misreading it.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit, urlunsplit

import blake3
import msgspec

# 2: lean pages (SourceRef instead of the source HTML on every hop)
# 3: crawl metadata (fetched_at, crawl_id, status) carried to the record; the record's
#    ``id`` is the stable document id of its canonical URL, ``version`` the content's
SCHEMA_VERSION = 3
RAW_PAGE_VERSIONS = frozenset((2, 3))  # RawPage's fields are the same in both: accepted

Label = str  # "main" | "other"
MAIN = "main"
OTHER = "other"
LABELS = (MAIN, OTHER)


MAX_CLOCK_SKEW_S = 300.0
"""How far ahead of the worker's clock a crawler's ``fetched_at`` may lie. Beyond it the
time is clamped: a far-future time would otherwise become a search version that wins over
every later crawl of the URL."""
GONE_STATUSES = frozenset((404, 410))  # the crawler found the page gone: delete it downstream
_DEFAULT_PORTS = {"http": 80, "https": 443}


def page_id(url: str, content: bytes) -> str:
    """The content-version id: the same URL and bytes always give the same id, a re-crawl
    whose bytes changed a new one (``PageRecord.version``; the pipeline's internal key).
    BLAKE3 (128 bits): a cryptographic hash, so no page can be made to take another's id."""
    digest = blake3.blake3(url.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(content)
    return digest.hexdigest(length=16)


def canonical_url(url: str) -> str:
    """The URL as one document is known by: w3lib's ``canonicalize_url`` (scheme and host
    lower-cased, percent-encoding normalised, query arguments sorted, fragment dropped)
    and the scheme's default port removed. Only http(s) URLs are canonicalised: any other
    (a file path, ``stdin:``) and a URL it cannot read are kept as they are."""
    from w3lib.url import canonicalize_url

    if not url.lower().startswith(("http://", "https://")):
        return url
    try:
        canonical = canonicalize_url(url)
        parts = urlsplit(canonical)
        if parts.port is not None and _DEFAULT_PORTS.get(parts.scheme) == parts.port:
            host = parts.hostname or ""
            if ":" in host:  # IPv6 literal
                host = f"[{host}]"
            userinfo = parts.netloc.rpartition("@")[0]
            netloc = f"{userinfo}@{host}" if userinfo else host
            canonical = urlunsplit(parts._replace(netloc=netloc))
        return canonical
    except (ValueError, UnicodeError):
        return url


def load_canonicalizer() -> None:
    """Import what ``canonical_url`` imports on first use (w3lib's URL module, which
    brings ``urllib.request``, ``http.client`` and ``ssl``: tens of milliseconds), so a
    sandbox's zygote imports it once for all its children."""
    import w3lib.url  # noqa: F401


def document_id(url: str) -> str:
    """The stable document id: one per canonical URL, whatever the content or crawl, so
    a re-crawl or a re-delivery updates one document downstream (``PageRecord.id``)."""
    return hashlib.blake2b(
        canonical_url(url).encode("utf-8", "surrogatepass"), digest_size=16
    ).hexdigest()


class CrawlInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the crawler said about a fetch, carried from the input to the record.
    ``claimed_fetched_at`` is the crawler's time when it lay too far in the future and
    ``fetched_at`` was clamped to the time the page was read (``MAX_CLOCK_SKEW_S``).
    ``truncated`` is why the crawler's copy is incomplete (``RawPage.truncated``)."""

    fetched_at: float | None = None
    crawl_id: str | None = None
    status: int | None = None
    claimed_fetched_at: float | None = None
    truncated: str | None = None


class RawPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page as fetched by the crawler (topic: pages).

    ``html`` is the HTTP body as received: a chunked transfer coding and gzip / deflate /
    br content codings named in ``headers`` are undone when the page is decoded (in the
    sandbox, bounded). ``headers`` names are lower-case. ``charset`` overrides the
    ``content_type`` header's charset; a byte-order mark overrides both. ``truncated``
    is set when the body is incomplete: the WARC-Truncated reason (``length``, ``time``,
    ``disconnect``, ``unspecified``), or ``length`` when the record holds fewer bytes than
    its HTTP ``Content-Length`` or more than its own length said.
    """

    url: str
    html: bytes
    content_type: str | None = None
    charset: str | None = None
    status: int | None = None
    fetched_at: float | None = None
    crawl_id: str | None = None
    headers: dict[str, str] = {}
    truncated: str | None = None
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
    offline, where the caller holds the page). ``hints``: what the page declares it is
    (``og:type``, JSON-LD ``@type``, from a fixed vocabulary), which the
    simplified HTML no longer holds.
    """

    page_id: str
    url: str
    title: str
    simplified_html: str
    mapping_blocks: list[str]
    token_count: int
    tokenizer: str
    source: SourceRef | None = None
    crawl: CrawlInfo | None = None
    hints: list[str] = []
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION

    @property
    def block_count(self) -> int:
        return len(self.mapping_blocks)


class LabelledPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page with one label per block (topic: labelled); ``confidence`` is the
    labeller's calibrated page-level confidence when it gives one; ``second_opinion``
    (set when the labeller is unsure) asks the fallback extractor to run too, its
    Markdown replacing ours when it holds at least that many times our words."""

    page_id: str
    url: str
    title: str
    mapping_blocks: list[str]
    labels: list[Label]
    labeller: str
    token_count: int
    confidence: float | None = None
    second_opinion: float | None = None
    source: SourceRef | None = None
    crawl: CrawlInfo | None = None
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION


class FallbackRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A page the model path could not serve, with the reason (topic: fallback). The
    fallback stage reads the page itself from ``source``. A second opinion (reason
    ``second_opinion``) carries our record as ``candidate``: the fallback's Markdown
    replaces it only when it holds ``second_opinion`` times its words (see LabelledPage)."""

    page_id: str
    url: str
    title: str
    reason: str
    stage: str
    source: SourceRef | None = None
    token_count: int = 0
    crawl: CrawlInfo | None = None
    candidate: PageRecord | None = None
    second_opinion: float | None = None
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION


class PageRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The output record (topic: records, JSON; key ``id``).

    ``id`` is the stable document id (``document_id``: one per canonical URL), ``version``
    the content-version id (``page_id``: URL + fetched bytes). ``fetched_at`` (epoch
    seconds), ``crawl_id`` and ``http_status`` are the crawler's; a ``fetched_at`` more than
    ``MAX_CLOCK_SKEW_S`` ahead of the worker's clock is clamped to the time the page was
    read, and the crawler's value kept in ``claimed_fetched_at``. ``gone`` marks a page
    the crawler found gone (HTTP 404/410): no content; search sinks delete the document.
    ``language`` is detected from the Markdown (ISO 639-1, None when unsure).
    ``truncated`` (None for a whole page) says the crawler's copy was incomplete, and why.
    """

    id: str
    version: str = ""
    url: str
    title: str
    markdown: str
    extractor: str
    language: str | None = None
    fetched_at: float | None = None
    claimed_fetched_at: float | None = None
    crawl_id: str | None = None
    http_status: int | None = None
    truncated: str | None = None
    gone: bool = False
    fallback_reason: str | None = None
    block_count: int = 0
    main_block_count: int = 0
    token_count: int = 0
    timings_ms: dict[str, float] = {}
    schema_version: int = SCHEMA_VERSION


class ClusterState(msgspec.Struct, frozen=True, kw_only=True):
    """One layout cluster of a site template: label counts per block signature
    (main, other) and the agreement with the teacher on its last teacher pages (and their
    block counts, which weigh them: a state without them weighs each page once), and its
    text profile: the main share of the text and the other text (visible characters) of
    its last teacher pages (a state without them: no profile yet)."""

    counts: dict[str, tuple[int, int]]
    recent: list[float] = []
    recent_blocks: list[int] = []
    suspended: bool = False
    served: int = 0
    taught: int = 0
    main_shares: list[float] = []
    other_text: list[int] = []


class SiteState(msgspec.Struct, frozen=True, kw_only=True):
    """A site's templates (topic: templates, compacted, keyed by site)."""

    site: str
    clusters: list[ClusterState]
    schema_version: int = SCHEMA_VERSION
    signature_rules: int = 1
    """The version of the block-signature rules its counts were learnt under
    (``SIGNATURE_RULES`` of the template cache; a state written before the field: 1)."""


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """An input that could not be processed, with enough to inspect and replay it."""

    stage: str
    error_class: str
    message: str
    attempts: int
    first_failure_at: float
    last_failure_at: float
    source_topic: str | None = None
    source_partition: int | None = None
    source_offset: int | None = None
    """Where the input lies; set when it was dead-lettered by reference (``CrashLoop``),
    without its value being read."""
    key: bytes | None = None
    headers: dict[str, bytes] = {}
    """The input message's headers, restored on replay."""
    payload: bytes | None = None
    payload_size: int = 0
    payload_sha256: str = ""
    schema_version: int = SCHEMA_VERSION
