"""Every labeller, by name: the one list the CLI, the worker and the settings read.

An entry names the labeller's factory as ``"module:attribute"``; it is imported only when
that labeller is built, so heavy members (vLLM) cost nothing until chosen. A factory
returns a ``Labeller``; one that declares an ``options`` parameter gets the
``LabellerOptions`` (model profile, weights).

An entry also names the budget its pages need, the same lazy way: a factory taking
``(options, cpu_max_blocks)`` and returning the ``PipelineSettings`` the simplify step
sizes pages with (``budget_for``). A CPU labeller reads no prompt, so its budget is a
block cap (``BLOCK_CAP``); a prompt labeller's is its model profile's context and
tokenizer (``PROFILE_CONTEXT``, in ``gpu_worker``). Importing this module imports no
labeller and nothing from ``gpu_worker``. Adding a labeller: one module with the class,
one line here.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from dripstream.processors.extract.budget import PipelineSettings
from dripstream.processors.extract.tokens import CPU_MAX_BLOCKS, TokenBudget
from dripstream.processors.label.base import Labeller

# Budget factories, ``(options, cpu_max_blocks) -> PipelineSettings``.
BLOCK_CAP = "dripstream.processors.label.registry:block_cap"
PROFILE_CONTEXT = "dripstream.gpu_worker.profiles:profile_budget"
DEFAULT_PROFILE = "mineru-html-qwen3-0.6b"
"""The model profile a prompt labeller reads when none is named."""


@dataclass(frozen=True)
class LabellerEntry:
    """One labeller: its factory and its budget's factory, as ``"module:attribute"``."""

    factory: str
    budget: str = BLOCK_CAP

    def __str__(self) -> str:
        return self.factory


LABELLERS: dict[str, LabellerEntry] = {
    "heuristic": LabellerEntry("dripstream.processors.label.heuristic:HeuristicLabeller"),
    "learned": LabellerEntry("dripstream.processors.label.learned:LearnedLabeller"),
    "oracle": LabellerEntry("dripstream.processors.training.oracle:OracleLabeller"),
    "fallback": LabellerEntry("dripstream.processors.label.fallback_only:FallbackOnlyLabeller"),
    "vllm": LabellerEntry(
        "dripstream.gpu_worker.labeller:VllmLabeller.from_options", PROFILE_CONTEXT
    ),
    "learned+vllm": LabellerEntry(
        "dripstream.gpu_worker.labeller:learned_then_vllm", PROFILE_CONTEXT
    ),
}
DEFAULT_LABELLER = "learned"


class UnknownLabeller(ValueError):
    """A labeller name that is not in ``LABELLERS``."""


@dataclass(frozen=True)
class LabellerOptions:
    """What a labeller may need to be built; each labeller reads the fields it uses."""

    profile: str | None = None
    """Model profile: a shipped name or a ``.toml`` path (model labellers)."""
    model: str | None = None
    """Weights path or hub id overriding the profile's (model labellers)."""
    learned: Any = None
    """The learned labeller's ``LearnedOptions``: floor, second opinion (None: defaults).
    Typed loosely so the registry imports no labeller."""
    engine: Any = None
    """The vLLM engine's ``EngineSettings`` (None: defaults); typed loosely likewise."""


def labeller_names() -> list[str]:
    return sorted(LABELLERS)


def check_labeller(name: str) -> str:
    """``name`` if it is a registered labeller; raises UnknownLabeller otherwise."""
    if name not in LABELLERS:
        raise UnknownLabeller(f"unknown labeller {name!r}: choose from {', '.join(LABELLERS)}")
    return name


def _entry(name: str) -> LabellerEntry:
    entry: LabellerEntry | str = LABELLERS[check_labeller(name)]
    return LabellerEntry(entry) if isinstance(entry, str) else entry


def _resolve(reference: str) -> object:
    """The object a ``"module:attribute"`` reference names (imported now)."""
    module_name, _, attribute = reference.partition(":")
    found: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def reads_prompt(name: str) -> bool:
    """Whether labeller ``name`` reads pages as a model prompt (its budget is not a block
    cap)."""
    return _entry(name).budget != BLOCK_CAP


def block_cap(
    options: LabellerOptions | None = None, cpu_max_blocks: int = CPU_MAX_BLOCKS
) -> PipelineSettings:
    """A CPU labeller's budget: no context to fill, so only a cap on the blocks a page
    brings (more: fallback, ``too_many_blocks``); tokens are the named estimate."""
    return PipelineSettings(budget=TokenBudget.cpu(cpu_max_blocks))


def budget_for(
    name: str, options: LabellerOptions | None = None, *, cpu_max_blocks: int = CPU_MAX_BLOCKS
) -> PipelineSettings:
    """The budget labeller ``name``'s pages must fit, with the token counter it is
    counted with: what the simplify step sizes pages by, for the stream and offline."""
    factory = _resolve(_entry(name).budget)
    return factory(options or LabellerOptions(), cpu_max_blocks)  # type: ignore[operator]


def build_labeller(name: str, options: LabellerOptions | None = None) -> Labeller:
    """Import and build the labeller registered as ``name``."""
    factory = _resolve(_entry(name).factory)
    if "options" in inspect.signature(factory).parameters:  # type: ignore[arg-type]
        labeller = factory(options=options or LabellerOptions())  # type: ignore[operator]
    else:
        labeller = factory()  # type: ignore[operator]
    if not isinstance(labeller, Labeller):
        raise TypeError(f"labeller {name!r} does not implement the Labeller protocol")
    return labeller
