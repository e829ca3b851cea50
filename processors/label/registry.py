"""Every labeller, by name: the one list the CLI, the worker and the settings read.

A value names a factory as ``"module:attribute"``; it is imported only when that labeller
is built, so heavy members (vLLM) cost nothing until chosen. A factory returns a
``Labeller``; one that declares an ``options`` parameter gets the ``LabellerOptions``
(model profile, weights). Adding a labeller: one module with the class, one line here.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

from dripstream.processors.label.base import Labeller

LABELLERS: dict[str, str] = {
    "heuristic": "dripstream.processors.label.heuristic:HeuristicLabeller",
    "learned": "dripstream.processors.label.learned:LearnedLabeller",
    "oracle": "dripstream.processors.training.oracle:OracleLabeller",
    "fallback": "dripstream.processors.label.fallback_only:FallbackOnlyLabeller",
    "vllm": "dripstream.gpu_worker.labeller:VllmLabeller.from_options",
    "learned+vllm": "dripstream.gpu_worker.labeller:learned_then_vllm",
}
DEFAULT_LABELLER = "learned"
# Labellers that read the page as a language-model prompt: the model's context bounds
# their pages (the profile's token budget). The others have no context to fill.
PROMPT_LABELLERS = frozenset(("vllm", "learned+vllm"))


class UnknownLabeller(ValueError):
    """A labeller name that is not in ``LABELLERS``."""


@dataclass(frozen=True)
class LabellerOptions:
    """What a labeller may need to be built; each labeller reads the fields it uses."""

    profile: str | None = None
    """Model profile: a shipped name or a ``.toml`` path (model labellers)."""
    model: str | None = None
    """Weights path or hub id overriding the profile's (model labellers)."""


def labeller_names() -> list[str]:
    return sorted(LABELLERS)


def check_labeller(name: str) -> str:
    """``name`` if it is a registered labeller; raises UnknownLabeller otherwise."""
    if name not in LABELLERS:
        raise UnknownLabeller(f"unknown labeller {name!r}: choose from {', '.join(LABELLERS)}")
    return name


def reads_prompt(name: str) -> bool:
    """Whether labeller ``name`` reads pages as a model prompt (so has a context limit)."""
    return check_labeller(name) in PROMPT_LABELLERS


def build_labeller(name: str, options: LabellerOptions | None = None) -> Labeller:
    """Import and build the labeller registered as ``name``."""
    module_name, _, attribute = LABELLERS[check_labeller(name)].partition(":")
    factory: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        factory = getattr(factory, part)
    if "options" in inspect.signature(factory).parameters:  # type: ignore[arg-type]
        labeller = factory(options=options or LabellerOptions())  # type: ignore[operator]
    else:
        labeller = factory()  # type: ignore[operator]
    if not isinstance(labeller, Labeller):
        raise TypeError(f"labeller {name!r} does not implement the Labeller protocol")
    return labeller
