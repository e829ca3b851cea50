"""Operations on a live pipeline: ``worker``, ``topics``, ``acls``, ``produce``, ``tail``, ``dlq``,
``config`` and ``labellers``."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import msgspec

from dripstream.processors.label.registry import LABELLERS
from dripstream.streams.cli.common import (
    EXIT_INPUT,
    UsageError,
    add_command,
    add_profile_options,
    stream_settings,
)
from dripstream.topics.catalog import ALL_TOPICS, RECORDS
from dripstream.topics.records import RawPage

T = TypeVar("T")


def _wait(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end (asyncio is loaded by the commands that need it only)."""
    import asyncio

    return asyncio.run(coroutine)


class _WorkerHelp(argparse.RawDescriptionHelpFormatter):
    """Names the stages in ``worker --help`` only when it is shown: the stage registry
    imports every stage, which the other commands never need."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.dest != "stages":
            return action.help
        from dripstream.streams.stages import DEFAULT_STAGES, STAGES

        return f"comma-separated from {', '.join(STAGES)} (default {','.join(DEFAULT_STAGES)})"


def cmd_worker(args: argparse.Namespace) -> int:
    from dripstream.streams.worker import run_worker

    run_worker(stream_settings(args))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from dripstream.streams.kafka import create_topics, describe_topics

    settings = stream_settings(args)
    if args.action == "create":
        for name, outcome in _wait(create_topics(settings)).items():
            print(f"{name}: {outcome}")
    else:
        for topic in _wait(describe_topics(settings)):
            print(json.dumps(topic))
    return 0


def cmd_acls(args: argparse.Namespace) -> int:
    from dripstream.streams.acls import all_acls, apply_acls

    settings = stream_settings(args)
    acls = _wait(apply_acls(settings)) if args.action == "apply" else all_acls(settings)
    for acl in acls:
        print(acl.show())
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    from dripstream.processors.ingest.sources import read_pages, skipped_summary
    from dripstream.streams.tools import produce_pages

    settings = stream_settings(args)
    refused: Counter[str] = Counter()
    skipped: Counter[str] = Counter()

    def readable() -> Iterator[RawPage]:
        """The pages read; a record that is not one is counted, not sent."""
        for source in args.sources:
            for page in read_pages(source, skipped=skipped):
                if page.error is None:
                    yield page.raw
                else:
                    refused[type(page.error).__name__] += 1
                    print(f"error: {source}: {page.id}: {page.error}", file=sys.stderr)

    ids = _wait(produce_pages(settings, readable(), progress=not args.quiet))
    print(f"produced {len(ids)} pages to {settings.topic_prefix}pages", file=sys.stderr)
    if summary := skipped_summary(skipped):
        print(summary, file=sys.stderr)
    if refused:
        counts = ", ".join(f"{name} {count}" for name, count in sorted(refused.items()))
        print(f"error: {refused.total()} input records not produced ({counts})", file=sys.stderr)
        return EXIT_INPUT
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from dripstream.streams.tools import read_topics

    settings = stream_settings(args)
    messages = _wait(read_topics(settings, [args.topic], idle_s=args.idle))
    for message in messages[-args.last :] if args.last else messages:
        value = (
            message.value.decode("utf-8", "replace")
            if message.topic == RECORDS
            else f"<{len(message.value)} bytes>"
        )
        key = (message.key or b"").decode("utf-8", "replace")
        print(f"{message.partition}:{message.offset} key={key} {value}")
    return 0


def search_target(explicit: str | None = None, sink: str = "") -> str:
    """The index to search: ``--index``, else the sink's (DRIPSTREAM_SINK) when it is a
    search sink, else the local engine's ``dripstream`` index."""
    from dripstream.processors.sinks.search import DEFAULT_TARGET

    if explicit:
        return explicit
    kind, _, target = sink.partition(":")
    return target if kind == "opensearch" and target else DEFAULT_TARGET


