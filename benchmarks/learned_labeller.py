"""Benchmarks of the learned labeller (BENCHMARKS.md, "Learned CPU labeller").

    .venv/bin/python benchmarks/learned_labeller.py labels  [--data DIR]   # derivation check
    .venv/bin/python benchmarks/learned_labeller.py cv      [--data DIR] [--train MODEL]
                                                  [--seed N [N ...]]
    .venv/bin/python benchmarks/learned_labeller.py types   [--data DIR] [--seed N [N ...]]
    .venv/bin/python benchmarks/learned_labeller.py thresholds [--data DIR] [--seed N [N ...]]
    .venv/bin/python benchmarks/learned_labeller.py distant [--model FILE]
    .venv/bin/python benchmarks/learned_labeller.py speed   [--data DIR] [--repeat N]
                                                  [--file NAME --every N]
    .venv/bin/python benchmarks/learned_labeller.py stages  [--data DIR] [--repeat N]

* ``labels``: agreement of the gold-derived block labels with WebMainBench's cc-select
  marks, and the ROUGE-5 / word F1 of the Markdown the derived labels reconstruct on every
  dev file (the ceiling a block classifier can reach on this segmentation);
* ``cv``: grouped cross-validation (wcxb_dev: 5 folds by domain; news files: leave-one-
  file-out), the learned labeller through the whole pipeline beside trafilatura and
  rs-trafilatura on the same pages; with ``--train`` it then trains on everything and
  writes the model file with the calibration fitted on the out-of-fold pages;
* ``types``: each wcxb_dev page type left out of training whole (with the sites of its
  pages), the model trained on the rest (news files included) scored on it: a harder shift
  than new sites, to check that a change generalises beyond the page types it was seen on;
* ``thresholds``: the grouped CV's out-of-fold scores (learned labeller only) at each of
  ``THRESHOLDS``, the same fold models scored at every one, per page type and news file;
* ``distant``: word F1 of a model (default: the shipped one) on the distant documentation
  pages, 607 pages of 12 sites that the shipped model never trained on, their gold the
  main region their own markup declares (``processors.training.distant``): per page and
  per site;
* ``speed``: the whole CPU path (decode, simplify, token count, learned labels,
  reconstruction or fallback, the second opinion) on one pinned core over articles_dev
  (or every ``--every``-th page of ``--file``), the same path without the second opinion
  and trafilatura on the same pages, all in the same run (page by page, their order
  rotated from one page to the next), and the median of the repeats;
* ``stages``: where the time of that path (without the second opinion) goes, each step
  timed alone over the same pages on one pinned core: ms a page (the last of ``--repeat``
  passes; the pipeline's own bookkeeping is the rest of ``speed``'s time).

Raw JSON goes to ``--out`` (default ``out/learned``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

from dripstream.processors.errors import PageError
from dripstream.processors.extract.reconstruct import reconstruct
from dripstream.processors.label.learned import LearnedModel
from dripstream.processors.training.distant import load_distant_rows
from dripstream.processors.training.labels import agreement_with_marks, derive_page
from dripstream.processors.training.scoring import score_page
from dripstream.processors.training.train import (
    DISTANT,
    TRAIN_FILES,
    CVReport,
    cross_validate,
    cv_splits,
    evaluate_learned,
    file_key,
    fit_model,
    fit_second_opinion,
    held_out_training,
    load_pages,
    load_rows,
    prepare_pages,
    train,
    with_second_opinion,
)
from dripstream.processors.training.wordf1 import word_score

ALL_FILES = ("webmainbench_sample.jsonl", *TRAIN_FILES)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def labels_check(data: Path, out: Path) -> dict:
    result: dict = {}
    marks = agreement_with_marks(load_rows(data / "webmainbench_sample.jsonl"))
    result["agreement"] = {
        "pages": marks.pages,
        "blocks": marks.blocks,
        "accuracy": marks.accuracy,
        "main_precision": marks.main_precision,
        "main_recall": marks.main_recall,
        "per_page": marks.per_page,
    }
    print(
        f"cc-select agreement: {marks.pages} pages, {marks.blocks} blocks, accuracy "
        f"{marks.accuracy:.4f}, main precision {marks.main_precision:.4f}, "
        f"recall {marks.main_recall:.4f}"
    )
    for name in ALL_FILES:
        groups: dict[str, dict[str, list[float]]] = {}
        for row in load_rows(data / name):
            markdown = ""
            try:
                record = derive_page(row)
                if record is not None:
                    markdown = reconstruct(
                        record["mapping_blocks"], record["labels"], record["url"]
                    ).markdown
            except PageError:
                pass
            gold = row.get("gold_markdown_or_text") or ""
            meta = row.get("meta") or {}
            kind = meta.get("page_type") or meta.get("subset") or "all"
            words = word_score(markdown, gold)
            for key in {kind, "all"}:
                group = groups.setdefault(key, {"rouge5": [], "word_f1": []})
                group["rouge5"].append(score_page(markdown, gold).f1)
                group["word_f1"].append(words.f1)
        summary = {
            kind: {metric: statistics.fmean(v) for metric, v in values.items()}
            | {"pages": len(values["rouge5"])}
            for kind, values in groups.items()
        }
        result[file_key(name)] = summary
        print(
            f"ceiling {file_key(name):20s} "
            + "  ".join(
                f"{kind}: R5 {s['rouge5']:.4f} wF1 {s['word_f1']:.4f} ({s['pages']})"
                for kind, s in sorted(summary.items())
            )
        )
    (out / "labels.json").write_text(json.dumps(result, indent=1))
    return result


def cv_run(
    data: Path, out: Path, seeds: list[int], model: str | None, distant: bool = False
) -> dict:
    """The grouped CV under each of ``seeds`` (pages prepared once; ``cv.json`` the first
    seed's, ``cv-seed{N}.json`` each); with several, the mean and the minimum over the
    seeds too (``cv-seeds.json``). ``model``: then train on every page with the first."""
    started = time.perf_counter()
    pages = load_pages(data, distant=distant)
    _log(f"prepared {len(pages)} pages in {time.perf_counter() - started:.0f} s")
    runs: list[dict] = []
    first: CVReport | None = None  # the first seed's report: what --train calibrates on
    for seed in seeds:
        report = cross_validate(data, seed=seed, pages=pages, cache_dir=out, log=_log)
        rule, rule_check = fit_second_opinion(report.results, seed)
        report.results.extend(with_second_opinion(report.results, rule))
        print(f"second opinion {rule}; fitted on half the sites, gain on the other half:")
        print(f"  {rule_check}")
        result = report.to_json()
        result["second_opinion"] = rule_check
        print(f"grouped CV, seed {seed}, {report.seconds:.0f} s; pages {result['pages']}")
        print(f"routes {result['routes']}")
        _print_table(result)
        (out / f"cv-seed{seed}.json").write_text(json.dumps(result))
        if first is None:
            first = report
            (out / "cv.json").write_text(json.dumps(result))
        runs.append(result)
    if len(runs) > 1:
        summary = _over_seeds(runs)
        print(f"over seeds {seeds}: mean (min)")
        _print_table(summary)
        (out / "cv-seeds.json").write_text(json.dumps(summary))
    result = runs[0]
    if model:
        trained = train(data, model, seed=seeds[0], cv=first, pages=pages)
        print(
            f"trained {trained.model_path}: {trained.pages} pages, {trained.blocks} blocks, "
            f"main share {trained.main_share:.3f}, {trained.seconds:.0f} s, "
            f"{trained.model_bytes / 2**20:.2f} MiB; calibration on held-out sites "
            f"{trained.calibration_quality}"
        )
        result["train"] = trained.__dict__
        (out / "cv.json").write_text(json.dumps(result))
    return result


_TABLES = ("word_f1", "with_found", "without_leaked", "rouge5")


def _over_seeds(runs: list[dict]) -> dict:
    """Per table cell, the mean over ``runs`` and (``<table>_min``) the minimum."""
    summary: dict = {"seeds": [run["seed"] for run in runs]}
    for table in _TABLES:
        mean: dict = {}
        low: dict = {}
        for file, kinds in runs[0][table].items():
            for kind, extractors in kinds.items():
                for extractor in extractors:
                    values = [run[table][file][kind][extractor] for run in runs]
                    mean.setdefault(file, {}).setdefault(kind, {})[extractor] = statistics.fmean(
                        values
                    )
                    low.setdefault(file, {}).setdefault(kind, {})[extractor] = min(values)
        summary[table], summary[f"{table}_min"] = mean, low
    return summary


def _print_table(result: dict) -> None:
    """One line per file and page type: each extractor's word F1 (with the minimum over
    seeds in brackets where ``result`` has one), snippet rates and ROUGE-5."""
    word, rouge = result["word_f1"], result["rouge5"]
    with_found, leaked = result["with_found"], result["without_leaked"]
    word_min, rouge_min = result.get("word_f1_min"), result.get("rouge5_min")
    for file, kinds in word.items():
        for kind, extractors in kinds.items():
            cells = []
            for extractor, value in extractors.items():
                cell = f"{extractor} wF1 {value:.4f}"
                if word_min is not None:
                    cell += f" ({word_min[file][kind][extractor]:.4f})"
                w = with_found.get(file, {}).get(kind, {}).get(extractor)
                o = leaked.get(file, {}).get(kind, {}).get(extractor)
                r = rouge.get(file, {}).get(kind, {}).get(extractor)
                if w is not None:
                    cell += f" with {w:.3f} without {o:.3f}"
                if r is not None:
                    cell += f" R5 {r:.4f}"
                    if rouge_min is not None:
                        cell += f" ({rouge_min[file][kind][extractor]:.4f})"
                cells.append(cell)
            print(f"{file:15s} {kind:14s} " + " | ".join(cells))


def speed_run(data: Path, out: Path, repeat: int, model: str | None, file: str, every: int) -> dict:
    """The path with the second opinion (the default), without it, and trafilatura, on the
    same pages (every ``every``-th page of ``file``) in the same run."""
    from dripstream.processors.extract.fallback import fallback_markdown
    from dripstream.processors.extract.tokens import TokenBudget
    from dripstream.processors.ingest.sources import raw_page_from_row
    from dripstream.processors.label.learned import LearnedLabeller
    from dripstream.processors.native import compiled_modules
    from dripstream.processors.pipeline import PipelineSettings, extract_pages

    os.sched_setaffinity(0, {0})
    rows = load_rows(data / file)[::every]
    raws = [raw_page_from_row(row) for row in rows]
    with_second = LearnedLabeller(model)
    without = LearnedLabeller(model, second_opinion=False)
    settings = PipelineSettings(budget=TokenBudget(context_tokens=10**9))
    extract_pages(raws[:2], with_second, settings)  # warm-up (imports, caches)
    fallback_markdown(rows[0]["html"], rows[0]["url"])

    def trafilatura(raw, row) -> None:
        with contextlib.suppress(PageError):
            fallback_markdown(raw.html.decode("utf-8"), row["url"])

    steps = {
        "learned": lambda raw, row: extract_pages([raw], with_second, settings),
        "learned_alone": lambda raw, row: extract_pages([raw], without, settings),
        "trafilatura": trafilatura,
    }
    compiled = compiled_modules()
    print(f"compiled modules (setup.py): {compiled}")
    result: dict = {
        "file": file,
        "pages": len(raws),
        "repeat": repeat,
        "compiled": compiled,
        "runs": [],
    }
    names = list(steps)
    for repeat_index in range(repeat):
        # Page by page, the three paths one after another, their order rotated from one
        # page to the next: a drift of the machine's speed (seconds long on a shared VM)
        # then falls on all three alike, and each path as often first on a page as last.
        seconds = dict.fromkeys(steps, 0.0)
        routes: dict[str, int] = {}
        for index, (raw, row) in enumerate(zip(raws, rows, strict=True)):
            shift = (index + repeat_index) % len(names)
            for name in names[shift:] + names[:shift]:
                t0 = time.perf_counter()
                outcome = steps[name](raw, row)
                seconds[name] += time.perf_counter() - t0
                if name != "learned":
                    continue
                record = outcome[0].record
                key = record.extractor if record else "error"
                if record and record.timings_ms.get("second_opinion") is not None:
                    key += " (second opinion kept it)"
                routes[key] = routes.get(key, 0) + 1
        run = {name: len(raws) / value for name, value in seconds.items()}
        result["runs"].append(run | {"routes": routes})
        ours, ours_alone, theirs = run["learned"], run["learned_alone"], run["trafilatura"]
        print(
            f"whole CPU path, learned labeller: {ours:.1f} pages/s with the second opinion "
            f"(routes {routes}), {ours_alone:.1f} without; trafilatura {theirs:.1f} pages/s; "
            f"ratios {ours / theirs:.2f}x / {ours_alone / theirs:.2f}x"
        )
    for key in ("learned", "learned_alone", "trafilatura"):
        result[f"median_{key}"] = statistics.median(run[key] for run in result["runs"])
    for key in ("learned", "learned_alone"):  # the ratio within each run, then the median
        ratios = [run[key] / run["trafilatura"] for run in result["runs"]]
        result[f"median_ratio_{key}"] = statistics.median(ratios)
    print(
        f"median of {repeat}: learned {result['median_learned']:.1f} pages/s (without the "
        f"second opinion {result['median_learned_alone']:.1f}), trafilatura "
        f"{result['median_trafilatura']:.1f} pages/s; median ratio in a run "
        f"{result['median_ratio_learned']:.2f}x / {result['median_ratio_learned_alone']:.2f}x"
    )
    (out / f"speed-{file_key(file)}.json").write_text(json.dumps(result, indent=1))
    return result


def stages_run(data: Path, out: Path, repeat: int, model: str | None) -> dict[str, float]:
    from selectolax.lexbor import LexborHTMLParser

    from dripstream.processors.extract.language import detect_language
    from dripstream.processors.extract.simplify import check_markup, simplify
    from dripstream.processors.ingest.sources import raw_page_from_row
    from dripstream.processors.label.features import block_features
    from dripstream.processors.pipeline import PipelineSettings, decoded_page_utf8
    from dripstream.topics.records import MAIN, OTHER, page_id

    os.sched_setaffinity(0, {0})
    raws = [raw_page_from_row(row) for row in load_rows(data / "articles_dev.jsonl")]
    learned = LearnedModel.load(model)
    limit = PipelineSettings().simplify.max_input_chars
    ms: dict[str, float] = {}

    def timed(step: str, work, items: list) -> list:
        t0 = time.perf_counter()
        results = [work(item) for item in items]
        ms[step] = round((time.perf_counter() - t0) * 1000 / len(items), 3)
        return results

    for _ in range(repeat):
        # As the pipeline does: the page's UTF-8 bytes, when it has them, are counted and
        # parsed instead of the text.
        pages = timed("decode", lambda raw: decoded_page_utf8(raw, limit), raws)
        timed("page id", lambda raw: page_id(raw.url, raw.html), raws)
        timed("pre-parse check (in simplify)", lambda p: check_markup(p.text, None, p.utf8), pages)
        timed("HTML parse (in simplify)", lambda p: LexborHTMLParser(p.utf8 or p.text), pages)
        documents = timed("simplify, all of it", lambda p: simplify(p.text, None, p.utf8), pages)
        features = timed(
            "features",
            lambda d: block_features(d.simplified_html, d.mapping_blocks, d.title, d.hints),
            documents,
        )
        probabilities = timed("prediction, every pass", learned.predict, features)
        pages = [
            (d.mapping_blocks, [MAIN if q >= learned.threshold else OTHER for q in p], raw.url)
            for d, p, raw in zip(documents, probabilities, raws, strict=True)
        ]
        markdowns = timed("reconstruction", lambda page: reconstruct(*page).markdown, pages)
        timed("language", detect_language, markdowns)
    print(json.dumps(ms))
    (out / "stages.json").write_text(json.dumps(ms, indent=1))
    return ms


def types_run(data: Path, out: Path, seeds: list[int]) -> dict:
    """Word F1 of each wcxb_dev page type under a model that never saw the type, nor a site
    of its pages, per seed; the mean and the worst over the seeds (``types.json``)."""
    pages = load_pages(data)
    kinds = sorted({page.page_type for page in pages if page.file == "wcxb_dev"})
    scores: dict[str, list[float]] = {kind: [] for kind in kinds}
    for seed in seeds:
        for kind in kinds:
            test = [p for p in pages if p.file == "wcxb_dev" and p.page_type == kind]
            training = [
                p
                for p in held_out_training(pages, test)
                if not (p.file == "wcxb_dev" and p.page_type == kind)
            ]
            results = evaluate_learned(test, fit_model(training, seed), rouge=False)
            scores[kind].append(statistics.mean(result.word_f1 for result in results))
            _log(f"seed {seed} {kind}: {scores[kind][-1]:.4f} ({len(training)} pages trained on)")
    summary = {
        kind: {"mean": statistics.mean(v), "worst": min(v), "seeds": v}
        for kind, v in scores.items()
    }
    for kind, row in summary.items():
        print(f"{kind:14s} word F1 {row['mean']:.4f} ({row['worst']:.4f})")
    type_mean = statistics.mean(row["mean"] for row in summary.values())
    print(f"mean over types {type_mean:.4f}")
    result = {"seeds": seeds, "types": summary, "mean_over_types": type_mean}
    (out / "types.json").write_text(json.dumps(result, indent=1))
    return result


THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6)


def thresholds_run(data: Path, out: Path, seeds: list[int]) -> dict:
    """Mean and worst seed of each group's out-of-fold score at each of ``THRESHOLDS``
    (``thresholds.json``): what the decision threshold trades between groups."""
    pages = load_pages(data)
    scores: dict[float, dict[str, list[float]]] = {t: {} for t in THRESHOLDS}
    for seed in seeds:
        per: dict[float, dict[str, list[float]]] = {t: {} for t in THRESHOLDS}
        for name, test, training in cv_splits(pages, seed=seed):
            model = fit_model(training, seed)
            rouge = not name.startswith("wcxb")
            for threshold in THRESHOLDS:
                model.threshold = threshold
                for page, result in zip(test, evaluate_learned(test, model, rouge), strict=True):
                    group = page.file if rouge else page.page_type
                    score = result.rouge5 if rouge else result.word_f1
                    keys = (group,) if rouge else (group, "all")
                    for key in keys:
                        per[threshold].setdefault(key, []).append(score)
            _log(f"seed {seed} {name} scored")
        for threshold, groups in per.items():
            for group, values in groups.items():
                scores[threshold].setdefault(group, []).append(statistics.mean(values))
    groups = sorted(scores[THRESHOLDS[0]])
    print("group".ljust(16) + "".join(f"{t:>16}" for t in THRESHOLDS))
    for group in groups:
        cells = (
            f"{statistics.mean(v):.4f} ({min(v):.4f})"
            for v in (scores[t][group] for t in THRESHOLDS)
        )
        print(group.ljust(16) + "".join(cell.rjust(16) for cell in cells))
    result = {"seeds": seeds, "scores": {str(t): v for t, v in scores.items()}}
    (out / "thresholds.json").write_text(json.dumps(result, indent=1))
    return result


def distant_run(out: Path, model: str | None) -> dict:
    """The learned labeller's word F1 on the distant documentation pages, per site."""
    pages = prepare_pages(load_distant_rows(), DISTANT)
    results = evaluate_learned(pages, LearnedModel.load(model), rouge=False)
    sites: dict[str, list[float]] = {}
    for page, result in zip(pages, results, strict=True):
        sites.setdefault(page.group, []).append(result.word_f1)
    per_site = {site: statistics.mean(scores) for site, scores in sorted(sites.items())}
    result = {
        "model": model or "shipped",
        "pages": len(pages),
        "page_mean": statistics.mean(result.word_f1 for result in results),
        "site_mean": statistics.mean(per_site.values()),
        "sites": per_site,
    }
    print(json.dumps(result, indent=1))
    (out / "distant.json").write_text(json.dumps(result, indent=1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what", choices=("labels", "cv", "types", "thresholds", "distant", "speed", "stages")
    )
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--out", default="out/learned")
    parser.add_argument(
        "--seed", type=int, nargs="+", default=[0], help="cv, types, thresholds: seeds"
    )
    parser.add_argument("--train", metavar="MODEL", help="cv: then train and write MODEL")
    parser.add_argument(
        "--distant", action="store_true", help="cv: also train on the distant documentation pages"
    )
    parser.add_argument("--model", help="speed, distant: model file (default: the shipped one)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--file", default="articles_dev.jsonl", help="speed: the pages")
    parser.add_argument("--every", type=int, default=1, help="speed: every N-th page of --file")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data)
    if args.what == "labels":
        labels_check(data, out)
    elif args.what == "cv":
        cv_run(data, out, args.seed, args.train, args.distant)
    elif args.what == "types":
        types_run(data, out, args.seed)
    elif args.what == "thresholds":
        thresholds_run(data, out, args.seed)
    elif args.what == "distant":
        distant_run(out, args.model)
    elif args.what == "speed":
        speed_run(data, out, args.repeat, args.model, args.file, args.every)
    else:
        stages_run(data, out, args.repeat, args.model)


if __name__ == "__main__":
    main()
