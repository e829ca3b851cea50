"""Decision rules over the learned labeller's block probabilities (BENCHMARKS.md).

The grouped CV's folds (5 wcxb folds by domain, news files held out one at a time) give
every dev page out-of-fold block probabilities; ``cache`` stores them once (about 5
minutes), then each rule is scored from them without retraining, against trafilatura's
and rs-trafilatura's results from the last ``learned_labeller.py cv`` (``cv.json``, the
same pages). A page the labels leave empty goes to trafilatura, as in the pipeline.

    .venv/bin/python benchmarks/label_rules.py cache     # out/learned/oof.pkl
    .venv/bin/python benchmarks/label_rules.py rules     # every rule family below

Rules: the plain threshold (0.5: the CV's "learned"); the shipped second-opinion rule and
the grid's best under each objective (maximin, largest mean lead above a margin), with
trafilatura or rs-trafilatura giving the second opinion; a lower threshold on unsure pages,
alone and under trafilatura's second opinion (one rule, then the grid for three (below,
threshold) pairs: about a minute each); expected-F1 block selection per page; a second
opinion from the labeller itself at a lower threshold.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dripstream.processors.errors import PageError
from dripstream.processors.extract.reconstruct import reconstruct
from dripstream.processors.label.features import FEATURE_NAMES
from dripstream.processors.label.learned import LearnedModel, raw_confidence
from dripstream.processors.training.labels import derive_page
from dripstream.processors.training.train import (
    NUM_TREES,
    SECOND_OPINION_GRID,
    THRESHOLD,
    SecondOpinion,
    fit_model,
    group_folds,
    held_out_training,
    load_pages,
    page_metric,
)
from dripstream.topics.records import MAIN, OTHER

_LOG_WORDS = FEATURE_NAMES.index("log_words")
# ("learned", labels), or (an extractor of cv.json: "trafilatura", "rs-trafilatura", None)
Choice = tuple[str, tuple[str, ...] | None]


def cache(data: str, path: Path) -> None:
    pages = load_pages(data)
    wcxb = [page for page in pages if page.file == "wcxb_dev"]
    fold_of = group_folds([page.group for page in wcxb], 5, 0)
    splits = [[p for p, f in zip(wcxb, fold_of, strict=True) if f == k] for k in range(5)]
    splits += [[p for p in pages if p.file == name] for name in ("articles_dev", "publishers_dev")]
    out = {}
    for test in splits:
        model = fit_model(held_out_training(pages, test), 0, NUM_TREES)
        for page in test:
            record = derive_page(page.row) if len(page.y) else None
            p = np.array(model.predict(page.page_features) if len(page.y) else [])
            out[(page.file, page.id)] = {
                "file": page.file,
                "group": page.page_type if page.file == "wcxb_dev" else page.file,
                "p": p,
                "words": np.expm1(page.X[:, _LOG_WORDS]) + 1.0,
                "raw": raw_confidence(list(p), page.page_features.matrix) if len(p) else None,
                "mapping": record["mapping_blocks"] if record else [],
                "url": page.row.get("url"),
                "gold": page.row.get("gold_markdown_or_text") or "",
                "meta": page.row.get("meta") or {},
            }
    path.write_bytes(pickle.dumps(out))


class Scorer:
    """Page scores of a rule's choices, beside the CV's baselines on the same pages."""

    def __init__(self, pages: dict, cv: dict) -> None:
        self.pages = pages
        self.base: dict[str, dict] = defaultdict(dict)
        for r in cv["results"]:
            score = r["rouge5"] if r["rouge5"] is not None else r["word_f1"]
            self.base[r["extractor"]][(r["file"], r["id"])] = (score, r["words"])
        self._markdown: dict = {}
        self._scores: dict = {}

    def markdown(self, key: tuple, labels: tuple[str, ...]) -> str:
        if (key, labels) not in self._markdown:
            page = self.pages[key]
            try:
                text = reconstruct(page["mapping"], list(labels), page["url"]).markdown
            except PageError:
                text = ""
            self._markdown[(key, labels)] = text
        return self._markdown[(key, labels)]

    def score(self, key: tuple, labels: tuple[str, ...]) -> float | None:
        """The page's own metric (ROUGE-5 on news, word F1 on WCXB); None: nothing kept."""
        if (key, labels) not in self._scores:
            page, text = self.pages[key], self.markdown(key, labels)
            rouge = page["file"] != "wcxb_dev"
            score = page_metric(text, page["gold"], page["meta"], rouge) if text.strip() else None
            self._scores[(key, labels)] = score
        return self._scores[(key, labels)]

    def report(self, name: str, choose: Callable[[tuple, dict], Choice]) -> dict:
        ours: dict[str, list[float]] = defaultdict(list)
        theirs: dict[str, list[float]] = defaultdict(list)
        wcxb, rs = [], []
        for key, page in self.pages.items():
            fallback = self.base["trafilatura"][key][0]
            score = None
            if not len(page["p"]):
                score = self.base["learned"][key][0]
            else:
                kind, labels = choose(key, page)
                score = self.score(key, labels) if kind == "learned" else self.base[kind][key][0]
            score = fallback if score is None else score
            ours[page["group"]].append(score)
            theirs[page["group"]].append(fallback)
            if page["file"] == "wcxb_dev":
                wcxb.append(score)
                rs.append(self.base["rs-trafilatura"][key][0])
        leads = {g: statistics.fmean(ours[g]) - statistics.fmean(theirs[g]) for g in ours}
        return {
            "rule": name,
            "wcxb": round(statistics.fmean(wcxb), 4),
            "rs_trafilatura": round(statistics.fmean(rs), 4),
            "smallest_lead": round(min(leads.values()), 4),
            "mean_lead": round(statistics.fmean(leads.values()), 4),
            "leads": {g: round(v, 4) for g, v in sorted(leads.items())},
        }


