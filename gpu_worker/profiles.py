"""Model profiles: which weights, how the prompt is built, what the answer looks like.

A profile is a TOML file (``gpu_worker/profiles/NAME.toml``, or any path); its prompt
template is a text file beside it, so a user can drop in the exact wording their weights
were trained with. In a template, ``{{html}}`` is replaced by the page's simplified HTML
and ``{{block_count}}`` by its number of blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec

from dripstream.processors.extract.budget import PipelineSettings
from dripstream.processors.extract.tokens import (
    CPU_MAX_BLOCKS,
    EstimatedTokenCounter,
    HuggingFaceTokenCounter,
    TokenBudget,
    TokenCounter,
)
from dripstream.processors.label.registry import DEFAULT_PROFILE, LabellerOptions
from dripstream.topics.records import LABELS

__all__ = ["DEFAULT_PROFILE", "ModelProfile", "load_profile", "pipeline_settings"]

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

OutputFormat = Literal["json", "compact"]
HtmlLayout = Literal["nested", "flat"]


class ModelProfile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One labelling model family (see ``gpu_worker/profiles/*.toml``)."""

    name: str
    weights: str
    """Hugging Face hub id or local folder (override: ``DRIPSTREAM_MODEL`` / ``--model``)."""
    output_format: OutputFormat
    prompt_template: str
    """Template file, relative to the profile file."""
    context_tokens: int
    """Prompt + answer must fit (the model's max_model_len); also the simplify stage's
    token budget, so the whole pipeline has one context size."""
    tokenizer: str | None = None
    """Tokenizer folder or hub id when it is not the weights'."""
    use_chat_template: bool = True
    """Wrap the prompt as one user turn with the tokenizer's chat template."""
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = {}
    """Extra chat-template variables, e.g. ``enable_thinking = false`` for Qwen3."""
    html_layout: HtmlLayout = "nested"
    """``nested``: the simplified page with its class/id containers; ``flat``: the blocks
    alone, one after another (the published models' training form)."""
    labels: list[str] = msgspec.field(default_factory=lambda: list(LABELS))
    """Label vocabulary; the first is the main-content label."""
    template_text: str = ""
    """The template's text, filled in by ``load_profile``."""


def profile_names() -> list[str]:
    """The profiles shipped with the package."""
    return sorted(path.stem for path in PROFILES_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path, weights: str | None = None) -> ModelProfile:
    """A shipped profile by name, or a profile file by path; ``weights`` overrides its
    weights (a local folder instead of the hub id, say)."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = PROFILES_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise FileNotFoundError(
            f"no model profile {name_or_path!r} (shipped: {', '.join(profile_names())})"
        )
    profile = msgspec.toml.decode(path.read_bytes(), type=ModelProfile)
    if len(set(profile.labels)) != len(profile.labels) or len(profile.labels) < 2:
        raise ValueError(f"{path}: labels must be two or more distinct words")
    template = (path.parent / profile.prompt_template).read_text(encoding="utf-8")
    if "{{html}}" not in template:
        raise ValueError(f"{profile.prompt_template}: the template has no {{{{html}}}}")
    return msgspec.structs.replace(
        profile, template_text=template, weights=weights or profile.weights
    )


def _tokenizer_file(location: str) -> Path | None:
    """``tokenizer.json`` of a local folder or file, or of a hub id already in the local
    Hugging Face cache; None when it is not on this machine."""
    path = Path(location)
    if path.is_file():
        return path
    if (path / "tokenizer.json").is_file():
        return path / "tokenizer.json"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(location, "tokenizer.json")
    except ValueError:  # not a valid repo id
        return None
    return Path(cached) if isinstance(cached, str) else None


def token_counter(profile: ModelProfile) -> TokenCounter:
    """The profile's own tokenizer (``tokenizer``, else the weights'); the named estimate
    when it is not on this machine (a hub id that was never downloaded)."""
    found = _tokenizer_file(profile.tokenizer or profile.weights)
    return HuggingFaceTokenCounter(found) if found else EstimatedTokenCounter()


def pipeline_settings(profile: ModelProfile) -> PipelineSettings:
    """The budget of a labeller that reads pages as this profile's prompt: its context,
    counted with its tokenizer. The simplify step and the labeller read the same
    numbers."""
    return PipelineSettings(
        budget=TokenBudget(context_tokens=profile.context_tokens),
        token_counter=token_counter(profile),
    )


def profile_budget(
    options: LabellerOptions, cpu_max_blocks: int = CPU_MAX_BLOCKS
) -> PipelineSettings:
    """The registry's budget factory for a prompt labeller (``PROFILE_CONTEXT``): the
    options' profile (default ``DEFAULT_PROFILE``) and weights; a block cap does not
    apply to a labeller with a context."""
    return pipeline_settings(load_profile(options.profile or DEFAULT_PROFILE, options.model))
