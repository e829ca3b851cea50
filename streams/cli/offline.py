"""Offline commands: ``extract``, ``simplify`` and ``eval`` (no Kafka)."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dripstream.processors.errors import PageError
from dripstream.processors.extract.fallback import warm_up_extractor
from dripstream.processors.extract.sandbox import InProcess, PageRunner, Sandbox
from dripstream.processors.extract.simplify import simplify
from dripstream.processors.ingest.decode import check_html, decode_html
from dripstream.processors.ingest.sources import (
    HTML_SUFFIXES,
    JSONL_SUFFIXES,
    WARC_SUFFIXES,
    InputPage,
    jsonl_pages,
    open_lines,
    read_pages,
    read_rows,
    skipped_summary,
)
from dripstream.processors.label.base import Labeller
from dripstream.processors.label.templates import TemplateCache
from dripstream.processors.pipeline import (
    Outcome,
    PipelineSettings,
    extract_pages,
    page_error,
    warm_up_page_work,
)
from dripstream.processors.sinks import open_sink
from dripstream.processors.sinks.jsonl import RecordsJsonlSink
from dripstream.processors.training.template_audit import AuditedCascade
from dripstream.streams.cli.common import (
    EXIT_INPUT,
    UsageError,
    add_command,
    add_pipeline_options,
    add_profile_options,
    labeller_from_args,
    pipeline_from_args,
    stream_settings,
)

if TYPE_CHECKING:
    from dripstream.processors.training.evaluation import EvalReport

BATCH = 32


def _runner(args: argparse.Namespace, settings: PipelineSettings, batch: bool = True) -> PageRunner:
    """In this process (``--no-sandbox``), else in a sandbox with the settings' limits
    (DRIPSTREAM_PAGE_TIMEOUT_S, DRIPSTREAM_PAGE_MEMORY_MIB). Its zygote is warmed for a
    ``batch``, whose children it forks again and again: the language model and the URL
    canonicalizer first, the fallback extractor and its first-use state before its second
    child (a batch that one child serves imports it only if a page falls back); one
    document needs one child."""
    if args.no_sandbox:
        return InProcess(settings)
    if not batch:
        return Sandbox(settings, stream_settings(args).limits())
    return Sandbox(settings, stream_settings(args).limits(), warm_up_page_work, warm_up_extractor)


def _single_document(args: argparse.Namespace) -> bool:
    """One HTML document to standard output (Markdown), rather than a batch of records."""
    if args.out or args.jsonl or len(args.sources) != 1:
        return False
    source = args.sources[0]
    return source == "-" or not (
        Path(source).is_dir() or source.endswith((*JSONL_SUFFIXES, *WARC_SUFFIXES))
    )


def _labeller(args: argparse.Namespace) -> Labeller:
    labeller = labeller_from_args(args)
    if getattr(args, "template_cache", False):
        cache = TemplateCache(stream_settings(args).template_settings())
        return AuditedCascade(labeller, cache, audit=args.command == "eval")
    return labeller


def cmd_extract(args: argparse.Namespace) -> int:
    if not args.sources and not args.jsonl:
        args.sources = ["-"]
    _check_sources(args.sources)
    settings = pipeline_from_args(args)
    labeller = _labeller(args)
    one = _single_document(args)
    with _runner(args, settings, batch=not one) as runner:
        if one:
            return _extract_one(args, labeller, settings, runner)
        return _extract_batch(args, labeller, settings, runner)


def _check_sources(sources: list[str]) -> None:
    """Refuse, before any work, a folder without pages: a batch of nothing is a mistake."""
    for source in sources:
        path = Path(source)
        if (
            source != "-"
            and path.is_dir()
            and not any(
                child.suffix.lower() in HTML_SUFFIXES and child.is_file()
                for child in path.rglob("*")
            )
        ):
            raise UsageError(f"{source}: a folder without HTML files ({', '.join(HTML_SUFFIXES)})")


def _jsonl_pages(source: str) -> Iterator[InputPage]:
    """``--jsonl``: JSON lines whatever the name, ``-`` for standard input."""
    if source != "-" and Path(source).is_dir():
        raise UsageError(f"--jsonl {source}: a folder, not a JSONL file")
    if source == "-":
        yield from jsonl_pages(sys.stdin.buffer, "stdin")
        return
    with open_lines(Path(source)) as lines:
        yield from jsonl_pages(lines, source)


def _extract_one(args, labeller, settings, runner) -> int:
    [page] = read_pages(args.sources[0], url=args.url, charset=args.charset)
    [outcome] = extract_pages([page.raw], labeller, settings, runner)
    if args.format == "json":
        RecordsJsonlSink("-").write(outcome)
    elif outcome.record is not None:
        print(outcome.record.markdown)
    if outcome.status == "error":
        print(f"error: {outcome.error_class}: {outcome.message}", file=sys.stderr)
        return EXIT_INPUT
    if outcome.status == "fallback":
        print(f"note: fallback extractor used ({outcome.reason})", file=sys.stderr)
    return 0


def _pages(
    sources: list[str], jsonl: str | None = None, skipped: Counter[str] | None = None
) -> Iterator[InputPage]:
    if jsonl:
        yield from _jsonl_pages(jsonl)
    for source in sources:
        yield from read_pages(source, skipped=skipped)


def extract_input_pages(
    pages: list[InputPage], labeller: Labeller, settings: PipelineSettings, runner: PageRunner
) -> list[Outcome]:
    """``extract_pages`` over the pages that were read; a record that could not be read
    as a page (``InputPage.error``) has that error as its outcome."""
    readable = [page.raw for page in pages if page.error is None]
    done = iter(extract_pages(readable, labeller, settings, runner) if readable else [])
    return [page_error(page.error) if page.error else next(done) for page in pages]


def _progress(args: argparse.Namespace, total: int | None = None) -> Any:
    """A progress bar on standard error (off with --quiet or when it is not a terminal),
    without tqdm's monitor thread: the sandbox forks its zygote from a caller that runs
    one thread."""
    if args.quiet:
        return _NoProgress()
    from tqdm import tqdm

    tqdm.monitor_interval = 0
    return tqdm(total=total, unit="page", file=sys.stderr, disable=None)


class _NoProgress:
    """The progress bar of a --quiet run (tqdm is not loaded for it)."""

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing to close."""

    def update(self, pages: int = 1) -> None:
        """Nothing to show."""


