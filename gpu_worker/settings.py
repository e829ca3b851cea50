"""The vLLM engine's settings, from ``DRIPSTREAM_VLLM_*`` environment variables.

Which model runs (profile, weights) is not here: the profile is chosen once for the
whole pipeline (``DRIPSTREAM_PROFILE`` / ``--profile``), because it also sets the
simplify stage's token budget.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from dripstream.gpu_worker.engine import EngineSettings

PREFIX = "DRIPSTREAM_VLLM_"


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


def engine_settings_from_env(env: Mapping[str, str] | None = None) -> EngineSettings:
    """Read ``DRIPSTREAM_VLLM_*``; unset variables keep the defaults."""
    env = os.environ if env is None else env
    return EngineSettings(
        **{
            name: parse(env[PREFIX + suffix])
            for suffix, (name, parse) in _ENGINE_VARIABLES.items()
            if env.get(PREFIX + suffix)
        }
    )
