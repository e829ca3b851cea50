"""Training and cross-validation of the learned labeller.

Data: ``files`` of ``data_dir`` (normally ``../shared/data``), by default ``TRAIN_FILES``:
``wcxb_dev.jsonl.xz`` (WCXB, 7 page types), ``articles_dev.jsonl`` and
``publishers_dev.jsonl`` (news pages). ``webmainbench_sample.jsonl`` is *not* trained on:
it checks the label derivation against its human ``cc-select`` marks. With ``distant``,
also the documentation pages labelled by their own markup
(:mod:`dripstream.processors.training.distant`, file key ``DISTANT``): they train and are
never scored. Every page is simplified, its blocks labelled from its gold text
(:mod:`dripstream.processors.training.labels`) and turned into features
(:mod:`dripstream.processors.label.features`).

Groups: a page's group is its site (WCXB ``meta.domain``, otherwise the URL's host without
``www.``). Folds never split a group, and when a file is held out, training pages of the
other files that share a group with it are dropped too, so no score comes from a site the
model saw.

Model: two LightGBM binary classifiers (``PARAMS``: 50 trees in the first pass, 80 in the
context pass, 31 leaves, each split's threshold drawn at random (extremely randomised
trees), learning rate 0.1, row and feature subsampling 0.8, fixed ``seed``,
deterministic, row-wise histograms, 2 threads), tag codes as categorical
features, each block weighted by 1 + log(1 + visible characters), scaled so that every
page's blocks weigh ``PAGE_WEIGHT`` together (the scores are means over pages, so every
page counts alike; within a page, text decides): the first on the block features, the
context booster on those plus the context pass's columns (``features.context_features``)
computed from first-pass probabilities of pages that pass did not train on (``fit_model``:
3 folds by site).
Reproducible: same data, same seed -> the same model file.

``train(data_dir, model_path, seed)`` trains on every page and writes the model file with
its threshold and the confidence calibration fitted on the cross-validation's out-of-fold
pages. ``cross_validate(data_dir, seed)`` reports, for pages the scoring model never saw:
WCXB word F1 (and with / without snippet rates) per page type on ``wcxb_dev`` with 5
folds grouped by domain, and per file (ROUGE-5 too) with each news file held out whole
(leave-one-file-out), plus trafilatura and rs-trafilatura on the same pages, and
trafilatura's fast mode, the second opinion's extractor (``SECOND_OPINION_BASELINE``).
"""

from __future__ import annotations

import json
import lzma
import os
import random
import time
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from dripstream.processors.errors import PageError
from dripstream.processors.extract.tokens import TokenBudget
from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.booster import Booster
from dripstream.processors.label.features import (
    CATEGORICAL,
    FEATURE_NAMES,
    N_FEATURES,
    PageFeatures,
    block_features,
    context_features,
)
from dripstream.processors.label.learned import (
    LearnedLabeller,
    LearnedModel,
    SecondOpinion,
    context_names,
    pass_width,
    raw_confidence,
    stacked_rows,
)
from dripstream.processors.pipeline import PipelineSettings, extract_pages
from dripstream.processors.training.distant import load_distant_rows
from dripstream.processors.training.labels import derive_page
from dripstream.processors.training.scoring import score_page
from dripstream.processors.training.wordf1 import word_score
from dripstream.topics.records import MAIN

