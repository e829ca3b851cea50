"""Would the learned labeller gain from knowing the page type? (BENCHMARKS.md)

The same grouped CV as ``learned_labeller.py cv`` (5 wcxb folds by domain, news files
held out one at a time), scored from the out-of-fold block labels straight through
reconstruction (no fallback for pages where nothing is selected, so wcxb reads lower than
the pipeline's CV; the news files match it). Variants, each adding 7 page-type columns to
every block's features:

* ``baseline``: no column (the shipped features);
* ``oracle``: the true type (WCXB's ``page_type``; the news files are articles), in
  training and in test: an upper bound, not a labeller;
* ``predicted``: a LightGBM page-type classifier on page-level summaries of the block
  features (page scalars, text-weighted means, tag histograms, text concentration); the
  training pages get its out-of-fold probabilities (inner grouped folds), the test pages
  those of a classifier trained on all training pages.

    .venv/bin/python benchmarks/page_type_signal.py baseline oracle predicted
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from dripstream.processors.errors import PageError
from dripstream.processors.extract.reconstruct import reconstruct
from dripstream.processors.label.features import CATEGORICAL, FEATURE_NAMES, TAG_CODES
from dripstream.processors.training.labels import derive_page
from dripstream.processors.training.train import (
    NUM_TREES,
    PARAMS,
    THRESHOLD,
    PageData,
    group_folds,
    held_out_training,
    load_pages,
    page_metric,
)
from dripstream.topics.records import MAIN, OTHER

TYPES = ("article", "collection", "documentation", "forum", "listing", "product", "service")
TYPE_COLUMNS = [f"type_{name}" for name in TYPES]
TYPE_PARAMS = {
    "objective": "multiclass",
    "num_class": len(TYPES),
    "learning_rate": 0.1,
    "num_leaves": 15,
    "min_data_in_leaf": 10,
    "feature_fraction": 0.5,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "deterministic": True,
    "force_row_wise": True,
    "num_threads": 2,
    "verbose": -1,
    "seed": 0,
}
_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}
_TAGS = max(TAG_CODES.values()) + 1
Extra = Callable[[PageData], np.ndarray]


def true_type(page: PageData) -> str:
    return page.page_type if page.file == "wcxb_dev" else "article"


def page_summary(page: PageData) -> np.ndarray:
    """Page-level inputs of the type classifier, from the page's block features."""
    X = page.X
    if not len(X):
        return np.zeros(2 * X.shape[1] + 1 + 2 * _TAGS + 8, dtype=np.float32)
    share = page.weight / page.weight.sum()
    tags = X[:, _COL["tag"]].astype(int).clip(0, _TAGS - 1)
    text = np.expm1(X[:, _COL["log_text"]]).clip(0)
    total = text.sum() + 1
    ranked = np.sort(text)[::-1]
    linky = X[:, _COL["link_share"]] > 0.5
    return np.concatenate(
        [
            X[0],  # the page-level columns are the same on every block
            (X * share[:, None]).sum(0),
            [len(X)],
            np.bincount(tags, minlength=_TAGS) / len(X),
            np.bincount(tags, weights=text, minlength=_TAGS) / total,
            [
                ranked[0] / total,
                ranked[:3].sum() / total,
                ranked[:10].sum() / total,
                np.log1p(total),
                linky.mean(),
                (linky * text).sum() / total,
                (X[:, _COL["currency"]] > 0).mean(),
                np.median(X[:, _COL["log_text"]]),
            ],
        ]
    ).astype(np.float32)


def fit_types(pages: Sequence[PageData]):
    import lightgbm

    X = np.stack([page_summary(page) for page in pages])
    y = np.array([TYPES.index(true_type(page)) for page in pages])
    return lightgbm.train(TYPE_PARAMS, lightgbm.Dataset(X, label=y), num_boost_round=100)


def _per_block(page: PageData, row: np.ndarray) -> np.ndarray:
    return np.tile(row.astype(np.float32), (len(page.y), 1))


