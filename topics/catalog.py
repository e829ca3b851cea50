"""Topic names and configurations: the Kafka half of the contract (the records they
carry: ``dripstream.topics.records``).

Every name carries a configurable prefix (``dripstream.`` by default) so several
pipelines can share one cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # raw HTML can be large; clients use the same limit
DAY_MS = 24 * 3600 * 1000

PAGES = "pages"
SIMPLIFIED = "simplified"
LABELLED = "labelled"
RECORDS = "records"
FALLBACK = "fallback"  # FallbackRequest: pages the model path left to the fallback extractor
DEAD_LETTERS = "deadletters"
REPLAYS = "replays"  # compacted: which dead letters were replayed (key partition:offset)
TEMPLATES = "templates"  # compacted: site templates (key: site), shared by label workers
ALL_TOPICS = (PAGES, SIMPLIFIED, LABELLED, RECORDS, FALLBACK, DEAD_LETTERS, REPLAYS, TEMPLATES)


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its short name (without prefix) and its broker-side settings."""

    short_name: str
    partitions: int
    replication: int
    retention_ms: int
    extra: dict[str, str] = field(default_factory=dict)

    def name(self, prefix: str) -> str:
        return f"{prefix}{self.short_name}"

    def config(self) -> dict[str, str]:
        return {
            "retention.ms": str(self.retention_ms),
            "max.message.bytes": str(MAX_MESSAGE_BYTES),
            # Keep the producer's codec (ours send zstd). A topic codec that differs from
            # the producer's makes the broker decompress and recompress each batch, on its
            # heap: a small, highly compressed batch can exhaust it.
            "compression.type": "producer",
            **self.extra,
        }


def topic_specs(
    partitions: int = 4, replication: int = 1, retention_ms: int = 7 * DAY_MS
) -> list[TopicSpec]:
    """The pipeline's topics; dead letters (and the replay log) are kept four times
    longer for inspection."""
    specs = [
        TopicSpec(name, partitions, replication, retention_ms)
        for name in ALL_TOPICS
        if name not in (DEAD_LETTERS, REPLAYS, TEMPLATES)
    ]
    specs.append(TopicSpec(DEAD_LETTERS, partitions, replication, 4 * retention_ms))
    compacted = {"cleanup.policy": "compact"}
    specs.append(TopicSpec(REPLAYS, 1, replication, 4 * retention_ms, compacted))
    specs.append(TopicSpec(TEMPLATES, partitions, replication, 4 * retention_ms, compacted))
    return specs