# The dev files trained on by default (``files`` of load_pages, cross_validate, train).
TRAIN_FILES = ("wcxb_dev.jsonl.xz", "articles_dev.jsonl", "publishers_dev.jsonl")
DISTANT = "distant_documentation"  # the file key of the pages labelled by their markup
CV_FOLDS = 5
# The second-opinion rule must keep every target group this far ahead of the fallback on
# out-of-fold pages before it may trade a group's lead for another's (fit_second_opinion):
# a margin for fitting the rule on the pages it is then scored on.
MIN_LEAD = 0.002
# The share of pages the second-opinion rule may ask trafilatura about: each costs a run
# of its fast mode (several times the path's own time on a page).
MAX_ASKED = 0.05
# Random halvings of the sites on which fitting the second-opinion rule is checked: fitted
# on one half, scored on the other (fit_second_opinion).
RULE_SPLITS = 10
GOOD_F1 = 0.8  # a page is "good" (confidence target) at WCXB word F1 >= this
PARAMS: dict[str, Any] = {
    "objective": "binary",
    "extra_trees": True,  # each split's threshold drawn at random (docs/labellers-design.md)
    "learning_rate": 0.1,
    "num_leaves": 31,
    "min_data_in_leaf": 40,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "max_bin": 63,
    "max_cat_to_onehot": 8,
    "deterministic": True,
    "force_row_wise": True,
    "num_threads": 2,
    "verbose": -1,
}
# What the blocks of one page weigh together in training: every page alike (about what
# the mean page weighed when blocks were weighted by their text alone).
PAGE_WEIGHT = 500.0
NUM_TREES = 50  # the first pass
CONTEXT_PASSES = 2  # context passes after the first (docs/labellers-design.md)
CONTEXT_TREES = 80  # each context pass
CONTEXT_FOLDS = 3  # folds by site for the earlier passes' probabilities a context pass learns on
THRESHOLD = 0.5
# On a page whose most likely block is main but below THRESHOLD + MARGIN, the blocks within
# MARGIN of it are main too (``LearnedModel.main_blocks``), chosen on the grouped CV's
# out-of-fold probabilities (docs/labellers-design.md).
MARGIN = 0.3
# CPU labellers read no prompt: their budget is a block cap, as in the CLI and the stream.
EVAL_SETTINGS = PipelineSettings(budget=TokenBudget.cpu())


def load_rows(path: str | Path) -> list[dict]:
    """Rows of a JSONL file (``.xz`` compressed or plain)."""
    opener = lzma.open if str(path).endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def file_key(path: str | Path) -> str:
    return Path(path).name.split(".")[0]


def page_group(row: dict) -> str:
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    if meta.get("domain"):
        return str(meta["domain"]).lower()
    host = urlsplit(str(row.get("url") or "")).hostname or str(row.get("id"))
    return host.lower().removeprefix("www.")


def page_type(row: dict) -> str:
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    return str(meta.get("page_type") or "all")


@dataclass
class PageData:
    """One page ready for training / evaluation: its features, and their matrix as a
    numpy array (``X``, a view of the same float32 values)."""

    file: str
    id: str
    group: str
    page_type: str
    row: dict
    page_features: PageFeatures
    y: np.ndarray
    weight: np.ndarray

    @property
    def X(self) -> np.ndarray:
        return matrix_array(self.page_features.matrix, N_FEATURES)


def matrix_array(matrix: array, columns: int) -> np.ndarray:
    """A float32 row-major buffer (``features.PageFeatures.matrix``) as a numpy matrix."""
    return np.frombuffer(matrix, dtype=np.float32).reshape(-1, columns)


def block_weights(X: np.ndarray) -> np.ndarray:
    """Per block of a page's feature matrix, its training weight: 1 + log(1 + visible
    characters), scaled so that the page's blocks weigh ``PAGE_WEIGHT`` together."""
    weight = 1.0 + X[:, FEATURE_NAMES.index("log_text")].astype(np.float64)
    return weight * (PAGE_WEIGHT / weight.sum()) if len(weight) else weight


def prepare_pages(
    rows: Iterable[dict], file: str, progress: Callable[[int], None] | None = None
) -> list[PageData]:
    """Simplify, derive labels and compute features; pages without blocks are kept with
    empty matrices (they still count in evaluation: the pipeline sends them to fallback)."""
    pages = []
    for row in rows:
        try:
            record = derive_page(row)
        except PageError:
            record = None
        if record is None:
            features = block_features("", [])
            y = np.zeros(0)
        else:
            features = block_features(
                record["simplified_html"],
                record["mapping_blocks"],
                record["title"],
                record["hints"],
            )
            y = np.array([label == MAIN for label in record["labels"]], dtype=float)
        weight = block_weights(matrix_array(features.matrix, N_FEATURES))
        pages.append(
            PageData(
                file, str(row.get("id")), page_group(row), page_type(row), row, features, y, weight
            )
        )
        if progress is not None:
            progress(1)
    return pages