def no_columns(training: Sequence[PageData]) -> Extra:
    return lambda page: np.zeros((len(page.y), 0), dtype=np.float32)


def oracle_columns(training: Sequence[PageData]) -> Extra:
    return lambda page: _per_block(page, np.array([true_type(page) == t for t in TYPES]))


def predicted_columns(training: Sequence[PageData]) -> Extra:
    out_of_fold: dict[int, np.ndarray] = {}
    fold_of = group_folds([page.group for page in training], 5, 1)
    for k in range(5):
        model = fit_types([p for p, f in zip(training, fold_of, strict=True) if f != k])
        held = [p for p, f in zip(training, fold_of, strict=True) if f == k]
        rows = model.predict(np.stack([page_summary(page) for page in held]))
        out_of_fold.update((id(page), row) for page, row in zip(held, rows, strict=True))
    full = fit_types(training)

    def columns(page: PageData) -> np.ndarray:
        row = out_of_fold.get(id(page))
        if row is None:
            row = full.predict(page_summary(page)[None, :])[0]
        return _per_block(page, row)

    return columns


VARIANTS = {"baseline": no_columns, "oracle": oracle_columns, "predicted": predicted_columns}


def fit_blocks(pages: Sequence[PageData], extra: Extra, names: list[str]):
    import lightgbm

    pages = [page for page in pages if len(page.y)]
    dataset = lightgbm.Dataset(
        np.concatenate([np.hstack([page.X, extra(page)]) for page in pages]),
        label=np.concatenate([page.y for page in pages]),
        weight=np.concatenate([page.weight for page in pages]),
        feature_name=list(FEATURE_NAMES) + names,
        categorical_feature=list(CATEGORICAL),
    )
    return lightgbm.train({**PARAMS, "seed": 0}, dataset, num_boost_round=NUM_TREES)


def page_score(page: PageData, mapping: list[str], labels: list[str]) -> float:
    try:
        markdown = reconstruct(mapping, labels, page.row.get("url")).markdown
    except PageError:
        markdown = ""
    gold = page.row.get("gold_markdown_or_text") or ""
    return page_metric(markdown, gold, page.row.get("meta"), page.file != "wcxb_dev")


def run(pages: list[PageData], variant: str, mapping: dict[int, list[str]]) -> dict[str, float]:
    wcxb = [page for page in pages if page.file == "wcxb_dev"]
    fold_of = group_folds([page.group for page in wcxb], 5, 0)
    splits = [[p for p, f in zip(wcxb, fold_of, strict=True) if f == k] for k in range(5)]
    splits += [[p for p in pages if p.file == name] for name in ("articles_dev", "publishers_dev")]
    names = [] if variant == "baseline" else TYPE_COLUMNS
    scores: dict[str, list[float]] = defaultdict(list)
    for test in splits:
        training = held_out_training(pages, test)
        extra = VARIANTS[variant](training)
        model = fit_blocks(training, extra, names)
        for page in test:
            score = 0.0
            if len(page.y):
                p = model.predict(np.hstack([page.X, extra(page)]))
                labels = [MAIN if q >= THRESHOLD else OTHER for q in p]
                score = page_score(page, mapping[id(page)], labels)
            scores[page.file].append(score)
            if page.file == "wcxb_dev":
                scores[page.page_type].append(score)
    return {key: round(statistics.fmean(values), 4) for key, values in scores.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+", choices=sorted(VARIANTS))
    parser.add_argument("--data", default="../shared/data")
    args = parser.parse_args()
    pages = load_pages(args.data)
    mapping = {}
    for page in pages:
        with_labels = derive_page(page.row) if len(page.y) else None
        mapping[id(page)] = with_labels["mapping_blocks"] if with_labels else []
    for variant in args.variants:
        started = time.perf_counter()
        print(variant, run(pages, variant, mapping), f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
