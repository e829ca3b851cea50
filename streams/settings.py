"""The settings spine: every ``DRIPSTREAM_*`` variable, declared once in ``SETTINGS``.

A ``Setting`` names its variable, its type, its default, its bounds or choices, one line of
doc and the component it configures. Components that own a typed option object keep
their defaults there (``TemplateSettings``, ``SearchOptions``, ``LearnedOptions``,
``EngineSettings``, ``Limits``) and their settings take the default from that field
(``_default_of``), so every default exists once.

Rules:

- The entry points (the CLI's ``main``, the worker) call ``StreamSettings.from_env()``
  once, at their start; it parses and checks every variable and the typed option objects
  are handed down (``search``, ``learned``, ``engine``, ``labeller_options()``, ``limits()``, ...).
  Nothing below the entry points reads the environment.
- Booleans: ``1/0``, ``true/false``, ``yes/no``, ``on/off``, in any case.
- Unset or empty: the default (a free-text variable's empty value is its value).
- A bad value raises ``SettingsError``: ``<variable>='...': expected <form>``, which
  the CLI prints as one ``error:`` line with exit 2.
- Secrets (passwords) are never shown; a ``*_FILE`` variable is shown as its path, and
  its contents replace the secret it holds.

``python -m dripstream.streams.settings --markdown`` prints docs/configuration.md.
``BUILD_VARIABLES`` are read by the build (setup.py), not by the product: documented, not
parsed here.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dripstream.gpu_worker.engine import EngineSettings
from dripstream.processors.extract.sandbox import Limits
from dripstream.processors.extract.tokens import CPU_MAX_BLOCKS
from dripstream.processors.label.learned import LearnedOptions
from dripstream.processors.label.registry import (
    DEFAULT_LABELLER,
    DEFAULT_PROFILE,
    LABELLERS,
    LabellerOptions,
)
from dripstream.processors.label.templates import TemplateSettings
from dripstream.processors.sinks.search import SearchOptions

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")

# The components, in the order of ``dripstream config`` and docs/configuration.md.
COMPONENTS = {
    "kafka": "the Kafka cluster and topics",
    "security": "the connection to the brokers (TLS, SASL)",
    "stream": "the worker's stages and batching",
    "labeller": "which labeller labels the blocks, with which model",
    "learned": "the learned CPU labeller",
    "engine": "the vLLM engine (labellers vllm, learned+vllm)",
    "templates": "the site-template cache in front of the labeller",
    "sandbox": "the per-page sandbox of CPU work",
    "sink": "the sink stage",
    "search": "the search-index sink and `dripstream search`",
    "web": "the worker's HTTP port and logs",
}


class SettingsError(ValueError):
    """A setting has a value that cannot be used."""


def _default_of(owner: type, name: str) -> Any:
    """The default of field ``name`` of the dataclass ``owner``: declared there, once."""
    for item in fields(owner):
        if item.name == name:
            if item.default is MISSING:
                raise TypeError(f"{owner.__name__}.{name} has no default")
            return item.default
    raise TypeError(f"{owner.__name__} has no field {name}")


def _labeller_names() -> tuple[str, ...]:
    return tuple(LABELLERS)


@dataclass(frozen=True)
class Setting:
    """One ``DRIPSTREAM_*`` variable (in the manner of faust's setting descriptors).

    ``kind``: str, int, float, bool or tuple (a comma-separated list). ``target``: the
    ``StreamSettings`` attribute it fills, or ``"<option>.<field>"`` for a field of a
    typed option object (``search``, ``learned``, ``engine``); empty: the variable's name
    without the prefix, lower case. ``low``/``high`` bound a number (``above``: ``low``
    excluded); ``choices`` (or a function giving them) bound a text or a list's items.
    ``optional``: unset means None (the component decides). ``secret``: never shown.
    """

    env: str
    kind: type
    default: Any
    doc: str
    component: str
    target: str = ""
    low: float | None = None
    high: float | None = None
    above: bool = False
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    optional: bool = False
    secret: bool = False

    @property
    def attribute(self) -> str:
        return self.target or self.env.removeprefix("DRIPSTREAM_").lower()

    @property
    def free_text(self) -> bool:
        """Paths, names, addresses: any text is a value, so there is no bad one."""
        return self.kind is str and not self.options()

    def options(self) -> tuple[str, ...]:
        return self.choices() if callable(self.choices) else self.choices

    def default_value(self) -> Any:
        default = self.default() if callable(self.default) else self.default
        return self.parse(default) if isinstance(default, str) and self.kind is not str else default

    def expected(self) -> str:
        """The form a value must have, as the error line says it."""
        if self.kind is bool:
            return "a boolean: 1/0, true/false, yes/no, on/off"
        if self.kind is tuple:
            names = ", ".join(self.options()) or "names"
            return f"a comma-separated list of {names} (at least one)"
        if self.kind is str:
            return f"one of {', '.join(self.options())}" if self.options() else "text"
        what = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            low = f"above {_show(self.low)}" if self.above else f">= {_show(self.low)}"
            return f"{what} {low} and <= {_show(self.high)}"
        if self.low is not None:
            return f"{what} {'>' if self.above else '>='} {_show(self.low)}"
        return what

    def bounds(self) -> str:
        """Bounds or choices for the documentation table."""
        if self.kind in (int, float):
            return self.expected().partition(" ")[2].partition(" ")[2]
        if self.kind is bool:
            return "1/0, true/false, yes/no, on/off"
        return ", ".join(self.options())

    def parse(self, text: str) -> Any:
        """The typed value of ``text``; SettingsError names the variable and the form."""
        if self.kind is str:
            if self.options() and text not in self.options():
                raise self.error(text)
            return text
        value = text.strip()
        if self.kind is bool:
            if value.lower() in TRUE:
                return True
            if value.lower() in FALSE:
                return False
            raise self.error(text)
        if self.kind is tuple:
            items = tuple(part.strip() for part in value.split(",") if part.strip())
            if not items or (self.options() and set(items) - set(self.options())):
                raise self.error(text)
            return items
        try:
            number = int(value) if self.kind is int else float(value)
        except ValueError:
            raise self.error(text) from None
        if isinstance(number, float) and not math.isfinite(number):
            raise self.error(text)
        if self.low is not None and (number <= self.low if self.above else number < self.low):
            raise self.error(text)
        if self.high is not None and number > self.high:
            raise self.error(text)
        return number

    def error(self, text: object) -> SettingsError:
        return SettingsError(f"{self.env}={text!r}: expected {self.expected()}")


TEMPLATE_KEY_MIN_BYTES = 16  # DRIPSTREAM_TEMPLATE_KEY_FILE: a shorter key is refused
_SHARE = {"low": 0.0, "high": 1.0}  # a share, 0..1
_POSITIVE_SHARE = {"low": 0.0, "high": 1.0, "above": True}  # a share above 0, at most 1

SETTINGS: tuple[Setting, ...] = (
    # kafka
    Setting(
        "DRIPSTREAM_BROKERS",
        str,
        "127.0.0.1:9092",
        "Kafka bootstrap servers, comma-separated",
        "kafka",
    ),
    Setting("DRIPSTREAM_TOPIC_PREFIX", str, "dripstream.", "prefix of every topic name", "kafka"),
    Setting(
        "DRIPSTREAM_GROUP_PREFIX",
        str,
        "dripstream-",
        "prefix of consumer-group ids (+ stages)",
        "kafka",
    ),
    Setting(
        "DRIPSTREAM_PARTITIONS",
        int,
        4,
        "partitions per topic (topics create): the most consumers a stage can use;"
        " k8s sets the largest maxReplicaCount (40)",
        "kafka",
        low=1,
    ),
    Setting("DRIPSTREAM_REPLICATION", int, 1, "replication factor (topics create)", "kafka", low=1),
    Setting(
        "DRIPSTREAM_RETENTION_HOURS",
        int,
        168,
        "retention of pipeline topics (dead letters x4)",
        "kafka",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_DLQ_PAYLOAD_LIMIT",
        int,
        1048576,
        "dead letters carry payloads up to this size, above it a SHA-256 digest",
        "kafka",
        low=0,
    ),
    # security
    Setting(
        "DRIPSTREAM_SECURITY_PROTOCOL",
        str,
        "PLAINTEXT",
        "how the brokers are reached",
        "security",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    ),
    Setting(
        "DRIPSTREAM_SASL_MECHANISM",
        str,
        "SCRAM-SHA-512",
        "SASL mechanism",
        "security",
        choices=("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"),
    ),
    Setting("DRIPSTREAM_SASL_USERNAME", str, "", "SASL user", "security"),
    Setting(
        "DRIPSTREAM_SASL_PASSWORD",
        str,
        "",
        "SASL password (prefer the _FILE variant)",
        "security",
        secret=True,
    ),
    Setting(
        "DRIPSTREAM_SASL_PASSWORD_FILE",
        str,
        "",
        "file holding the SASL password (overrides it)",
        "security",
    ),
    Setting(
        "DRIPSTREAM_SSL_CAFILE",
        str,
        "",
        "CA bundle that signs the broker certificate",
        "security",
    ),
    Setting("DRIPSTREAM_SSL_CERTFILE", str, "", "client certificate (mutual TLS)", "security"),
    Setting("DRIPSTREAM_SSL_KEYFILE", str, "", "client private key (mutual TLS)", "security"),
    # stream
    Setting(
        "DRIPSTREAM_STAGES",
        tuple,
        "simplify,label,reconstruct,fallback",
        "stages this worker runs; the stage registry refuses an unknown name"
        " (`dripstream worker --help` lists them)",
        "stream",
    ),
    Setting(
        "DRIPSTREAM_CHAIN",
        bool,
        True,
        "on: stages of one worker pass pages in memory (intermediate topics only between"
        " workers); off: every hop goes through Kafka",
        "stream",
    ),
    Setting(
        "DRIPSTREAM_CPU_MAX_BLOCKS",
        int,
        CPU_MAX_BLOCKS,
        "with a labeller that reads no prompt (learned, heuristic): the simplify stage's"
        " budget, blocks a page may bring (more: fallback, too_many_blocks)",
        "stream",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_MAX_BATCH",
        int,
        16,
        "label stage: pages handed to the labeller at once",
        "stream",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_MAX_WAIT_MS",
        int,
        50,
        "label stage: longest wait to fill a batch",
        "stream",
        low=0,
    ),
    Setting(
        "DRIPSTREAM_LABEL_RETRIES",
        int,
        3,
        "labeller attempts per batch before fallback",
        "stream",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_RETRY_BACKOFF_MS",
        int,
        200,
        "first retry delay, doubled per attempt",
        "stream",
        low=0,
    ),
    Setting(
        "DRIPSTREAM_DATA_DIR",
        str,
        ".cache/worker",
        "worker state folder, one per worker (faust data dir, crash ledger)",
        "stream",
    ),
    Setting(
        "DRIPSTREAM_CRASH_LOOP_LIMIT",
        int,
        3,
        "deaths of a worker at one message before it is dead-lettered by reference, unread",
        "stream",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_MALLOC_ARENAS",
        int,
        2,
        "glibc malloc arenas a worker's threads share (0: glibc's own rule, MALLOC_ARENA_MAX"
        " included); each arena keeps the pages its threads freed",
        "stream",
        low=0,
        high=64,
    ),
    # labeller
    Setting(
        "DRIPSTREAM_LABELLER",
        str,
        DEFAULT_LABELLER,
        "label-stage labeller (dripstream labellers)",
        "labeller",
        choices=_labeller_names,
    ),
    Setting(
        "DRIPSTREAM_PROFILE",
        str,
        DEFAULT_PROFILE,
        "model profile (shipped name or .toml): the labeller's model, context and tokenizer,"
        " and so the simplify stage's token budget",
        "labeller",
    ),
    Setting(
        "DRIPSTREAM_MODEL",
        str,
        "",
        "weights folder or hub id overriding the profile's",
        "labeller",
    ),
    # learned
    Setting(
        "DRIPSTREAM_LEARNED_MIN_CONFIDENCE",
        float,
        _default_of(LearnedOptions, "min_confidence"),
        "pages the learned labeller is less sure of go to the fallback, or to vLLM in"
        " learned+vllm; unset: no floor (learned), 0.5 (learned+vllm)",
        "learned",
        target="learned.min_confidence",
        optional=True,
        **_SHARE,
    ),
    Setting(
        "DRIPSTREAM_SECOND_OPINION",
        bool,
        _default_of(LearnedOptions, "second_opinion"),
        "on unsure pages the fallback extractor's Markdown may replace the learned"
        " labeller's (the model's rule)",
        "learned",
        target="learned.second_opinion",
    ),
    # engine (vLLM)
    Setting(
        "DRIPSTREAM_VLLM_MAX_IN_FLIGHT",
        int,
        _default_of(EngineSettings, "max_in_flight"),
        "requests in the engine at once (its max_num_seqs)",
        "engine",
        target="engine.max_in_flight",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_VLLM_MAX_BATCHED_TOKENS",
        int,
        _default_of(EngineSettings, "max_batched_tokens"),
        "tokens per engine step",
        "engine",
        target="engine.max_batched_tokens",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_VLLM_GPU_MEMORY",
        float,
        _default_of(EngineSettings, "gpu_memory_utilization"),
        "share of GPU memory the engine may take",
        "engine",
        target="engine.gpu_memory_utilization",
        **_POSITIVE_SHARE,
    ),
    Setting(
        "DRIPSTREAM_VLLM_CPU_KVCACHE_GIB",
        int,
        _default_of(EngineSettings, "cpu_kvcache_gib"),
        "CPU build: KV cache size (VLLM_CPU_KVCACHE_SPACE)",
        "engine",
        target="engine.cpu_kvcache_gib",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_VLLM_CPU_THREADS_BIND",
        str,
        _default_of(EngineSettings, "cpu_threads_bind"),
        "CPU build: cores to bind (all, auto, nobind, or a list such as 0-3)",
        "engine",
        target="engine.cpu_threads_bind",
    ),
    Setting(
        "DRIPSTREAM_VLLM_TENSOR_PARALLEL",
        int,
        _default_of(EngineSettings, "tensor_parallel"),
        "GPUs one model is split over",
        "engine",
        target="engine.tensor_parallel",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_VLLM_ENFORCE_EAGER",
        bool,
        _default_of(EngineSettings, "enforce_eager"),
        "no CUDA graphs (faster start, slower steps)",
        "engine",
        target="engine.enforce_eager",
    ),
    Setting(
        "DRIPSTREAM_VLLM_PREFIX_CACHING",
        bool,
        _default_of(EngineSettings, "prefix_caching"),
        "share the prompt's fixed head between pages",
        "engine",
        target="engine.prefix_caching",
    ),
    Setting(
        "DRIPSTREAM_VLLM_CHUNKED_PREFILL",
        bool,
        _default_of(EngineSettings, "chunked_prefill"),
        "a long page's prefill does not stall the others' decodes",
        "engine",
        target="engine.chunked_prefill",
    ),
    Setting(
        "DRIPSTREAM_VLLM_STRUCTURED_BACKEND",
        str,
        _default_of(EngineSettings, "structured_backend"),
        "library that constrains the answer to the label grammar",
        "engine",
        target="engine.structured_backend",
        choices=("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"),
    ),
    Setting(
        "DRIPSTREAM_VLLM_DTYPE",
        str,
        _default_of(EngineSettings, "dtype"),
        "weights and activations type",
        "engine",
        target="engine.dtype",
        choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
    ),
    Setting(
        "DRIPSTREAM_VLLM_SEED",
        int,
        _default_of(EngineSettings, "seed"),
        "engine random seed",
        "engine",
        target="engine.seed",
        low=0,
    ),
    # templates
    Setting(
        "DRIPSTREAM_TEMPLATES",
        bool,
        True,
        "on: a site-template cache in front of the labeller (shared via the templates topic)",
        "templates",
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_VERIFY_PAGES",
        int,
        _default_of(TemplateSettings, "verify_pages"),
        "servable teacher pages a template must match",
        "templates",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_AGREEMENT",
        float,
        _default_of(TemplateSettings, "agreement"),
        "block agreement a template needs over its last teacher pages (pooled) and shadow pages",
        "templates",
        **_POSITIVE_SHARE,
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_EXPECTED_AGREEMENT",
        float,
        _default_of(TemplateSettings, "expected_agreement"),
        "agreement with the teacher a served page must expect from its blocks' votes"
        " (weighted by each block's text)",
        "templates",
        **_POSITIVE_SHARE,
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_SHADOW_RATE",
        float,
        _default_of(TemplateSettings, "shadow_rate"),
        "share of served pages the teacher checks",
        "templates",
        **_SHARE,
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_MIN_TEACHER_CONFIDENCE",
        float,
        _default_of(TemplateSettings, "min_teacher_confidence"),
        "teacher pages labelled with less confidence neither teach nor check a template",
        "templates",
        **_SHARE,
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_SITES",
        int,
        _default_of(TemplateSettings, "max_sites"),
        "sites a worker keeps (least recent evicted)",
        "templates",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_CACHE_MIB",
        int,
        _default_of(TemplateSettings, "max_bytes") // 1024**2,
        "memory a worker's template cache may hold, MiB (accounted; least recent sites evicted)",
        "templates",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_TEMPLATE_KEY_FILE",
        str,
        "",
        "file holding the key (at least 16 bytes) that signs and checks site states on the"
        " templates topic (HMAC-SHA256); unset: templates are not shared, each worker keeps"
        " its own",
        "templates",
    ),
    # sandbox
    Setting(
        "DRIPSTREAM_PAGE_TIMEOUT_S",
        float,
        _default_of(Limits, "timeout_s"),
        "per-page time limit of CPU work, seconds (then killed)",
        "sandbox",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_PAGE_MEMORY_MIB",
        int,
        _default_of(Limits, "memory_mib"),
        "memory one page may use beyond the sandbox child's code",
        "sandbox",
        low=64,
    ),
    # sink
    Setting(
        "DRIPSTREAM_SINK",
        str,
        "",
        "sink stage target KIND:TARGET (records:out.jsonl, datatrove:docs.jsonl,"
        " opensearch:http://127.0.0.1:9200/dripstream)",
        "sink",
    ),
    # search
    Setting(
        "DRIPSTREAM_SEARCH_USERNAME",
        str,
        _default_of(SearchOptions, "username"),
        "search engine user (HTTP basic auth)",
        "search",
        target="search.username",
    ),
    Setting(
        "DRIPSTREAM_SEARCH_PASSWORD",
        str,
        _default_of(SearchOptions, "password"),
        "search engine password (prefer the _FILE variant)",
        "search",
        target="search.password",
        secret=True,
    ),
    Setting(
        "DRIPSTREAM_SEARCH_PASSWORD_FILE",
        str,
        "",
        "file holding the search engine password (overrides it)",
        "search",
    ),
    Setting(
        "DRIPSTREAM_SEARCH_CAFILE",
        str,
        _default_of(SearchOptions, "cafile"),
        "CA bundle that signs the search engine's TLS certificate (https URLs)",
        "search",
        target="search.cafile",
    ),
    Setting(
        "DRIPSTREAM_SEARCH_VERIFY_TLS",
        bool,
        _default_of(SearchOptions, "verify_tls"),
        "check the search engine's certificate and host name (off: tests only)",
        "search",
        target="search.verify_tls",
    ),
    Setting(
        "DRIPSTREAM_SEARCH_BULK_DOCS",
        int,
        _default_of(SearchOptions, "bulk_docs"),
        "documents per bulk request",
        "search",
        target="search.bulk_docs",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_SEARCH_BULK_BYTES",
        int,
        _default_of(SearchOptions, "bulk_bytes"),
        "bytes per bulk request",
        "search",
        target="search.bulk_bytes",
        low=1024,
    ),
    Setting(
        "DRIPSTREAM_SEARCH_RETRIES",
        int,
        _default_of(SearchOptions, "retries"),
        "attempts for a document the engine refuses, then a dead letter",
        "search",
        target="search.retries",
        low=1,
    ),
    Setting(
        "DRIPSTREAM_SEARCH_BACKOFF_MS",
        int,
        _default_of(SearchOptions, "backoff_ms"),
        "first retry delay, doubled per attempt (30 s at most)",
        "search",
        target="search.backoff_ms",
        low=0,
    ),
    Setting(
        "DRIPSTREAM_SEARCH_TIMEOUT_S",
        float,
        _default_of(SearchOptions, "timeout_s"),
        "search engine request timeout, seconds",
        "search",
        target="search.timeout_s",
        low=0,
        above=True,
    ),
    Setting(
        "DRIPSTREAM_SEARCH_REPLICAS",
        int,
        _default_of(SearchOptions, "replicas"),
        "replicas of an index the search sink creates",
        "search",
        target="search.replicas",
        low=0,
    ),
    # web
    Setting(
        "DRIPSTREAM_WEB_PORT",
        int,
        6066,
        "HTTP port for /metrics, /healthz, /readyz (0: off)",
        "web",
        low=0,
        high=65535,
    ),
    Setting(
        "DRIPSTREAM_WEB_HOST",
        str,
        "127.0.0.1",
        "address the HTTP port binds (0.0.0.0 in pods)",
        "web",
    ),
    Setting(
        "DRIPSTREAM_LOG_LEVEL",
        str,
        "INFO",
        "log level (JSON lines on stderr)",
        "web",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    ),
)

# Read by the build, not by the product: documented here, never parsed at run time.
BUILD_VARIABLES: dict[str, str] = {
    "DRIPSTREAM_PURE_PYTHON": "setup.py: 1 builds no compiled modules (the pure-Python source"
    " runs instead)",
}

BY_NAME: dict[str, Setting] = {setting.env: setting for setting in SETTINGS}
# typed option objects filled from "<option>.<field>" targets
OPTION_TYPES: dict[str, type] = {
    "search": SearchOptions,
    "learned": LearnedOptions,
    "engine": EngineSettings,
}


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
    chain: bool
    templates: bool
    template_verify_pages: int
    template_agreement: float
    template_expected_agreement: float
    template_shadow_rate: float
    template_min_teacher_confidence: float
    template_sites: int
    template_cache_mib: int
    max_batch: int
    max_wait_ms: int
    label_retries: int
    retry_backoff_ms: int
    page_timeout_s: float
    page_memory_mib: int
    sink: str
    dlq_payload_limit: int
    web_port: int
    web_host: str
    log_level: str
    data_dir: str
    crash_loop_limit: int
    malloc_arenas: int
    security_protocol: str
    sasl_mechanism: str
    sasl_username: str
    sasl_password: str
    ssl_cafile: str
    ssl_certfile: str
    ssl_keyfile: str
    sasl_password_file: str = ""
    template_key_file: str = ""
    template_key: bytes = field(default=b"", repr=False)
    search_password_file: str = ""
    search: SearchOptions = field(default_factory=SearchOptions)
    learned: LearnedOptions = field(default_factory=LearnedOptions)
    engine: EngineSettings = field(default_factory=EngineSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> StreamSettings:
        """Every setting from ``env`` (default: the process environment, read here once),
        parsed and checked; ``overrides`` (command-line options) replace attributes."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        options: dict[str, dict[str, Any]] = {name: {} for name in OPTION_TYPES}
        for setting in SETTINGS:
            text = env.get(setting.env)
            if text is None or (text == "" and not setting.free_text):
                value = None if setting.optional else setting.default_value()
            else:
                value = setting.parse(text)
            owner, dot, name = setting.attribute.partition(".")
            if dot:
                options[owner][name] = value
            else:
                values[owner] = value
        for variable, secret in (
            ("DRIPSTREAM_SASL_PASSWORD_FILE", None),
            ("DRIPSTREAM_SEARCH_PASSWORD_FILE", "search"),
        ):
            path = values[BY_NAME[variable].attribute]
            if path:
                try:
                    password = Path(path).read_text().strip()
                except OSError as error:
                    raise SettingsError(f"{variable}={path!r}: {error.strerror}") from None
                if secret:
                    options[secret]["password"] = password
                else:
                    values["sasl_password"] = password
        key_file = values["template_key_file"]
        if key_file:
            try:
                values["template_key"] = Path(key_file).read_bytes().strip()
            except OSError as error:
                raise SettingsError(
                    f"DRIPSTREAM_TEMPLATE_KEY_FILE={key_file!r}: {error.strerror}"
                ) from None
            if len(values["template_key"]) < TEMPLATE_KEY_MIN_BYTES:
                raise SettingsError(
                    f"DRIPSTREAM_TEMPLATE_KEY_FILE={key_file!r}: expected a key of at least"
                    f" {TEMPLATE_KEY_MIN_BYTES} bytes"
                )
        for name, kind in OPTION_TYPES.items():
            values[name] = kind(**options[name])
        values.update(overrides)
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        """What one variable cannot say alone, and command-line overrides."""
        if not self.stages:
            raise BY_NAME["DRIPSTREAM_STAGES"].error("")
        labeller = BY_NAME["DRIPSTREAM_LABELLER"]
        if self.labeller not in labeller.options():
            raise labeller.error(self.labeller)
        if self.security_protocol.startswith("SASL") and not self.sasl_username:
            raise SettingsError(f"{self.security_protocol} needs DRIPSTREAM_SASL_USERNAME")

    def labeller_options(self) -> LabellerOptions:
        return LabellerOptions(
            profile=self.profile, model=self.model or None, learned=self.learned, engine=self.engine
        )

    def template_settings(self) -> TemplateSettings:
        return TemplateSettings(
            agreement=self.template_agreement,
            expected_agreement=self.template_expected_agreement,
            verify_pages=self.template_verify_pages,
            shadow_rate=self.template_shadow_rate,
            min_teacher_confidence=self.template_min_teacher_confidence,
            max_sites=self.template_sites,
            max_bytes=self.template_cache_mib * 1024**2,
        )

    def limits(self) -> Limits:
        """The per-page sandbox's bounds."""
        return Limits(timeout_s=self.page_timeout_s, memory_mib=self.page_memory_mib)

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

    def value(self, setting: Setting) -> Any:
        """The typed value in force of ``setting``."""
        owner, dot, name = setting.attribute.partition(".")
        return getattr(getattr(self, owner), name) if dot else getattr(self, owner)

    def describe(self) -> list[tuple[str, str]]:
        """(variable, value in force) of every setting, in ``SETTINGS`` order; secrets
        shown as ``***`` when set, ``*_FILE`` variables as their path."""
        shown = []
        for setting in SETTINGS:
            value = self.value(setting)
            text = ("***" if value else "") if setting.secret else _show(value)
            shown.append((setting.env, text))
        return shown


def _show(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def markdown() -> str:
    """docs/configuration.md: a table per component (kept equal by a test)."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m dripstream.streams.settings --markdown`; do not edit. -->",
        "",
        "Every setting is a `DRIPSTREAM_*` environment variable, declared once in"
        " `dripstream/streams/settings.py` and checked when a command or worker starts:"
        " a bad value stops it with exit 2 and one line"
        " `error: <variable>='...': expected <form>`. Booleans take 1/0, true/false,"
        " yes/no or on/off (any case); an unset or empty variable takes its default (a"
        " free-text variable's empty value is its value). `dripstream config` prints the"
        " values in force, secrets masked.",
    ]
    for component, about in COMPONENTS.items():
        lines += [
            "",
            f"## {component}",
            "",
            f"Settings of {about}.",
            "",
            "| Variable | Type | Default | Bounds | Meaning |",
            "|---|---|---|---|---|",
        ]
        for setting in SETTINGS:
            if setting.component != component:
                continue
            kind = "list" if setting.kind is tuple else setting.kind.__name__
            if setting.secret:
                kind += " (secret)"
            default = _show(None if setting.optional else setting.default_value())
            cells = (
                f"`{setting.env}`",
                kind,
                f"`{default}`" if default else "",
                setting.bounds(),
                setting.doc,
            )
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines += [
        "",
        "## build",
        "",
        "Read by the build (setup.py), not by the product.",
        "",
        "| Variable | Meaning |",
        "|---|---|",
        *(f"| `{name}` | {doc} |" for name, doc in BUILD_VARIABLES.items()),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m dripstream.streams.settings --markdown")
    sys.stdout.write(markdown())