def load_pages(
    data_dir: str | Path,
    files: Sequence[str] = TRAIN_FILES,
    progress=None,
    distant: bool = False,
) -> list[PageData]:
    """The pages of ``files`` of ``data_dir``; with ``distant``, then the shipped
    documentation pages labelled by their markup (only those with blocks)."""
    pages: list[PageData] = []
    for name in files:
        pages.extend(prepare_pages(load_rows(Path(data_dir) / name), file_key(name), progress))
    if distant:
        distant_pages = prepare_pages(load_distant_rows(), DISTANT, progress)
        pages.extend(page for page in distant_pages if len(page.y))
    return pages


def fit(
    pages: Sequence[PageData],
    seed: int = 0,
    num_trees: int = NUM_TREES,
    contexts: dict[int, list[array]] | None = None,
) -> Booster:
    """A LightGBM booster trained on the blocks of ``pages``; with ``contexts`` (by
    ``id(page)``, the context columns of each earlier pass, ``features.context_features``),
    a context booster, on the block features plus them (none or no pass: the first booster)."""
    import lightgbm

    pages = [page for page in pages if len(page.y)]
    passes = len(contexts[id(pages[0])]) if contexts and pages else 0
    X = np.concatenate([matrix_array(_rows(page, contexts), pass_width(passes)) for page in pages])
    y = np.concatenate([page.y for page in pages])
    weight = np.concatenate([page.weight for page in pages])
    dataset = lightgbm.Dataset(
        X,
        label=y,
        weight=weight,
        feature_name=context_names(passes),
        categorical_feature=list(CATEGORICAL),
        free_raw_data=True,
    )
    params = {**PARAMS, "seed": seed}
    return Booster(lightgbm.train(params, dataset, num_boost_round=num_trees).model_to_string())


def _rows(page: PageData, contexts: dict[int, list[array]] | None) -> array:
    return stacked_rows(page.page_features.matrix, contexts[id(page)] if contexts else ())


def fit_model(
    pages: Sequence[PageData],
    seed: int = 0,
    num_trees: int = NUM_TREES,
    context_trees: int = CONTEXT_TREES,
    context_passes: int = CONTEXT_PASSES,
) -> LearnedModel:
    """Every pass of the labeller, trained on ``pages``: the first booster on the block
    features, then ``context_passes`` context boosters, each on the block features plus the
    earlier passes' context columns. Those columns come from boosters that did not see the
    page (``CONTEXT_FOLDS`` per pass, each trained on the other folds' sites), which is how
    a context booster meets the earlier passes' output at run time."""
    pages = [page for page in pages if len(page.y)]
    fold_of = group_folds([page.group for page in pages], CONTEXT_FOLDS, seed + 1)
    contexts: dict[int, list[array]] = {id(page): [] for page in pages}
    trees = [num_trees] + [context_trees] * context_passes  # by pass

    def known(level: int) -> dict[int, list[array]]:  # what pass ``level`` reads
        return {key: columns[:level] for key, columns in contexts.items()}

    for level in range(context_passes):
        columns = known(level)
        for fold in range(CONTEXT_FOLDS):
            others = [p for p, f in zip(pages, fold_of, strict=True) if f != fold]
            booster = fit(others, seed, trees[level], columns)
            for page, page_fold in zip(pages, fold_of, strict=True):
                if page_fold == fold:
                    p = booster.predict(_rows(page, columns), pass_width(level))
                    contexts[id(page)].append(context_features(p, page.page_features))
    boosters = [fit(pages, seed, trees[level], known(level)) for level in range(len(trees))]
    return LearnedModel(boosters[0], THRESHOLD, context_boosters=boosters[1:], margin=MARGIN)


# -- isotonic calibration -------------------------------------------------------------