def cmd_search(args: argparse.Namespace) -> int:
    from dripstream.processors.sinks.search import SearchIndex

    settings = stream_settings(args)
    index = SearchIndex(search_target(args.index, settings.sink), settings.search)
    try:
        hits = index.search(" ".join(args.query), size=args.size, phrase=not args.words)
    except Exception as error:  # an unreachable engine or a missing index: one line
        raise UsageError(
            f"search {index.url}/{index.index}: {type(error).__name__}: {error}"
        ) from None
    finally:
        index.close()
    if args.json:
        for hit in hits:
            print(json.dumps(hit.__dict__, ensure_ascii=False))
        return 0 if hits else 1
    for number, hit in enumerate(hits, 1):
        print(f"{number}. {hit.title or '(untitled)'}  [{hit.language or '?'}] {hit.score:.2f}")
        print(f"   {hit.url}")
        if hit.snippet:
            print(f"   {hit.snippet}")
    print(f"{len(hits)} hit(s) in {index.url}/{index.index}", file=sys.stderr)
    return 0 if hits else 1


def cmd_dlq(args: argparse.Namespace) -> int:
    from dripstream.streams.tools import describe_dead_letter, read_topics, replay_dead_letters

    settings = stream_settings(args)
    if args.action == "list":
        for message in _wait(read_topics(settings, ["deadletters"], idle_s=args.idle)):
            print(json.dumps(describe_dead_letter(message), ensure_ascii=False))
        return 0
    offsets = set(args.offset) if args.offset else None
    sent, skipped, refused = _wait(
        replay_dead_letters(settings, offsets, include_replays=args.include_replays)
    )
    for line in refused:
        print(f"error: {line}", file=sys.stderr)
    print(
        f"replayed {sent} dead letters ({skipped} skipped, {len(refused)} refused)",
        file=sys.stderr,
    )
    return 1 if refused else 0


def cmd_templates(args: argparse.Namespace) -> int:
    from dripstream.processors.label.templates import export_site, site_summary
    from dripstream.streams.template_store import drop_site, read_site_states

    settings = stream_settings(args)
    if args.action == "drop":
        _wait(drop_site(settings, _need_site(args)))
        print(f"dropped the templates of {args.site}", file=sys.stderr)
        return 0
    states = _wait(read_site_states(settings))
    if args.action == "list":
        for site in sorted(states):
            print(site_summary(states[site]))
        return 0
    state = states.get(_need_site(args))
    if state is None:
        raise UsageError(f"no templates for {args.site}")
    if args.action == "show":
        print(json.dumps(msgspec.to_builtins(state), indent=1))
    else:
        print(json.dumps(export_site(state, settings.template_settings()), indent=1))
    return 0


def _need_site(args: argparse.Namespace) -> str:
    if not args.site:
        raise UsageError(f"templates {args.action} needs SITE (a registrable domain)")
    return args.site


def cmd_config(args: argparse.Namespace) -> int:
    """Every setting in force as ``NAME=value``, under a ``# component`` line per
    component (secrets masked)."""
    from dripstream.streams.settings import COMPONENTS, SETTINGS

    shown = dict(stream_settings(args).describe())
    for component in COMPONENTS:
        print(f"# {component}")
        for setting in SETTINGS:
            if setting.component == component:
                print(f"{setting.env}={shown[setting.env]}")
    return 0