def labels_at(page: dict, threshold: float) -> tuple[str, ...]:
    return tuple(MAIN if q >= threshold else OTHER for q in page["p"])


def second_opinion(
    scorer: Scorer,
    rule: SecondOpinion,
    below: float = 0.0,
    threshold: float = THRESHOLD,
    extractor: str = "trafilatura",
) -> Callable[[tuple, dict], Choice]:
    """``extractor``'s output where the rule prefers it, over our labels (threshold
    ``threshold`` on pages of raw confidence under ``below``)."""

    def choose(key: tuple, page: dict) -> Choice:
        labels = labels_at(page, threshold if page["raw"] < below else THRESHOLD)
        ratio = rule.ratio(page["raw"])
        words = scorer.base[extractor][key][1]
        ours = len(scorer.markdown(key, labels).split())
        if ratio is not None and words > 0 and words >= ratio * ours:
            return extractor, None
        return "learned", labels

    return choose


def unsure_threshold(below: float, threshold: float) -> Callable[[tuple, dict], Choice]:
    return lambda key, page: (
        "learned",
        labels_at(page, threshold if page["raw"] < below else THRESHOLD),
    )


def expected_f1(key: tuple, page: dict) -> Choice:
    """The blocks, most probable first, whose prefix maximises the plug-in expected word
    F1: 2 sum(w p) over the prefix / (prefix words + expected gold words)."""
    p, w = page["p"], page["words"]
    order = np.argsort(-p, kind="stable")
    gain = 2 * np.cumsum((w * p)[order]) / (np.cumsum(w[order]) + float(np.dot(w, p)))
    chosen = np.zeros(len(p), dtype=bool)
    chosen[order[: int(np.argmax(gain)) + 1]] = True
    return "learned", tuple(MAIN if c else OTHER for c in chosen)


def self_second_opinion(scorer: Scorer, below: float, threshold: float, ratio: float):
    def choose(key: tuple, page: dict) -> Choice:
        labels = labels_at(page, THRESHOLD)
        if page["raw"] < below:
            wider = labels_at(page, threshold)
            longer = len(scorer.markdown(key, wider).split())
            if longer >= ratio * len(scorer.markdown(key, labels).split()):
                return "learned", wider
        return "learned", labels

    return choose


def _best_of_grid(
    scorer: Scorer,
    label: str,
    margins: tuple[float, ...],
    below: float = 0.0,
    threshold: float = THRESHOLD,
    extractor: str = "trafilatura",
) -> None:
    """The second-opinion grid's best rule under each objective (maximin; the largest
    mean lead among rules keeping every group ``margin`` ahead); the other arguments are
    ``second_opinion``'s."""
    grid = [
        scorer.report(f"{label} {tuple(r)}", second_opinion(scorer, r, below, threshold, extractor))
        for r in SECOND_OPINION_GRID
    ]
    print(json.dumps({"objective": "maximin", **max(grid, key=lambda r: r["smallest_lead"])}))
    for margin in margins:
        safe = [r for r in grid if r["smallest_lead"] >= margin]
        if safe:
            best = max(safe, key=lambda r: r["mean_lead"])
            print(json.dumps({"objective": f"mean, margin {margin}", **best}))


def rules(path: Path, cv_path: Path, shipped: SecondOpinion | None) -> None:
    scorer = Scorer(pickle.loads(path.read_bytes()), json.loads(cv_path.read_text()))
    show = lambda result: print(json.dumps(result))  # noqa: E731
    show(scorer.report("threshold 0.5", unsure_threshold(0.0, THRESHOLD)))
    if shipped is not None:
        show(scorer.report(f"shipped {tuple(shipped)}", second_opinion(scorer, shipped)))
        rs = second_opinion(scorer, shipped, extractor="rs-trafilatura")
        show(scorer.report(f"rs-trafilatura as the second opinion, {tuple(shipped)}", rs))
    _best_of_grid(scorer, "trafilatura", (0.0, 0.002, 0.005))
    _best_of_grid(scorer, "rs-trafilatura", (0.0, 0.002), extractor="rs-trafilatura")
    for below in (0.74, 0.82):
        for threshold in (0.25, 0.35, 0.45):
            rule = f"threshold {threshold} below raw {below}"
            show(scorer.report(rule, unsure_threshold(below, threshold)))
    combined = second_opinion(scorer, SecondOpinion(0.60, 0.90, 1.5), 0.70, 0.25)
    show(scorer.report("threshold 0.25 below 0.70, then trafilatura (0.6, 0.9, 1.5)", combined))
    for below, threshold in ((0.66, 0.25), (0.70, 0.25), (0.74, 0.25)):  # the grid over both
        label = f"threshold {threshold} below {below}, then trafilatura"
        _best_of_grid(scorer, label, (0.0, 0.002), below=below, threshold=threshold)
    show(scorer.report("expected F1", expected_f1))
    for threshold, ratio in ((0.2, 2.0), (0.3, 1.5)):
        rule = f"own second opinion: threshold {threshold} when {ratio}x the words, below 0.74"
        show(scorer.report(rule, self_second_opinion(scorer, 0.74, threshold, ratio)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("cache", "rules"))
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--out", default="out/learned")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what == "cache":
        cache(args.data, out / "oof.pkl")
    else:
        rules(out / "oof.pkl", out / "cv.json", LearnedModel.load().second_opinion)


if __name__ == "__main__":
    main()
