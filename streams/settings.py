"""Every stream setting, read from ``DRIPSTREAM_*`` environment variables.

``SETTINGS`` lists them with defaults and meanings; README's table is the same list and
``dripstream config`` prints the values in force (secrets masked).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

from dripstream.gpu_worker.profiles import DEFAULT_PROFILE
from dripstream.processors.extract.tokens import CPU_MAX_BLOCKS
from dripstream.processors.label.registry import (
    DEFAULT_LABELLER,
    LabellerOptions,
    UnknownLabeller,
    check_labeller,
)
from dripstream.processors.label.templates import TemplateSettings
from dripstream.processors.sinks.search import SEARCH_SETTINGS


@dataclass(frozen=True)
class Setting:
    env: str
    default: str
    help: str
    secret: bool = False


SETTINGS = (
    Setting("DRIPSTREAM_BROKERS", "127.0.0.1:9092", "Kafka bootstrap servers, comma-separated"),
    Setting("DRIPSTREAM_TOPIC_PREFIX", "dripstream.", "prefix of every topic name"),
    Setting("DRIPSTREAM_GROUP_PREFIX", "dripstream-", "prefix of consumer-group ids (+ stages)"),
    Setting(
        "DRIPSTREAM_PARTITIONS",
        "4",
        "partitions per topic (topics create): the most consumers a stage can use;"
        " k8s sets the largest maxReplicaCount (40)",
    ),
    Setting("DRIPSTREAM_REPLICATION", "1", "replication factor (topics create)"),
    Setting("DRIPSTREAM_RETENTION_HOURS", "168", "retention of pipeline topics (dead letters x4)"),
    Setting(
        "DRIPSTREAM_STAGES",
        "simplify,label,reconstruct,fallback",
        "stages this worker runs: simplify, label, reconstruct, fallback, sink",
    ),
    Setting("DRIPSTREAM_LABELLER", DEFAULT_LABELLER, "label-stage labeller (dripstream labellers)"),
    Setting(
        "DRIPSTREAM_PROFILE",
        DEFAULT_PROFILE,
        "model profile (shipped name or .toml): the labeller's model, context and tokenizer,"
        " and so the simplify stage's token budget",
    ),
    Setting("DRIPSTREAM_MODEL", "", "weights folder or hub id overriding the profile's"),
    Setting(
        "DRIPSTREAM_CPU_MAX_BLOCKS",
        str(CPU_MAX_BLOCKS),
        "with a labeller that reads no prompt (learned, heuristic): the simplify stage's"
        " budget, blocks a page may bring (more: fallback, too_many_blocks)",
    ),
    Setting(
        "DRIPSTREAM_CHAIN",
        "1",
        "1: stages of one worker pass pages in memory (intermediate topics only between"
        " workers); 0: every hop goes through Kafka",
    ),
    Setting(
        "DRIPSTREAM_TEMPLATES",
        "1",
        "1: a site-template cache in front of the labeller (shared via the templates topic)",
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_VERIFY_PAGES", "3", "servable teacher pages a template must match"
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_AGREEMENT",
        "0.98",
        "block agreement a template needs over its last teacher pages (pooled) and shadow pages",
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_EXPECTED_AGREEMENT",
        "0.9",
        "agreement with the teacher a served page must expect from its blocks' votes "
        "(weighted by each block's text)",
    ),
    Setting("DRIPSTREAM_TEMPLATE_SHADOW_RATE", "0.05", "share of served pages the teacher checks"),
    Setting(
        "DRIPSTREAM_TEMPLATE_MIN_TEACHER_CONFIDENCE",
        "0.5",
        "teacher pages labelled with less confidence neither teach nor check a template",
    ),
    Setting("DRIPSTREAM_TEMPLATE_SITES", "3000", "sites a worker keeps (least recent evicted)"),
    Setting("DRIPSTREAM_MAX_BATCH", "16", "label stage: pages handed to the labeller at once"),
    Setting("DRIPSTREAM_MAX_WAIT_MS", "50", "label stage: longest wait to fill a batch"),
    Setting("DRIPSTREAM_LABEL_RETRIES", "3", "labeller attempts per batch before fallback"),
    Setting("DRIPSTREAM_RETRY_BACKOFF_MS", "200", "first retry delay, doubled per attempt"),
    Setting("DRIPSTREAM_PAGE_TIMEOUT_S", "15", "per-page time limit of CPU work (then killed)"),
    Setting(
        "DRIPSTREAM_PAGE_MEMORY_MIB",
        "160",
        "memory one page may use beyond the sandbox child's code",
    ),
    Setting(
        "DRIPSTREAM_SINK",
        "",
        "sink stage target KIND:TARGET (records:out.jsonl, datatrove:docs.jsonl,"
        " opensearch:http://127.0.0.1:9200/dripstream)",
    ),
    *(Setting(*entry) for entry in SEARCH_SETTINGS),
    Setting(
        "DRIPSTREAM_DLQ_PAYLOAD_LIMIT",
        "1048576",
        "dead letters carry payloads up to this size, above it a SHA-256 digest",
    ),
    Setting("DRIPSTREAM_WEB_PORT", "6066", "HTTP port for /metrics, /healthz, /readyz (0: off)"),
    Setting("DRIPSTREAM_WEB_HOST", "127.0.0.1", "address the HTTP port binds (0.0.0.0 in pods)"),
    Setting("DRIPSTREAM_LOG_LEVEL", "INFO", "log level (JSON lines on stderr)"),
    Setting("DRIPSTREAM_DATA_DIR", ".cache/worker", "worker state folder (faust data dir)"),
    Setting(
        "DRIPSTREAM_SECURITY_PROTOCOL", "PLAINTEXT", "PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL"
    ),
    Setting("DRIPSTREAM_SASL_MECHANISM", "SCRAM-SHA-512", "SCRAM-SHA-256 | SCRAM-SHA-512 | PLAIN"),
    Setting("DRIPSTREAM_SASL_USERNAME", "", "SASL user"),
    Setting("DRIPSTREAM_SASL_PASSWORD", "", "SASL password (prefer the _FILE variant)", True),
    Setting("DRIPSTREAM_SASL_PASSWORD_FILE", "", "file holding the SASL password"),
    Setting("DRIPSTREAM_SSL_CAFILE", "", "CA bundle that signs the broker certificate"),
    Setting("DRIPSTREAM_SSL_CERTFILE", "", "client certificate (mutual TLS)"),
    Setting("DRIPSTREAM_SSL_KEYFILE", "", "client private key (mutual TLS)"),
)


class SettingsError(ValueError):
    """A setting has a value that cannot be used."""


@dataclass(frozen=True)
class StreamSettings:
    brokers: str
    topic_prefix: str
    group_prefix: str
    partitions: int
    replication: int
    retention_hours: int
    stages: tuple[str, ...]
    labeller: str
    profile: str
    model: str
    cpu_max_blocks: int
    chain: int
    templates: int
    template_verify_pages: int
    template_agreement: float
    template_expected_agreement: float
    template_shadow_rate: float
    template_min_teacher_confidence: float
    template_sites: int
    max_batch: int
    max_wait_ms: int
    label_retries: int
    retry_backoff_ms: int
    page_timeout_s: int
    page_memory_mib: int
    sink: str
    dlq_payload_limit: int
    web_port: int
    web_host: str
    log_level: str
    data_dir: str
    security_protocol: str
    sasl_mechanism: str
    sasl_username: str
    sasl_password: str
    ssl_cafile: str
    ssl_certfile: str
    ssl_keyfile: str

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: object) -> StreamSettings:
        env = dict(os.environ if env is None else env)
        raw = {s.env: env.get(s.env, s.default) for s in SETTINGS}
        password_file = raw.pop("DRIPSTREAM_SASL_PASSWORD_FILE")
        if password_file:
            try:
                raw["DRIPSTREAM_SASL_PASSWORD"] = Path(password_file).read_text().strip()
            except OSError as error:
                raise SettingsError(f"DRIPSTREAM_SASL_PASSWORD_FILE: {error}") from error
        values: dict[str, object] = {}
        for item in fields(cls):
            text = raw[f"DRIPSTREAM_{item.name.upper()}"]
            try:
                values[item.name] = _convert(item.type, text)
            except ValueError as error:
                raise SettingsError(f"DRIPSTREAM_{item.name.upper()}={text!r}: {error}") from None
        values.update(overrides)
        settings = cls(**values)  # type: ignore[arg-type]
        settings.check()
        return settings

    def check(self) -> None:
        from dripstream.streams.stages import STAGES

        try:
            check_labeller(self.labeller)
        except UnknownLabeller as error:
            raise SettingsError(f"DRIPSTREAM_LABELLER: {error}") from None
        if "sink" in self.stages and not self.sink:
            raise SettingsError("the sink stage needs DRIPSTREAM_SINK (KIND:PATH)")
        if self.chain not in (0, 1) or self.templates not in (0, 1):
            raise SettingsError("DRIPSTREAM_CHAIN and DRIPSTREAM_TEMPLATES must be 0 or 1")
        for name, share in (
            ("DRIPSTREAM_TEMPLATE_SHADOW_RATE", self.template_shadow_rate),
            ("DRIPSTREAM_TEMPLATE_MIN_TEACHER_CONFIDENCE", self.template_min_teacher_confidence),
        ):
            if not 0 <= share <= 1:
                raise SettingsError(f"{name}={share}: a share, 0..1")
        for name, share in (
            ("DRIPSTREAM_TEMPLATE_AGREEMENT", self.template_agreement),
            ("DRIPSTREAM_TEMPLATE_EXPECTED_AGREEMENT", self.template_expected_agreement),
        ):
            if not 0 < share <= 1:
                raise SettingsError(f"{name}={share}: a share above 0, at most 1")
        if self.page_timeout_s < 1 or self.page_memory_mib < 64:
            raise SettingsError(
                "DRIPSTREAM_PAGE_TIMEOUT_S must be >= 1 and DRIPSTREAM_PAGE_MEMORY_MIB >= 64"
            )
        unknown = set(self.stages) - set(STAGES)
        if unknown or not self.stages:
            raise SettingsError(
                f"stages must be a non-empty subset of {', '.join(STAGES)};"
                f" got {', '.join(self.stages) or 'none'}"
            )
        if self.cpu_max_blocks < 1:
            raise SettingsError("DRIPSTREAM_CPU_MAX_BLOCKS must be >= 1")
        if self.max_batch < 1 or self.label_retries < 1:
            raise SettingsError("DRIPSTREAM_MAX_BATCH and DRIPSTREAM_LABEL_RETRIES must be >= 1")
        if self.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise SettingsError(f"unknown security protocol {self.security_protocol!r}")
        if self.security_protocol.startswith("SASL") and not self.sasl_username:
            raise SettingsError(f"{self.security_protocol} needs DRIPSTREAM_SASL_USERNAME")

    def labeller_options(self) -> LabellerOptions:
        return LabellerOptions(profile=self.profile, model=self.model or None)

    def template_settings(self) -> TemplateSettings:
        return TemplateSettings(
            agreement=self.template_agreement,
            expected_agreement=self.template_expected_agreement,
            verify_pages=self.template_verify_pages,
            shadow_rate=self.template_shadow_rate,
            min_teacher_confidence=self.template_min_teacher_confidence,
            max_sites=self.template_sites,
        )

    def for_run(self, tag: str, **changes: object) -> StreamSettings:
        """A copy with topics and groups of their own (``<prefix><tag>.``), for a demo,
        a soak or a benchmark that must not meet earlier runs' messages."""
        return replace(
            self,
            topic_prefix=f"{self.topic_prefix}{tag}.",
            group_prefix=f"{self.group_prefix}{tag}-",
            **changes,  # type: ignore[arg-type]
        )

    def group_id(self) -> str:
        """One consumer group per set of stages, so every stage scales on its own."""
        return self.group_prefix + "+".join(self.stages)

    def describe(self) -> list[tuple[str, str]]:
        shown = []
        for setting in SETTINGS:
            name = setting.env.removeprefix("DRIPSTREAM_").lower()
            # Settings read by a component itself (the search sink's) are shown as set.
            value = getattr(self, name, os.environ.get(setting.env, setting.default))
            if setting.secret or name.endswith("password_file"):
                value = "***" if (value or os.environ.get(setting.env)) else ""
            elif isinstance(value, tuple):
                value = ",".join(value)
            shown.append((setting.env, str(value)))
        return shown


def _convert(kind: object, text: str) -> object:
    if kind in (int, "int"):
        return int(text)
    if kind in (float, "float"):
        return float(text)
    if kind in ("tuple[str, ...]",):
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return text