def _extract_batch(args, labeller, settings, runner) -> int:
    counts: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    pages = _pages(args.sources, args.jsonl, skipped)
    with ExitStack() as stack:
        sink = open_sink(args.out or "-", stream_settings(args).search)
        stack.callback(sink.close)
        bar = stack.enter_context(_progress(args))
        while batch := list(itertools.islice(pages, BATCH)):
            outcomes = extract_input_pages(batch, labeller, settings, runner)
            for page, outcome in zip(batch, outcomes, strict=True):
                counts[outcome.status] += 1
                sink.write(outcome, page.id)
            bar.update(len(batch))
    print(
        " ".join(f"{status}={count}" for status, count in sorted(counts.items())), file=sys.stderr
    )
    if summary := skipped_summary(skipped):
        print(summary, file=sys.stderr)
    return 0


def cmd_simplify(args: argparse.Namespace) -> int:
    if args.file != "-" and Path(args.file).is_dir():
        raise UsageError(f"{args.file}: a folder; simplify takes one HTML file (or -)")
    settings = pipeline_from_args(args)
    [page] = read_pages(args.file, charset=args.charset)
    data = page.raw.html
    text = decode_html(data, page.raw.charset)
    try:
        check_html(data, text)
        document = simplify(text)
    except PageError as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_INPUT
    counter = settings.token_counter
    print(document.simplified_html)
    print(
        f"\nblocks: {document.block_count}  tokens: "
        f"{counter.count(document.simplified_html)} ({counter.name})  "
        f"raw tokens: {counter.count(text)}",
        file=sys.stderr,
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from dripstream.processors.training.evaluation import evaluate

    settings = pipeline_from_args(args)
    labeller = _labeller(args)
    rows = list(read_rows(args.dataset))
    with (
        _runner(args, settings) as runner,
        _progress(args, len(rows)) as bar,
    ):
        report = evaluate(rows, labeller, settings, progress=bar.update, runner=runner)
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
    summary_words = summary["mean_word_f1"]
    print(f"WCXB word F1 {summary_words:.4f}", end="")
    if summary["with_found"] is not None:
        print(
            f" (with-snippets found {summary['with_found']:.3f}, "
            f"without-snippets leaked {summary['without_leaked'] or 0:.3f})",
            end="",
        )
    print()
    subsets = report.by_subset()
    if len(subsets) > 1:
        for subset, mean in subsets.items():
            print(f"  subset {subset}: mean F1 {mean:.4f}")
    for kind, scores in report.by_page_type().items():
        print(
            f"  {kind:14s} {scores['page_count']:5d} pages  ROUGE-5 {scores['mean_f1']:.4f}  "
            f"word F1 {scores['mean_word_f1']:.4f}"
        )
    if report.templates is not None:
        print(f"templates: {json.dumps(report.templates)}")


def cmd_labels(args: argparse.Namespace) -> int:
    from dripstream.processors.training.labels import derive_labels

    report = derive_labels(read_rows(args.dataset), args.out, source=Path(args.dataset).name)
    print(json.dumps(dataclasses.asdict(report)), file=sys.stderr)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from dripstream.processors.training.train import (
        RULE_BASELINES,
        cross_validate,
        load_pages,
        train,
    )

    pages = load_pages(args.data, distant=args.distant)
    cv = None
    if not args.no_calibration:
        # trafilatura in both modes on every page: the second-opinion rule is fitted on them
        cv = cross_validate(args.data, seed=args.seed, pages=pages, baselines=RULE_BASELINES)
        print(json.dumps(cv.table("word_f1"), indent=1), file=sys.stderr)
    report = train(args.data, args.model, args.seed, cv=cv, pages=pages)
    print(json.dumps(dataclasses.asdict(report), default=str, indent=1))
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    extract = add_command(
        commands,
        "extract",
        "HTML in, Markdown out (offline)",
        "dripstream extract pages.warc.gz -o records.jsonl",
        description="Extract the main content of pages. One HTML file (or standard input) "
        "prints its Markdown; JSONL, WARC, folders or --out write one record per page.",
    )
    extract.add_argument(
        "sources",
        nargs="*",
        help="HTML files, folders, JSONL (.jsonl[.gz|.xz]) or WARC files; - or none: stdin",
    )
    extract.add_argument("--url", help="the page's URL, to resolve its links (one document)")
    extract.add_argument("--charset", help="the input's charset, if known (one document)")
    extract.add_argument(
        "--format", choices=("md", "json"), default="md", help="one document: Markdown or JSON"
    )
    extract.add_argument(
        "--jsonl",
        metavar="FILE",
        help="JSONL input of {id,url,html} lines, whatever its name; - for standard input",
    )
    extract.add_argument(
        "--template-cache",
        action="store_true",
        help="label in input order with the site-template cache in front of the labeller",
    )
    extract.add_argument(
        "-o",
        "--out",
        help="write records to a sink: PATH or KIND:PATH (records, datatrove, parquet, "
        "opensearch); default stdout",
    )
    add_pipeline_options(extract)
    extract.set_defaults(run=cmd_extract)

    simple = add_command(
        commands,
        "simplify",
        "show the simplified sequence and counts",
        "dripstream simplify page.html --profile mineru-html-qwen3-0.6b",
        description="Print the simplified page the labeller reads, with block and token counts.",
    )
    simple.add_argument("file", help="HTML file, or - for standard input")
    simple.add_argument("--charset", help="the input's charset, if known")
    add_profile_options(simple)
    simple.set_defaults(run=cmd_simplify, quiet=False)

    evaluation = add_command(
        commands,
        "eval",
        "ROUGE-5 F1 against gold on a JSONL dataset",
        "dripstream eval ../shared/data/articles_dev.jsonl --json",
        description="Run the pipeline on every page of a dataset and score it against gold.",
    )
    evaluation.add_argument("dataset", help="JSONL (.jsonl[.gz|.xz]) with html and gold")
    evaluation.add_argument("--json", action="store_true", help="print the report as JSON")
    evaluation.add_argument(
        "--template-cache",
        action="store_true",
        help="put the site-template cache in front of the labeller, in file order; the "
        "report adds its share and its agreement with the labeller on the pages it served",
    )
    add_pipeline_options(evaluation)
    evaluation.set_defaults(run=cmd_eval)

    labels = add_command(
        commands,
        "labels",
        "derive block labels from gold text (training data)",
        "dripstream labels derive ../shared/data/articles_dev.jsonl --out labelled.jsonl",
        description="Simplify each page of a dataset and label each block main or other "
        "by how much of its text the gold contains, in order (the rule: processors/labels.py).",
    )
    labels.add_argument("action", choices=("derive",), help="what to do")
    labels.add_argument("dataset", help="JSONL (.jsonl[.gz|.xz]) with html and gold")
    labels.add_argument("--out", "-o", required=True, help="labelled pages, JSONL")
    labels.set_defaults(run=cmd_labels)

    training = add_command(
        commands,
        "train",
        "train the learned labeller (grouped CV for its calibration, then the model)",
        "dripstream train --data ../shared/data --model model.json",
        description="Train the learned block classifier on the dev files, reproducibly.",
    )
    training.add_argument("--data", default="../shared/data", help="folder of the dev files")
    training.add_argument(
        "--model", default="learned_labeller.json", help="where to write the model file"
    )
    training.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    training.add_argument(
        "--no-calibration",
        action="store_true",
        help="skip the cross-validation that calibrates the confidence (faster)",
    )
    training.add_argument(
        "--distant",
        action="store_true",
        help="also train on the shipped documentation pages labelled by their own markup "
        "(never scored; the shipped model is trained without them)",
    )
    training.set_defaults(run=cmd_train)
