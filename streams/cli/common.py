"""What the command modules share: exit codes, option groups, settings and labellers."""

from __future__ import annotations

import argparse
import sys

from dripstream.gpu_worker.profiles import DEFAULT_PROFILE, load_profile, pipeline_settings
from dripstream.processors.extract.tokens import EstimatedTokenCounter
from dripstream.processors.ingest.sources import SourceError
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.registry import (
    DEFAULT_LABELLER,
    LabellerOptions,
    UnknownLabeller,
    build_labeller,
    labeller_names,
)
from dripstream.processors.pipeline import PipelineSettings
from dripstream.processors.sinks import SinkError
from dripstream.streams.settings import SettingsError, StreamSettings

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
        default=DEFAULT_PROFILE,
        help="model profile, a shipped name or a .toml path: context size and tokenizer "
        f"(default {DEFAULT_PROFILE})",
    )
    parser.add_argument("--model", help="weights folder or hub id overriding the profile's")


def pipeline_from_args(args: argparse.Namespace) -> PipelineSettings:
    """The labeller's budget (the profile's context, or a block cap for a labeller without
    one) and the profile's tokenizer; says so when a model was named but its
    tokenizer is not on this machine, so counts are an estimate."""
    try:
        profile = load_profile(args.profile, weights=args.model)
        settings = pipeline_settings(profile, getattr(args, "labeller", None))
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
    options = LabellerOptions(profile=args.profile, model=args.model)
    return build_labeller(args.labeller, options)


def stream_settings(args: argparse.Namespace) -> StreamSettings:
    """Settings from the environment, with this command's options on top."""
    overrides: dict[str, object] = {}
    if getattr(args, "stages", None):
        overrides["stages"] = tuple(part for part in args.stages.split(",") if part)
    for name in ("labeller", "profile", "model"):
        if getattr(args, name, None):
            overrides[name] = getattr(args, name)
    try:
        return StreamSettings.from_env(**overrides)
    except SettingsError as error:
        raise UsageError(str(error)) from None


def with_example(text: str) -> str:
    return f"example:\n  {text}"


def add_command(
    commands: argparse._SubParsersAction,
    name: str,
    summary: str,
    example: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` says what it does and ends with an example."""
    return commands.add_parser(
        name,
        help=summary,
        description=description or summary,
        epilog=with_example(example),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