def isotonic(x: Sequence[float], y: Sequence[float]) -> dict[str, list[float]]:
    """Pool-adjacent-violators fit of y on x: knots (block mean x) and values."""
    order = np.argsort(np.asarray(x, dtype=float), kind="stable")
    xs = np.asarray(x, dtype=float)[order]
    ys = np.asarray(y, dtype=float)[order]
    blocks: list[list[float]] = []  # [sum_y, count, sum_x]
    for xv, yv in zip(xs.tolist(), ys.tolist(), strict=True):
        blocks.append([yv, 1.0, xv])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], last, strict=True)]
    return {
        "x": [round(b[2] / b[1], 6) for b in blocks],
        "y": [round(b[0] / b[1], 6) for b in blocks],
    }


def calibration_quality(
    calibration: dict[str, list[float]], raw: Sequence[float], good: Sequence[bool]
) -> dict[str, float]:
    """Brier score and expected calibration error (10 equal-width bins) on held-out pages."""
    predicted = np.interp(np.asarray(raw), calibration["x"], calibration["y"])
    truth = np.asarray(good, dtype=float)
    bins = np.minimum((predicted * 10).astype(int), 9)
    ece = sum(
        abs(predicted[bins == b].mean() - truth[bins == b].mean()) * (bins == b).mean()
        for b in range(10)
        if (bins == b).any()
    )
    return {
        "pages": len(truth),
        "brier": float(np.mean((predicted - truth) ** 2)),
        "ece": float(ece),
        "base_rate": float(truth.mean()),
    }


# -- evaluation -----------------------------------------------------------------------


@dataclass
class PageResult:
    file: str
    id: str
    group: str
    page_type: str
    extractor: str
    word_f1: float
    word_precision: float
    word_recall: float
    with_found: float | None
    without_leaked: float | None
    rouge5: float | None
    confidence: float | None = None
    raw_confidence: float | None = None
    route: str | None = None  # learned: how the pipeline served the page
    words: int = 0  # of the extraction


def page_metric(markdown: str, gold: str, meta: dict | None, rouge: bool) -> float:
    """A page's own quality metric: ROUGE-5 F1 (the news files, ``rouge``) or WCXB word F1
    with its must-have / must-not-have snippets (``meta``'s ``with`` / ``without``)."""
    if rouge:
        return score_page(markdown, gold).f1
    meta = meta or {}
    return word_score(markdown, gold, meta.get("with") or (), meta.get("without") or ()).f1


def _score(
    page: PageData, extractor: str, markdown: str, rouge: bool, confidence=None, raw=None
) -> PageResult:
    row = page.row
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    gold = row.get("gold_markdown_or_text") or ""
    words = word_score(markdown, gold, meta.get("with") or (), meta.get("without") or ())
    return PageResult(
        page.file,
        page.id,
        page.group,
        page.page_type,
        extractor,
        words.f1,
        words.precision,
        words.recall,
        words.with_found,
        words.without_leaked,
        score_page(markdown, gold).f1 if rouge else None,
        confidence,
        raw,
        words=len(markdown.split()),
    )


def evaluate_learned(
    pages: Sequence[PageData], model: LearnedModel, rouge: bool
) -> list[PageResult]:
    """The whole CPU pipeline with the learned labeller on ``pages``, scored."""
    labeller = LearnedLabeller(model)
    raws = [raw_page_from_row(page.row) for page in pages]
    outcomes = extract_pages(raws, labeller, EVAL_SETTINGS)
    results = []
    for page, outcome in zip(pages, outcomes, strict=True):
        markdown = outcome.record.markdown if outcome.record else ""
        extractor = outcome.record.extractor if outcome.record else f"error:{outcome.reason}"
        raw = None
        if len(page.y):
            raw = raw_confidence(model.predict(page.page_features), page.page_features.matrix)
        confidence = model.calibrate(raw) if raw is not None else None
        result = _score(page, "learned", markdown, rouge, confidence, raw)
        result.route = extractor
        results.append(result)
    return results


FALLBACK_BASELINE = "trafilatura"  # the fallback's own settings: what the targets are set against
BASELINES = (FALLBACK_BASELINE, "rs-trafilatura")
# What the second opinion runs (trafilatura's fast mode, ``pipeline.fallback_page``):
# its rule is fitted on this extractor's results, each group kept ahead of the fallback's.
SECOND_OPINION_BASELINE = "trafilatura-fast"
RULE_BASELINES = (FALLBACK_BASELINE, SECOND_OPINION_BASELINE)  # what fit_second_opinion reads


