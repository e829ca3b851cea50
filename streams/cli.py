"""The ``dripstream`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import msgspec

from processors.decode import check_html, decode_html
from processors.errors import PageError
from processors.evaluation import EvalReport, evaluate, read_dataset
from processors.labellers.base import Labeller
from processors.labellers.fallback_only import FallbackOnlyLabeller
from processors.labellers.heuristic import HeuristicLabeller
from processors.labellers.oracle import OracleLabeller
from processors.pipeline import Outcome, PipelineSettings, extract_pages
from processors.simplify import simplify
from processors.tokens import EstimatedTokenCounter, TokenBudget, load_token_counter
from streams.settings import SettingsError, StreamSettings
from topics.records import RawPage

LABELLERS = {
    "heuristic": HeuristicLabeller,
    "oracle": OracleLabeller,
    "fallback": FallbackOnlyLabeller,
}
JSONL_BATCH = 32
SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "pages.jsonl"


def build_labeller(name: str) -> Labeller:
    try:
        return LABELLERS[name]()
    except KeyError:
        raise SystemExit(f"unknown labeller {name!r}; choose from {', '.join(LABELLERS)}") from None


def build_settings(args: argparse.Namespace) -> PipelineSettings:
    counter = load_token_counter(args.tokenizer)
    if isinstance(counter, EstimatedTokenCounter):
        print(
            f"note: no tokenizer configured (--tokenizer or DRIPSTREAM_TOKENIZER); token "
            f"counts are an estimate ({counter.name})",
            file=sys.stderr,
        )
    return PipelineSettings(
        budget=TokenBudget(context_tokens=args.context_tokens), token_counter=counter
    )


def _read_input(source: str) -> bytes:
    return sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()


def _outcome_json(outcome: Outcome) -> dict[str, object]:
    data: dict[str, object] = {"status": outcome.status}
    if outcome.record is not None:
        data.update(msgspec.to_builtins(outcome.record))
    if outcome.status != "ok":
        data.update(reason=outcome.reason, error_class=outcome.error_class, message=outcome.message)
    return data


def cmd_extract(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    labeller = build_labeller(args.labeller)
    if args.jsonl:
        return _extract_jsonl(args, labeller, settings)
    if not args.file:
        raise SystemExit("extract needs FILE, '-' or --jsonl IN")
    raw = RawPage(url=args.url or args.file, html=_read_input(args.file), charset=args.charset)
    outcome = extract_pages([raw], labeller, settings)[0]
    if args.format == "json":
        print(json.dumps(_outcome_json(outcome), ensure_ascii=False))
    elif outcome.record is not None:
        print(outcome.record.markdown)
    if outcome.status == "error":
        print(f"error: {outcome.error_class}: {outcome.message}", file=sys.stderr)
        return 2
    if outcome.status == "fallback":
        print(f"note: fallback extractor used ({outcome.reason})", file=sys.stderr)
    return 0


def _extract_jsonl(args: argparse.Namespace, labeller: Labeller, settings: PipelineSettings) -> int:
    from tqdm import tqdm

    counts: dict[str, int] = {}
    rows = list(read_dataset(args.jsonl))
    with ExitStack() as stack:
        out = stack.enter_context(open(args.out, "w", encoding="utf-8")) if args.out else sys.stdout
        bar = stack.enter_context(
            tqdm(total=len(rows), unit="page", file=sys.stderr, disable=args.quiet or None)
        )
        for start in range(0, len(rows), JSONL_BATCH):
            batch = rows[start : start + JSONL_BATCH]
            raws = [
                RawPage(
                    url=row.get("url") or str(row.get("id")),
                    html=str(row.get("html") or "").encode("utf-8"),
                    charset="utf-8",
                )
                for row in batch
            ]
            for row, outcome in zip(batch, extract_pages(raws, labeller, settings), strict=True):
                counts[outcome.status] = counts.get(outcome.status, 0) + 1
                line = _outcome_json(outcome)
                if outcome.record is not None:
                    line["page_id"] = outcome.record.id
                line.update(id=row.get("id"), url=row.get("url"))
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
            bar.update(len(batch))
    print(
        " ".join(f"{status}={count}" for status, count in sorted(counts.items())), file=sys.stderr
    )
    return 0


def cmd_simplify(args: argparse.Namespace) -> int:
    data = _read_input(args.file)
    text = decode_html(data, args.charset)
    try:
        check_html(data, text)
        document = simplify(text)
    except PageError as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    counter = load_token_counter(args.tokenizer)
    print(document.simplified_html)
    print(
        f"\nblocks: {document.block_count}  tokens: "
        f"{counter.count(document.simplified_html)} ({counter.name})  "
        f"raw tokens: {counter.count(text)}",
        file=sys.stderr,
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    settings = build_settings(args)
    labeller = build_labeller(args.labeller)
    rows = list(read_dataset(args.dataset))
    with tqdm(total=len(rows), unit="page", file=sys.stderr, disable=args.quiet or None) as bar:
        report = evaluate(rows, labeller, settings, progress=bar.update)
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False, indent=1))
    else:
        _print_report(report)
    return 0


def _print_report(report: EvalReport) -> None:
    print(f"{'id':40s} {'subset':10s} {'f1':>6s} {'prec':>6s} {'recall':>6s}  extractor")
    for page in report.pages:
        print(
            f"{page.id[:40]:40s} {page.subset or '-':10s} {page.f1:6.3f} "
            f"{page.precision:6.3f} {page.recall:6.3f}  {page.extractor}"
        )
    summary = report.to_json()
    print(
        f"\nlabeller {report.labeller}: {len(report.pages)} pages, mean ROUGE-5 F1 "
        f"{summary['mean_f1']:.4f} (precision {summary['mean_precision']:.4f}, "
        f"recall {summary['mean_recall']:.4f})"
    )
    subsets = report.by_subset()
    if len(subsets) > 1:
        for subset, mean in subsets.items():
            print(f"  subset {subset}: mean F1 {mean:.4f}")


# -- stream commands -------------------------------------------------------------------


def _stream_settings(args: argparse.Namespace) -> StreamSettings:
    overrides: dict[str, object] = {}
    if getattr(args, "stages", None):
        overrides["stages"] = tuple(part for part in args.stages.split(",") if part)
    if getattr(args, "labeller", None):
        overrides["labeller"] = args.labeller
    try:
        return StreamSettings.from_env(**overrides)
    except SettingsError as error:
        raise SystemExit(f"error: {error}") from None


def cmd_worker(args: argparse.Namespace) -> int:
    from streams.worker import run_worker

    if args.profile:  # the vLLM labeller reads its settings from DRIPSTREAM_VLLM_*
        os.environ["DRIPSTREAM_VLLM_PROFILE"] = args.profile
    run_worker(_stream_settings(args))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from streams.kafka import create_topics, describe_topics

    settings = _stream_settings(args)
    if args.action == "create":
        for name, outcome in asyncio.run(create_topics(settings)).items():
            print(f"{name}: {outcome}")
    else:
        for topic in asyncio.run(describe_topics(settings)):
            print(json.dumps(topic))
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    from streams.tools import iter_pages, produce_pages

    settings = _stream_settings(args)
    pages = [page for source in args.sources for page in iter_pages(source)]
    keys = asyncio.run(produce_pages(settings, pages, progress=not args.quiet))
    print(f"produced {len(keys)} pages to {settings.topic_prefix}pages", file=sys.stderr)
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from streams.tools import read_topics

    settings = _stream_settings(args)
    messages = asyncio.run(read_topics(settings, [args.topic], idle_s=args.idle))
    for message in messages[-args.last :] if args.last else messages:
        value = (
            message.value.decode("utf-8", "replace")
            if message.topic == "records"
            else (f"<{len(message.value)} bytes>")
        )
        key = (message.key or b"").decode("utf-8", "replace")
        print(f"{message.partition}:{message.offset} key={key} {value}")
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    from streams.tools import describe_dead_letter, read_topics, replay_dead_letters

    settings = _stream_settings(args)
    if args.action == "list":
        for message in asyncio.run(read_topics(settings, ["deadletters"], idle_s=args.idle)):
            print(json.dumps(describe_dead_letter(message), ensure_ascii=False))
        return 0
    offsets = set(args.offset) if args.offset else None
    sent = asyncio.run(replay_dead_letters(settings, offsets))
    print(f"replayed {sent} dead letters", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from streams.demo import run_demo

    return run_demo(_stream_settings(args), args.sources or [str(SAMPLES)], args.deadline)


def cmd_soak(args: argparse.Namespace) -> int:
    from streams.soak import run_soak

    ledger = run_soak(
        _stream_settings(args),
        args.pages,
        args.rate,
        args.kill_every,
        args.broker_pause,
        seed=args.seed,
    )
    print(json.dumps(ledger, indent=1))
    return 0 if ledger["lost"] == 0 else 1


def cmd_broker(args: argparse.Namespace) -> int:
    from streams.demo import broker

    return broker(args.action)


def cmd_config(args: argparse.Namespace) -> int:
    for name, value in _stream_settings(args).describe():
        print(f"{name}={value}")
    return 0


def _add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--labeller", default="heuristic", choices=sorted(LABELLERS))
    parser.add_argument("--tokenizer", help="path to a tokenizer.json (or its folder)")
    parser.add_argument(
        "--context-tokens",
        type=int,
        default=32768,
        help="labeller context; larger pages go to fallback (default 32768)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dripstream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    extract = commands.add_parser("extract", help="HTML in, Markdown out (offline)")
    extract.add_argument("file", nargs="?", help="HTML file, or - for standard input")
    extract.add_argument("--url", help="the page's URL (resolves links; default: FILE)")
    extract.add_argument("--charset", help="charset of the input, if known")
    extract.add_argument("--format", choices=("md", "json"), default="md")
    extract.add_argument("--jsonl", help="batch mode: JSONL of {id,url,html} lines")
    extract.add_argument("--out", help="batch mode output (default: standard output)")
    _add_pipeline_options(extract)
    extract.set_defaults(run=cmd_extract)

    simple = commands.add_parser("simplify", help="show the simplified sequence and counts")
    simple.add_argument("file", help="HTML file, or - for standard input")
    simple.add_argument("--charset")
    simple.add_argument("--tokenizer")
    simple.set_defaults(run=cmd_simplify)

    evaluation = commands.add_parser("eval", help="ROUGE-5 F1 against gold on a JSONL dataset")
    evaluation.add_argument("dataset")
    evaluation.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_pipeline_options(evaluation)
    evaluation.set_defaults(run=cmd_eval)

    worker = commands.add_parser("worker", help="run stream stages (until SIGTERM)")
    worker.add_argument("--stages", help="comma-separated: simplify,label,reconstruct,fallback")
    worker.add_argument("--labeller", choices=("heuristic", "vllm"))
    worker.add_argument("--profile", help="vLLM model profile: a shipped name or a .toml path")
    worker.set_defaults(run=cmd_worker)

    topics = commands.add_parser("topics", help="create or describe the pipeline topics")
    topics.add_argument("action", choices=("create", "describe"))
    topics.set_defaults(run=cmd_topics)

    produce = commands.add_parser("produce", help="feed pages to the pages topic")
    produce.add_argument("sources", nargs="+", help="HTML files, folders, JSONL or WARC files")
    produce.add_argument("--quiet", action="store_true")
    produce.set_defaults(run=cmd_produce)

    tail = commands.add_parser("tail", help="print the messages of a topic")
    tail.add_argument(
        "topic", choices=("pages", "simplified", "labelled", "records", "fallback", "deadletters")
    )
    tail.add_argument("--last", type=int, default=0, help="only the last N messages")
    tail.add_argument("--idle", type=float, default=2.0, help="stop after N idle seconds")
    tail.set_defaults(run=cmd_tail)

    dlq = commands.add_parser("dlq", help="inspect or replay dead letters")
    dlq.add_argument("action", choices=("list", "replay"))
    dlq.add_argument("--offset", type=int, action="append", help="replay only these offsets")
    dlq.add_argument("--idle", type=float, default=2.0)
    dlq.set_defaults(run=cmd_dlq)

    demo = commands.add_parser("demo", help="run the whole stream locally and print a ledger")
    demo.add_argument("sources", nargs="*", help="pages to feed (default: samples/)")
    demo.add_argument("--deadline", type=float, default=180.0)
    demo.add_argument("--labeller", choices=("heuristic", "vllm"))
    demo.set_defaults(run=cmd_demo)

    soak = commands.add_parser("soak", help="run the pipeline under a crawl with faults")
    soak.add_argument("--pages", type=int, default=2000)
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
    soak.add_argument("--seed", type=int, default=7)
    soak.set_defaults(run=cmd_soak)

    broker = commands.add_parser("broker", help="the local Apache Kafka broker")
    broker.add_argument("action", choices=("up", "down", "status", "logs"))
    broker.set_defaults(run=cmd_broker)

    config = commands.add_parser("config", help="print the stream settings in force")
    config.set_defaults(run=cmd_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
