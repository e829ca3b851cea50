"""The ``dripstream`` command line: offline commands (``offline``), operations on a live
pipeline (``operations``) and the development harness (``develop``), one module each;
every module adds its commands with ``register``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from streams.cli import develop, offline, operations
from streams.cli.common import EXIT_BROKER, EXIT_INPUT, EXPECTED, UsageError

DESCRIPTION = "Web pages in, clean Markdown records out: the Dripper method on Kafka."


def _version() -> str:
    try:
        return version("dripstream")
    except PackageNotFoundError:
        return "unknown"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dripstream", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"dripstream {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (offline, operations, develop):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; expected failures print one ``error:`` line, never a traceback."""
    args = make_parser().parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, *EXPECTED) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as error:
        if type(error).__module__.startswith("aiokafka") or "Kafka" in type(error).__name__:
            print(f"error: broker: {error}", file=sys.stderr)
            return EXIT_BROKER
        print(
            f"error: {error.strerror or error}: {error.filename or ''}".rstrip(": "),
            file=sys.stderr,
        )
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