def baseline_markdown(name: str, html: str, url: str | None) -> str:
    """The Markdown of one of ``BASELINES`` or of ``SECOND_OPINION_BASELINE`` (empty where
    it selects nothing)."""
    if name in RULE_BASELINES:
        from dripstream.processors.errors import NothingSelected
        from dripstream.processors.extract.fallback import fallback_markdown

        try:
            return fallback_markdown(html, url, fast=name == SECOND_OPINION_BASELINE)
        except NothingSelected:
            return ""
    try:
        import rs_trafilatura
    except ImportError as error:
        raise ImportError(
            "the rs-trafilatura baseline needs the bench extra: pip install 'dripstream[bench]'"
        ) from error

    result = rs_trafilatura.extract(html, url=url, output_markdown=True)
    return result.content_markdown or result.main_content or ""


def baseline_results(
    pages: Sequence[PageData],
    rouge: bool,
    cache_dir: str | Path | None = None,
    extractors: Sequence[str] = BASELINES,
) -> list[PageResult]:
    """trafilatura (the project's fallback settings; ``-fast``: its fast mode, the second
    opinion's) and rs-trafilatura (Markdown output, defaults; the ``bench`` extra) on the
    same pages, cached per page in ``cache_dir``."""
    cache: dict[str, dict[str, str]] = {}
    cache_path = Path(cache_dir) / "baselines.json" if cache_dir else None
    if cache_path is not None and cache_path.exists():
        cache = json.loads(cache_path.read_text())
    results = []
    computed = False
    for page in pages:
        outputs = cache.setdefault(f"{page.file}/{page.id}", {})
        for name in extractors:
            if name not in outputs:
                outputs[name] = baseline_markdown(name, page.row["html"], page.row.get("url"))
                computed = True
            results.append(_score(page, name, outputs[name], rouge))
    if cache_path is not None and computed:  # replaced whole: a reader never sees half a file
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        partial = cache_path.with_name(f".{cache_path.name}.{os.getpid()}")
        partial.write_text(json.dumps(cache))
        partial.replace(cache_path)
    return results


def group_folds(groups: Sequence[str], k: int, seed: int) -> list[int]:
    """Fold of each item: whole groups, shuffled with ``seed``, greedily balanced by size."""
    sizes: dict[str, int] = defaultdict(int)
    for group in groups:
        sizes[group] += 1
    names = sorted(sizes)
    random.Random(seed).shuffle(names)
    names.sort(key=lambda name: -sizes[name])  # stable: shuffled order within equal sizes
    load = [0] * k
    fold_of: dict[str, int] = {}
    for name in names:
        fold = min(range(k), key=lambda f: (load[f], f))
        fold_of[name] = fold
        load[fold] += sizes[name]
    return [fold_of[group] for group in groups]


@dataclass
class CVReport:
    """Out-of-fold results: every page scored by a model that never saw its site."""

    seed: int
    folds: int
    results: list[PageResult] = field(default_factory=list)
    seconds: float = 0.0

    def table(self, metric: str = "word_f1") -> dict[str, dict[str, dict[str, float]]]:
        """file -> page type (and "all") -> extractor -> mean of ``metric``."""
        values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for r in self.results:
            value = getattr(r, metric)
            if value is None:
                continue
            for kind in {r.page_type, "all"}:
                values[(r.file, kind, r.extractor)].append(value)
        table: dict[str, dict[str, dict[str, float]]] = {}
        for (file, kind, extractor), vals in sorted(values.items()):
            table.setdefault(file, {}).setdefault(kind, {})[extractor] = sum(vals) / len(vals)
        return table

    def counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for r in self.results:
            if r.extractor != "learned":
                continue
            for kind in {r.page_type, "all"}:
                counts.setdefault(r.file, {}).setdefault(kind, 0)
                counts[r.file][kind] += 1
        return counts

    def routes(self) -> dict[str, dict[str, int]]:
        routes: dict[str, dict[str, int]] = {}
        for r in self.results:
            if r.extractor != "learned":
                continue
            routes.setdefault(r.file, {}).setdefault(r.route or r.extractor, 0)
            routes[r.file][r.route or r.extractor] += 1
        return routes

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "folds": self.folds,
            "seconds": self.seconds,
            "pages": self.counts(),
            "routes": self.routes(),
            "word_f1": self.table("word_f1"),
            "with_found": self.table("with_found"),
            "without_leaked": self.table("without_leaked"),
            "rouge5": self.table("rouge5"),
            "results": [asdict(r) for r in self.results],
        }


