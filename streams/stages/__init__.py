"""The stages, declared once (``STAGES``: name -> ``Stage``).

Each stage is one module (``simplify``, ``label``, ``reconstruct``, ``fallback``,
``sink``) that declares a ``Stage``: its input topic, the route of every record type it
emits, and a builder for its handler (see ``base``). The worker
(``dripstream.streams.app``) runs the chosen stages generically from these declarations.

Adding a stage: one module declaring its ``Stage``, and one line in ``_DECLARED``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dripstream.streams.settings import BY_NAME
from dripstream.streams.stages import fallback, label, reconstruct, simplify, sink
from dripstream.streams.stages.base import (
    CpuContext,
    Handler,
    PageRunners,
    Provisions,
    Stage,
    StageSetupError,
)

__all__ = [
    "DEFAULT_STAGES",
    "STAGES",
    "CpuContext",
    "Handler",
    "PageRunners",
    "Provisions",
    "Stage",
    "StageSetupError",
    "chosen",
    "registry",
]


def registry(stages: Iterable[Stage]) -> dict[str, Stage]:
    """Stages by name, in the given order; a name declared twice is refused."""
    named: dict[str, Stage] = {}
    for stage in stages:
        if stage.name in named:
            raise ValueError(f"stage {stage.name!r} is declared twice")
        named[stage.name] = stage
    return named


def chosen(names: Iterable[str], stages: Mapping[str, Stage] | None = None) -> list[Stage]:
    """The named stages of ``stages`` (default ``STAGES``), in the order named; an unknown
    name is refused as a bad ``DRIPSTREAM_STAGES``."""
    stages = STAGES if stages is None else stages
    names = tuple(names)
    unknown = [name for name in names if name not in stages]
    if unknown or not names:
        raise StageSetupError(
            f"DRIPSTREAM_STAGES={','.join(names)!r}: expected a comma-separated list of"
            f" {', '.join(stages)} (at least one); unknown: {', '.join(unknown) or 'none'}"
        )
    return [stages[name] for name in names]


_DECLARED = (
    simplify.STAGE,
    label.STAGE,
    reconstruct.STAGE,
    fallback.STAGE,
    sink.STAGE,
)
STAGES: dict[str, Stage] = registry(_DECLARED)
DEFAULT_STAGES: tuple[str, ...] = BY_NAME["DRIPSTREAM_STAGES"].default_value()
