"""The ``dripstream`` command line: offline commands (``offline``), operations on a live
pipeline (``operations``) and the development harness (``develop``), one module each;
every module adds its commands with ``register``.
"""

from __future__ import annotations

import argparse
import logging
import lzma
import sys
import zlib
from collections.abc import Sequence

from dripstream.streams.cli import develop, offline, operations
from dripstream.streams.cli.common import (
    EXIT_BROKER,
    EXIT_INPUT,
    EXPECTED,
    UsageError,
    stream_settings,
)

DESCRIPTION = "Web pages in, clean Markdown records out: the Dripper method on Kafka."
EPILOG = """exit codes:
  0  done
  1  the command ran and found a problem (demo, soak: pages lost)
  2  unusable input or options: a missing, unreadable or empty source, a bad value
  3  the broker could not be reached (DRIPSTREAM_BROKERS) or refused the request

Each command has its own --help, ending with an example.

example:
  dripstream extract page.html --url https://example.com/a"""


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("dripstream")
        except PackageNotFoundError:
            found = "unknown"
        print(f"dripstream {found}")
        parser.exit()


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dripstream",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (offline, operations, develop):
        module.register(commands)
    return parser


def _broker_error(error: BaseException) -> bool:
    """An error raised by the Kafka client (aiokafka), checked without importing it."""
    return any(cls.__module__.split(".")[0] == "aiokafka" for cls in type(error).__mro__)


def _broker_message(error: BaseException, args: argparse.Namespace) -> str:
    brokers = stream_settings(args).brokers
    if type(error).__name__ == "KafkaConnectionError":
        return f"broker unreachable at {brokers} (DRIPSTREAM_BROKERS)"
    detail = str(error).removeprefix(f"{type(error).__name__}: ")
    return f"broker at {brokers}: {type(error).__name__}: {detail}".rstrip(": ")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; expected failures print one ``error:`` line, never a traceback.

    Exit codes: 0 done, 1 the command ran but found a problem (demo, soak: lost pages),
    2 unusable input or options (EXIT_INPUT), 3 the broker could not be reached or
    refused the request (EXIT_BROKER), 130 interrupted.
    """
    args = make_parser().parse_args(argv)
    kafka_log = logging.getLogger("aiokafka")
    level = kafka_log.level
    if args.command != "worker":  # the error line says it; the worker logs JSON itself
        kafka_log.setLevel(logging.CRITICAL)
    try:
        return _run(args)
    finally:
        kafka_log.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    try:
        stream_settings(args)  # every DRIPSTREAM_* setting checked before any work
        return args.run(args)
    except (UsageError, *EXPECTED) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as error:
        if _broker_error(error):
            print(f"error: {_broker_message(error, args)}", file=sys.stderr)
            return EXIT_BROKER
        print(
            f"error: {error.strerror or error}: {error.filename or ''}".rstrip(": "),
            file=sys.stderr,
        )
        return EXIT_INPUT
    except (UnicodeDecodeError, EOFError, lzma.LZMAError, zlib.error) as error:
        print(f"error: unreadable input: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        if _broker_error(error):
            print(f"error: {_broker_message(error, args)}", file=sys.stderr)
            return EXIT_BROKER
        raise