def held_out_training(pages: Sequence[PageData], test: Sequence[PageData]) -> list[PageData]:
    """``pages`` less ``test`` and every page that shares a group (a site) with it."""
    test_ids = {id(page) for page in test}
    test_groups = {page.group for page in test}
    return [p for p in pages if id(p) not in test_ids and p.group not in test_groups]


def cv_splits(
    pages: Sequence[PageData], folds: int = CV_FOLDS, seed: int = 0
) -> list[tuple[str, list[PageData], list[PageData]]]:
    """The cross-validation's splits, each (name, test pages, training pages): wcxb_dev in
    ``folds`` folds by domain, then each other file held out whole (``DISTANT`` pages only
    train); no training page shares a group with a test page."""
    wcxb = [page for page in pages if page.file == "wcxb_dev"]
    fold_of = group_folds([page.group for page in wcxb], folds, seed)
    tests: list[tuple[str, list[PageData]]] = [
        (f"wcxb fold {k}", [p for p, f in zip(wcxb, fold_of, strict=True) if f == k])
        for k in range(folds)
    ]
    for name in sorted({page.file for page in pages} - {"wcxb_dev", DISTANT}):
        tests.append((f"{name} held out", [page for page in pages if page.file == name]))
    return [(name, test, held_out_training(pages, test)) for name, test in tests]


def cross_validate(
    data_dir: str | Path = "../shared/data",
    seed: int = 0,
    folds: int = CV_FOLDS,
    pages: Sequence[PageData] | None = None,
    baselines: Sequence[str] = (*BASELINES, SECOND_OPINION_BASELINE),
    cache_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
    num_trees: int = NUM_TREES,
    files: Sequence[str] = TRAIN_FILES,
) -> CVReport:
    """Grouped CV on wcxb_dev (``folds`` folds by domain) + leave-one-file-out on the
    other files (``DISTANT`` pages only train); ``pages`` may be given pre-loaded
    (``load_pages``), else ``files`` of ``data_dir`` are loaded."""
    started = time.perf_counter()
    log = log or (lambda message: None)
    if pages is None:
        pages = load_pages(data_dir, files)
    report = CVReport(seed, folds)
    for name, test, training in cv_splits(pages, folds, seed):
        t0 = time.perf_counter()
        model = fit_model(training, seed, num_trees)
        rouge = not name.startswith("wcxb")
        report.results.extend(evaluate_learned(test, model, rouge))
        if baselines:
            report.results.extend(baseline_results(test, rouge, cache_dir, baselines))
        log(
            f"{name}: trained on {len(training)} pages, tested on {len(test)} "
            f"({time.perf_counter() - t0:.0f} s)"
        )
    report.seconds = time.perf_counter() - started
    return report


