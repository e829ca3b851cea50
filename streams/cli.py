"""The ``dripstream`` command line."""

from __future__ import annotations

import argparse
import json
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
from topics.records import RawPage

LABELLERS = {
    "heuristic": HeuristicLabeller,
    "oracle": OracleLabeller,
    "fallback": FallbackOnlyLabeller,
}
JSONL_BATCH = 32


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
