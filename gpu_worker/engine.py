"""vLLM's async engine, in-process, with the settings that matter for labelling.

Prefix caching (the prompt's fixed head is shared by every page) and chunked prefill (a
long page does not stall the decodes of the others) are on by default; ``max_in_flight``
is also the engine's ``max_num_seqs``. On the CPU build, ``cpu_kvcache_gib`` and
``cpu_threads_bind`` become ``VLLM_CPU_KVCACHE_SPACE`` / ``VLLM_CPU_OMP_THREADS_BIND``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM


@dataclass(frozen=True)
class EngineSettings:
    """Engine knobs; the entry points fill them from the ``DRIPSTREAM_VLLM_*`` settings."""

    max_in_flight: int = 64
    max_batched_tokens: int = 8192
    gpu_memory_utilization: float = 0.9
    cpu_kvcache_gib: int = 4
    cpu_threads_bind: str = "all"
    tensor_parallel: int = 1
    enforce_eager: bool = False
    prefix_caching: bool = True
    chunked_prefill: bool = True
    structured_backend: str = "xgrammar"
    dtype: str = "auto"
    seed: int = 0


def cpu_bind_list(value: str) -> str:
    """``all`` -> every core this process may run on, as vLLM's comma list; other values
    (``auto``, ``nobind``, ``0-3``) pass through."""
    if value != "all":
        return value
    return ",".join(str(core) for core in sorted(os.sched_getaffinity(0)))


def configure_cpu_environment(settings: EngineSettings) -> None:
    """Set the CPU build's variables (read when the engine process starts) unless the
    operator set them already."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.cpu_kvcache_gib))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_bind_list(settings.cpu_threads_bind))


def start_engine(
    model: str, tokenizer: str | None, max_model_len: int, settings: EngineSettings
) -> AsyncLLM:
    """Start ``AsyncLLM`` for ``model``; call from inside the event loop that will use it."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.v1.engine.async_llm import AsyncLLM

    if current_platform.is_cpu():
        configure_cpu_environment(settings)
    args = AsyncEngineArgs(
        model=model,
        tokenizer=tokenizer,
        max_model_len=max_model_len,
        max_num_seqs=settings.max_in_flight,
        max_num_batched_tokens=settings.max_batched_tokens,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        tensor_parallel_size=settings.tensor_parallel,
        enforce_eager=settings.enforce_eager,
        enable_prefix_caching=settings.prefix_caching,
        enable_chunked_prefill=settings.chunked_prefill,
        structured_outputs_config={"backend": settings.structured_backend},
        dtype=settings.dtype,
        seed=settings.seed,
        disable_log_stats=True,
    )
    return AsyncLLM.from_engine_args(args)