def fit_calibration(
    results: Sequence[PageResult], seed: int = 0
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Isotonic map raw confidence -> P(word F1 >= GOOD_F1) on out-of-fold learned pages,
    plus its quality measured on held-out groups (fit on half the sites, scored on the
    other half)."""
    learned = [r for r in results if r.raw_confidence is not None and r.extractor == "learned"]
    groups = sorted({r.group for r in learned})
    random.Random(seed).shuffle(groups)
    half = set(groups[: len(groups) // 2])
    fit_part = [r for r in learned if r.group in half]
    test_part = [r for r in learned if r.group not in half]
    check = isotonic([r.raw_confidence for r in fit_part], [r.word_f1 >= GOOD_F1 for r in fit_part])
    quality = calibration_quality(
        check, [r.raw_confidence for r in test_part], [r.word_f1 >= GOOD_F1 for r in test_part]
    )
    calibration = isotonic(
        [r.raw_confidence for r in learned], [r.word_f1 >= GOOD_F1 for r in learned]
    )
    return calibration, quality


def _page_score(result: PageResult) -> float:
    """The file's own metric: ROUGE-5 on the news files, WCXB word F1 on wcxb_dev."""
    return result.rouge5 if result.rouge5 is not None else result.word_f1


_Triple = tuple[PageResult, PageResult, PageResult]


def _triples(results: Sequence[PageResult]) -> list[_Triple]:
    """(learned, the second opinion's extractor, the fallback the targets are set against:
    trafilatura, the second opinion's extractor where trafilatura was not run) of every
    page the learned labels served."""
    second = {(r.file, r.id): r for r in results if r.extractor == SECOND_OPINION_BASELINE}
    fallback = {(r.file, r.id): r for r in results if r.extractor == FALLBACK_BASELINE}
    triples = []
    for r in results:
        key = (r.file, r.id)
        if (
            r.extractor == "learned"
            and (r.route or "").startswith("dripper")
            and r.raw_confidence is not None
            and key in second
        ):
            triples.append((r, second[key], fallback.get(key, second[key])))
    return triples


def _second_opinion_wins(learned: PageResult, second: PageResult, rule: SecondOpinion) -> bool:
    ratio = rule.ratio(learned.raw_confidence or 0.0)
    return ratio is not None and second.words > 0 and second.words >= ratio * learned.words


def _target_group(result: PageResult) -> str:
    """Where a quality target is set: a WCXB page type, or a news file."""
    return result.page_type if result.file == "wcxb_dev" else result.file


def _group_gains(
    triples: Sequence[_Triple], rule: SecondOpinion, over_fallback: bool = False
) -> dict[str, float]:
    """Per target group, the mean over its pages of the page score with the rule applied
    minus ours alone (``over_fallback``: minus the fallback's, the group's lead)."""
    gains: dict[str, list[float]] = defaultdict(list)
    for learned, second, fallback in triples:
        chosen = second if _second_opinion_wins(learned, second, rule) else learned
        base = fallback if over_fallback else learned
        gains[_target_group(learned)].append(_page_score(chosen) - _page_score(base))
    return {group: sum(values) / len(values) for group, values in gains.items()}


def _rule_value(
    triples: Sequence[_Triple], rule: SecondOpinion, max_asked: float
) -> tuple[int, float]:
    """How good a rule is, to be maximised: rules that ask on more than ``max_asked`` of
    the pages rank last; then rules that keep every target group at least ``MIN_LEAD``
    ahead of the fallback, by their mean lead over the groups; the others after them, by
    their smallest lead (the weakest group first)."""
    if not triples:  # no page to judge by (no fallback results): never ask
        return (1, 0.0) if rule == NEVER_ASK else (0, 0.0)
    asked = sum(rule.ratio(learned.raw_confidence or 0.0) is not None for learned, *_ in triples)
    if asked > max_asked * len(triples):
        return -1, -asked
    leads = list(_group_gains(triples, rule, over_fallback=True).values())
    if min(leads) >= MIN_LEAD:
        return 1, sum(leads) / len(leads)
    return 0, min(leads)


NEVER_ASK = SecondOpinion(0.0, 0.0, 1.0)
SECOND_OPINION_GRID = [NEVER_ASK] + [
    SecondOpinion(replace_below / 100, compare_below / 100, ratio)
    for replace_below in range(60, 82, 2)
    for compare_below in range(replace_below, 96, 3)
    for ratio in (0.8, 1.0, 1.2, 1.5, 2.0)
]


def _best_rule(triples: Sequence[_Triple], max_asked: float) -> SecondOpinion:
    return max(SECOND_OPINION_GRID, key=lambda rule: _rule_value(triples, rule, max_asked))


def fit_second_opinion(
    results: Sequence[PageResult], seed: int = 0, max_asked: float = MAX_ASKED
) -> tuple[SecondOpinion, dict[str, Any]]:
    """The second-opinion rule (``SecondOpinion``) fitted by grid search on out-of-fold
    pages over the groups the quality targets are set on (each WCXB page type, each news
    file), among the rules asking on at most ``max_asked`` of the pages: of those keeping
    every group ``MIN_LEAD`` ahead of the fallback extractor, the one with the largest
    mean lead; if none does, the one whose weakest group is furthest ahead
    (``_rule_value``).

    The rule ships only if fitting it pays on sites it was not fitted on: fitted on half
    the sites and applied to the other half (``RULE_SPLITS`` random halvings, both ways),
    its gain over our own result, averaged per group and then over the groups, must be
    positive; else ``NEVER_ASK``. The check (the fitted rule, each group's held-out gain,
    whether it ships) comes with it."""
    triples = _triples(results)
    fitted = _best_rule(triples, max_asked)
    sites = sorted({learned.group for learned, *_ in triples})
    rng = random.Random(seed)
    gains: dict[str, list[float]] = defaultdict(list)
    for _ in range(RULE_SPLITS if fitted != NEVER_ASK else 0):
        rng.shuffle(sites)
        half = set(sites[: len(sites) // 2])
        parts = (
            [triple for triple in triples if triple[0].group in half],
            [triple for triple in triples if triple[0].group not in half],
        )
        for fit_part, test_part in (parts, parts[::-1]):
            for group, gain in _group_gains(test_part, _best_rule(fit_part, max_asked)).items():
                gains[group].append(gain)
    held_out = {group: sum(values) / len(values) for group, values in sorted(gains.items())}
    pays = bool(held_out) and sum(held_out.values()) / len(held_out) > 0
    check = {"rule": fitted._asdict(), "held_out_gain": held_out, "ships": pays}
    return (fitted if pays else NEVER_ASK), check


def with_second_opinion(results: Sequence[PageResult], rule: SecondOpinion) -> list[PageResult]:
    """The learned results as the pipeline with the rule serves them (extractor
    ``learned+second``): the second opinion's result where the rule prefers it."""
    chosen = {
        (learned.file, learned.id): second
        for learned, second, _fallback in _triples(results)
        if _second_opinion_wins(learned, second, rule)
    }
    return [
        replace(chosen.get((r.file, r.id), r), extractor="learned+second")
        for r in results
        if r.extractor == "learned"
    ]


@dataclass
class TrainReport:
    model_path: str
    seed: int
    pages: dict[str, int]
    blocks: int
    main_share: float
    seconds: float
    model_bytes: int
    calibration_quality: dict[str, float] | None = None
    second_opinion: dict[str, Any] | None = None


def train(
    data_dir: str | Path = "../shared/data",
    model_path: str | Path = "processors/models/learned_labeller.json",
    seed: int = 0,
    cv: CVReport | None = None,
    pages: Sequence[PageData] | None = None,
    num_trees: int = NUM_TREES,
    files: Sequence[str] = TRAIN_FILES,
) -> TrainReport:
    """Train on every page (``pages``, else ``files`` of ``data_dir``) and write the model
    file. The confidence calibration comes from ``cv`` (run ``cross_validate`` first to
    get one; without it the model ships uncalibrated: confidence = raw score)."""
    started = time.perf_counter()
    if pages is None:
        pages = load_pages(data_dir, files)
    model = fit_model(pages, seed, num_trees)
    calibration = quality = rule = rule_check = None
    if cv is not None:
        calibration, quality = fit_calibration(cv.results, seed)
        rule, rule_check = fit_second_opinion(cv.results, seed)
    counts: dict[str, int] = defaultdict(int)
    for page in pages:
        counts[page.file] += 1
    blocks = sum(len(page.y) for page in pages)
    main = sum(float(page.y.sum()) for page in pages)
    model.calibration = calibration
    model.second_opinion = None if rule == NEVER_ASK else rule
    model.meta = {
        "seed": seed,
        "trees": num_trees,
        "params": PARAMS,
        "trained_on": dict(counts),
        "good_f1": GOOD_F1,
        "calibration_quality": quality,
        "second_opinion_check": rule_check,
    }
    model.save(model_path)
    return TrainReport(
        str(model_path),
        seed,
        dict(counts),
        blocks,
        main / max(blocks, 1),
        time.perf_counter() - started,
        Path(model_path).stat().st_size,
        quality,
        rule_check,
    )
