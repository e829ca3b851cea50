"""The development harness: ``demo``, ``soak`` and ``broker``.

They start a local Kafka broker with ``scripts/broker.sh`` and so need a source
checkout (the script and its Maven pom are not in the installed package); from an
installed package they say so instead of failing halfway.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dripstream.streams.cli.common import UsageError, add_command, stream_settings

CHECKOUT = Path(__file__).resolve().parents[2]
BROKER_SCRIPT = CHECKOUT / "scripts" / "broker.sh"
SAMPLES = CHECKOUT / "samples" / "pages.jsonl"


def require_checkout(command: str) -> None:
    if not BROKER_SCRIPT.is_file():
        raise UsageError(
            f"'dripstream {command}' runs a local broker with scripts/broker.sh and needs a "
            f"source checkout (run it from a clone of the repository: make demo); against "
            f"a running cluster use 'dripstream worker' and 'dripstream produce'"
        )


def cmd_demo(args: argparse.Namespace) -> int:
    require_checkout("demo")
    from dripstream.streams.demo import run_demo

    return run_demo(
        stream_settings(args),
        args.sources or [str(SAMPLES)],
        args.deadline,
        args.max_chars,
        search=not args.no_search,
    )


def cmd_soak(args: argparse.Namespace) -> int:
    require_checkout("soak")
    from dripstream.streams.soak import run_soak

    ledger = run_soak(
        stream_settings(args),
        args.pages,
        args.rate,
        args.kill_every,
        args.broker_pause,
        seed=args.seed,
    )
    print(json.dumps(ledger, indent=1))
    return 0 if ledger["lost"] == 0 else 1


def cmd_broker(args: argparse.Namespace) -> int:
    require_checkout("broker")
    from dripstream.streams.demo import broker

    return broker(args.action)


def register(commands: argparse._SubParsersAction) -> None:
    demo = add_command(
        commands,
        "demo",
        "run the whole stream locally, print a ledger, search what it indexed (source checkout)",
        "make demo",
    )
    demo.add_argument("sources", nargs="*", help="pages to feed (default: samples/pages.jsonl)")
    demo.add_argument("--deadline", type=float, default=180.0, help="seconds to wait for outputs")
    demo.add_argument(
        "--no-search",
        action="store_true",
        help="skip the search sink and the local search engine (scripts/search.sh)",
    )
    demo.add_argument("--labeller", help="label-stage labeller (see dripstream labellers)")
    demo.add_argument(
        "--max-chars",
        type=int,
        default=0,
        metavar="N",
        help="print each record's Markdown up to N characters, the cut marked (default 0: whole)",
    )
    demo.set_defaults(run=cmd_demo)

    soak = add_command(
        commands,
        "soak",
        "run the pipeline under a simulated crawl with faults (source checkout)",
        "dripstream soak --pages 2000 --kill-every 30 --broker-pause 30",
    )
    soak.add_argument("--pages", type=int, default=2000, help="pages to produce")
    soak.add_argument("--rate", type=float, default=40.0, help="pages per second produced")
    soak.add_argument(
        "--kill-every", type=float, default=30.0, help="kill -9 a worker every S seconds (0: never)"
    )
    soak.add_argument(
        "--broker-pause",
        type=float,
        default=30.0,
        help="stop the broker this long once, mid-run (0: never)",
    )
    soak.add_argument("--seed", type=int, default=7, help="random seed of the simulated crawl")
    soak.set_defaults(run=cmd_soak)

    broker = add_command(
        commands,
        "broker",
        "the local Apache Kafka broker (source checkout)",
        "dripstream broker up",
    )
    broker.add_argument("action", choices=("up", "down", "status", "logs"), help="what to do")
    broker.set_defaults(run=cmd_broker)