def cmd_labellers(args: argparse.Namespace) -> int:
    for name, factory in sorted(LABELLERS.items()):
        print(f"{name:12s} {factory}")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    worker = add_command(
        commands,
        "worker",
        "run stream stages until SIGTERM (settings: DRIPSTREAM_* variables)",
        "dripstream worker --stages label --labeller vllm --profile mineru-html-qwen3-0.6b",
        formatter=_WorkerHelp,
    )
    worker.add_argument(
        "--stages",
        help="comma-separated stage names",  # listed by _WorkerHelp
    )
    worker.add_argument("--labeller", choices=sorted(LABELLERS), help="label-stage labeller")
    add_profile_options(worker)
    worker.set_defaults(run=cmd_worker, profile=None)

    topics = add_command(
        commands, "topics", "create or describe the pipeline topics", "dripstream topics create"
    )
    topics.add_argument("action", choices=("create", "describe"), help="what to do")
    topics.set_defaults(run=cmd_topics)

    acls = add_command(
        commands,
        "acls",
        "show or apply (as the admin) each role's ACLs on a secure broker",
        "dripstream acls apply",
    )
    acls.add_argument("action", choices=("show", "apply"), help="what to do")
    acls.set_defaults(run=cmd_acls)

    produce = add_command(
        commands, "produce", "feed pages to the pages topic", "dripstream produce crawl.warc.gz"
    )
    produce.add_argument("sources", nargs="+", help="HTML files, folders, JSONL or WARC files")
    produce.add_argument("--quiet", action="store_true", help="no progress bar")
    produce.set_defaults(run=cmd_produce)

    tail = add_command(
        commands, "tail", "print the messages of a topic", "dripstream tail records --last 5"
    )
    tail.add_argument("topic", choices=ALL_TOPICS, help="short topic name (without prefix)")
    tail.add_argument("--last", type=int, default=0, help="only the last N messages")
    tail.add_argument("--idle", type=float, default=2.0, help="stop after N idle seconds")
    tail.set_defaults(run=cmd_tail)

    search = add_command(
        commands,
        "search",
        "search the records a search sink indexed (title and Markdown); exit 1: no hit",
        'dripstream search "spring tides"   # the words in this order\n'
        "  dripstream search --words tides moon -neap --index http://127.0.0.1:9200/dripstream",
    )
    search.add_argument("query", nargs="+", help="a phrase (several arguments are joined)")
    search.add_argument(
        "--words",
        action="store_true",
        help='every word anywhere, in simple query syntax ("quoted phrase", -word, a | b)',
    )
    search.add_argument(
        "--index",
        help="URL/INDEX of the engine (default: DRIPSTREAM_SINK's opensearch target, else "
        "http://127.0.0.1:9200/dripstream); credentials and TLS: DRIPSTREAM_SEARCH_*",
    )
    search.add_argument("--size", type=int, default=10, help="hits to show (default 10)")
    search.add_argument("--json", action="store_true", help="one JSON object per hit")
    search.set_defaults(run=cmd_search)

    dlq = add_command(
        commands,
        "dlq",
        "inspect or replay dead letters (each at most once)",
        "dripstream dlq replay --offset 12",
    )
    dlq.add_argument("action", choices=("list", "replay"), help="what to do")
    dlq.add_argument("--offset", type=int, action="append", help="replay only these offsets")
    dlq.add_argument(
        "--include-replays",
        action="store_true",
        help="also replay dead letters that came from an earlier replay",
    )
    dlq.add_argument("--idle", type=float, default=2.0, help="stop after N idle seconds")
    dlq.set_defaults(run=cmd_dlq)

    templates = add_command(
        commands,
        "templates",
        "list, show, export (CSS selectors for review) or drop a site's templates",
        "dripstream templates export example.com",
    )
    templates.add_argument("action", choices=("list", "show", "export", "drop"), help="what to do")
    templates.add_argument("site", nargs="?", help="registrable domain, e.g. example.com")
    templates.set_defaults(run=cmd_templates)

    config = add_command(
        commands,
        "config",
        "print every DRIPSTREAM_* setting in force, by component (secrets masked)",
        "DRIPSTREAM_BROKERS=kafka:9092 dripstream config",
    )
    config.set_defaults(run=cmd_config)

    labellers = add_command(
        commands, "labellers", "list the registered labellers", "dripstream labellers"
    )
    labellers.set_defaults(run=cmd_labellers)
