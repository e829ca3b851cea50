"""The vLLM labeller's settings, from ``DRIPSTREAM_VLLM_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_worker.engine import EngineSettings

DEFAULT_PROFILE = "mineru-html-qwen3-0.6b"
PREFIX = "DRIPSTREAM_VLLM_"


@dataclass(frozen=True)
class VllmSettings:
    """Which profile and weights, the context limit, and the engine's settings."""

    profile: str = DEFAULT_PROFILE
    model: str | None = None
    tokenizer: str | None = None
    max_model_len: int | None = None
    engine: EngineSettings = field(default_factory=EngineSettings)


def _flag(value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


# variable suffix -> (EngineSettings field, parser)
_ENGINE_VARIABLES = {
    "MAX_IN_FLIGHT": ("max_in_flight", int),
    "MAX_BATCHED_TOKENS": ("max_batched_tokens", int),
    "GPU_MEMORY": ("gpu_memory_utilization", float),
    "CPU_KVCACHE_GIB": ("cpu_kvcache_gib", int),
    "CPU_THREADS_BIND": ("cpu_threads_bind", str),
    "TENSOR_PARALLEL": ("tensor_parallel", int),
    "ENFORCE_EAGER": ("enforce_eager", _flag),
    "PREFIX_CACHING": ("prefix_caching", _flag),
    "CHUNKED_PREFILL": ("chunked_prefill", _flag),
    "STRUCTURED_BACKEND": ("structured_backend", str),
    "DTYPE": ("dtype", str),
    "SEED": ("seed", int),
}


def settings_from_env(env: Mapping[str, str] | None = None) -> VllmSettings:
    """Read ``DRIPSTREAM_VLLM_*``; unset variables keep the defaults."""
    env = os.environ if env is None else env
    engine = {
        name: parse(env[PREFIX + suffix])
        for suffix, (name, parse) in _ENGINE_VARIABLES.items()
        if env.get(PREFIX + suffix)
    }
    max_model_len = env.get(PREFIX + "MAX_MODEL_LEN")
    return VllmSettings(
        profile=env.get(PREFIX + "PROFILE") or DEFAULT_PROFILE,
        model=env.get(PREFIX + "MODEL") or None,
        tokenizer=env.get(PREFIX + "TOKENIZER") or None,
        max_model_len=int(max_model_len) if max_model_len else None,
        engine=EngineSettings(**engine),
    )
