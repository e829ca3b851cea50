"""What the command modules share: exit codes, option groups, settings and labellers."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from dripstream.processors.extract.budget import PipelineSettings
from dripstream.processors.extract.tokens import EstimatedTokenCounter
from dripstream.processors.ingest.sources import SourceError
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.registry import (
    DEFAULT_LABELLER,
    DEFAULT_PROFILE,
    LabellerOptions,
    UnknownLabeller,
    budget_for,
    build_labeller,
    labeller_names,
    reads_prompt,
)
from dripstream.processors.sinks import SinkError
from dripstream.streams.settings import BY_NAME, SettingsError, StreamSettings

EXIT_INPUT = 2  # unusable input, a missing file, a bad option value
EXIT_BROKER = 3  # the broker could not be reached or refused the request


class UsageError(Exception):
    """A failure to report as one ``error:`` line."""


EXPECTED = (SourceError, SinkError, SettingsError, UnknownLabeller)


def add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--labeller",
        default=DEFAULT_LABELLER,
        choices=labeller_names(),
        help=f"who labels the blocks (default {DEFAULT_LABELLER})",
    )
    add_profile_options(parser)
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run per-page work in this process (faster; no time or memory bound)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_profile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        help="model profile of a prompt labeller, a shipped name or a .toml path: context "
        f"size and tokenizer (default DRIPSTREAM_PROFILE, else {DEFAULT_PROFILE})",
    )
    parser.add_argument("--model", help="weights folder or hub id overriding the profile's")


def pipeline_from_args(args: argparse.Namespace) -> PipelineSettings:
    """The labeller's budget (the profile's context, or a block cap for a labeller without
    one) and the profile's tokenizer; says so when a model was named but its
    tokenizer is not on this machine, so counts are an estimate."""
    labeller = getattr(args, "labeller", None)
    try:
        if labeller is None or (args.profile and not reads_prompt(labeller)):
            # No labeller (``simplify``): the profile's budget. A profile named beside a
            # labeller that reads no prompt is still checked, though it sizes nothing.
            from dripstream.gpu_worker.profiles import load_profile, pipeline_settings

            profile = load_profile(_options(args).profile or DEFAULT_PROFILE, args.model)
        if labeller is None:
            settings = pipeline_settings(profile)
        else:
            blocks = stream_settings(args).cpu_max_blocks
            settings = budget_for(labeller, _options(args), cpu_max_blocks=blocks)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    counter = settings.token_counter
    if isinstance(counter, EstimatedTokenCounter) and (
        args.model or getattr(args, "labeller", None) == "vllm"
    ):
        print(
            f"note: the profile's tokenizer is not on this machine (--model DIR); token "
            f"counts are an estimate ({counter.name})",
            file=sys.stderr,
        )
    return settings


def labeller_from_args(args: argparse.Namespace) -> Labeller:
    """The labeller ``--labeller`` names, with ``--profile``/``--model`` and the
    settings' options (learned labeller, vLLM engine)."""
    return build_labeller(args.labeller, _options(args))


def _options(args: argparse.Namespace) -> LabellerOptions:
    """The settings' labeller options with ``--profile``/``--model`` on top."""
    options = stream_settings(args).labeller_options()
    return replace(
        options, profile=args.profile or options.profile, model=args.model or options.model
    )


def stream_settings(args: argparse.Namespace) -> StreamSettings:
    """Settings from the environment, with this command's options on top: parsed and
    checked once per command (``main`` does it before the command runs), then kept on
    ``args.settings``."""
    settings = getattr(args, "settings", None)
    if isinstance(settings, StreamSettings):
        return settings
    overrides: dict[str, object] = {}
    if getattr(args, "stages", None):
        overrides["stages"] = tuple(part for part in args.stages.split(",") if part)
    for name in ("labeller", "profile", "model"):
        if getattr(args, name, None):
            overrides[name] = getattr(args, name)
    try:
        args.settings = StreamSettings.from_env(**overrides)
        if args.settings.stages != BY_NAME["DRIPSTREAM_STAGES"].default_value():
            # The stage names are the stage registry's to check (it imports every stage:
            # the default, its own DEFAULT_STAGES, needs no check).
            from dripstream.streams.stages import chosen

            chosen(args.settings.stages)
    except SettingsError as error:
        raise UsageError(str(error)) from None
    return args.settings


def with_example(text: str) -> str:
    return f"example:\n  {text}"


def add_command(
    commands: argparse._SubParsersAction,
    name: str,
    summary: str,
    example: str,
    description: str | None = None,
    formatter: type[argparse.HelpFormatter] = argparse.RawDescriptionHelpFormatter,
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` says what it does and ends with an example."""
    return commands.add_parser(
        name,
        help=summary,
        description=description or summary,
        epilog=with_example(example),
        formatter_class=formatter,
    )
