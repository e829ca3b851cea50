"""The learned CPU labeller: a gradient-boosted tree classifier (LightGBM) over per-block
features.

Per page: features (``features``, one parse of the simplified page), then a chain of
predictions on the page's matrix (:mod:`dripstream.processors.label.booster`): the first
booster reads the block features alone; each context booster reads them plus, for every
pass before it, what that pass thought of the block's surroundings
(``features.context_features``: neighbours, windows, the block's containers, the page).
A block is main where the last booster's p >= the model's threshold, or, on a page whose
most likely block is main but below threshold + ``margin``, where p >= that block's p less
the margin. A page with no block at the threshold keeps none (the fallback extracts it).
Each context booster is trained on the earlier passes' probabilities of pages those passes
did not see (``dripstream.processors.training.train.fit_model``), as it meets them at run
time.
The model file is LightGBM's text format, loaded without pickle; same data and seed give
the same file. Why this model and these rules: docs/labellers-design.md.

Confidence (``LabelOutcome.confidence``): the calibrated probability that the page's
extraction is *good*, defined as WCXB word F1 >= 0.8 against the gold. Raw score: the
text-weighted mean over the page's blocks of max(p, 1 - p) (how decided the model is,
where the words are). Calibration: isotonic regression (pool-adjacent-violators) of
"good" on the raw score over out-of-fold pages of the grouped cross-validation (the model
scoring a page never saw it, nor its domain), stored in the model file as a step
function and applied with linear interpolation. A page with no block selected has
confidence 0.

Second opinion (``LabelOutcome.second_opinion``): on a page the model is unsure of, the
fallback extractor (trafilatura) also runs, in its fast mode (without its backup
extractors), and its Markdown replaces ours when it holds at least ``second_opinion``
times our words (0: whenever it finds any). The rule, on the raw score, is stored in the
model file (``SecondOpinion``: below ``replace_below`` the fallback's Markdown is
preferred, below ``compare_below`` it must be ``longer_ratio`` times longer) and fitted by
``training.train.fit_second_opinion`` on out-of-fold pages, on that mode's output,
within a budget of pages that may ask (``training.train.MAX_ASKED``), so that it costs little
time, and only where fitting it gains on sites it was not fitted on (a model file may
carry no rule: no page asks). ``second_opinion=False`` (``LearnedOptions``) turns it off
(one fallback run fewer per unsure page).

Routing: with ``min_confidence`` (``LearnedOptions``; None: no floor) a page below it
gets no labels but ``failure="low_confidence"`` (its confidence still set), so the
pipeline sends it to the fallback, or a cascade to the next labeller.

This module reads no environment: the entry points parse ``DRIPSTREAM_LEARNED_*`` and
``DRIPSTREAM_SECOND_OPINION`` (``dripstream.streams.settings``) and pass the options.
"""

from __future__ import annotations

import json
import time
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from dripstream.processors.label.base import LabelOutcome
from dripstream.processors.label.booster import Booster
from dripstream.processors.label.features import (
    CONTEXT_NAMES,
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    PageFeatures,
    block_features,
    context_features,
    pairwise_sum,
    text_weights,
)
from dripstream.topics.records import MAIN, OTHER, SimplifiedPage

if TYPE_CHECKING:
    from dripstream.processors.label.registry import LabellerOptions

MODEL_FORMAT = "dripstream-learned-labeller"
MODEL_RESOURCE = "learned_labeller.json"


@dataclass(frozen=True)
class LearnedOptions:
    """How the learned labeller routes and second-guesses its pages."""

    min_confidence: float | None = None
    """Pages below this calibrated confidence get ``failure="low_confidence"``; None: no
    floor (a builder that chains labellers may apply its own)."""
    second_opinion: bool = True
    """Whether the model's second-opinion rule runs on unsure pages."""


def default_model_path() -> Path:
    """The model file shipped inside the package (``processors/models/``)."""
    return Path(str(resources.files("dripstream.processors.label.models").joinpath(MODEL_RESOURCE)))


class SecondOpinion(NamedTuple):
    """When the fallback extractor's Markdown may replace ours (see the module docstring)."""

    replace_below: float
    compare_below: float
    longer_ratio: float

    def ratio(self, raw: float) -> float | None:
        """The word ratio at which the fallback's Markdown wins, None: no second opinion."""
        if raw < self.replace_below:
            return 0.0
        if raw < self.compare_below:
            return self.longer_ratio
        return None


class LearnedModel:
    """A trained booster plus what is needed to use it: threshold and calibration."""

    def __init__(
        self,
        booster: Booster,
        threshold: float = 0.5,
        calibration: dict[str, list[float]] | None = None,
        meta: dict[str, Any] | None = None,
        second_opinion: SecondOpinion | None = None,
        context_boosters: Sequence[Booster] = (),
        margin: float = 0.0,
    ) -> None:
        self.booster = booster
        self.context_boosters = list(context_boosters)
        self.threshold = threshold
        self.margin = margin
        self.calibration = calibration
        self.meta = meta or {}
        self.second_opinion = second_opinion

    @classmethod
    def load(cls, path: str | Path | None = None) -> LearnedModel:
        with open(path or default_model_path(), encoding="utf-8") as file:
            document = json.load(file)
        if document.get("format") != MODEL_FORMAT:
            raise ValueError(f"{path}: not a {MODEL_FORMAT} model file")
        if document.get("feature_version") != FEATURE_VERSION:
            raise ValueError(
                f"{path}: features v{document.get('feature_version')}, code v{FEATURE_VERSION}"
            )
        rule = document.get("second_opinion")
        context = document.get("lightgbm_context") or []
        return cls(
            Booster(document["lightgbm"]),
            threshold=float(document["threshold"]),
            calibration=document.get("calibration"),
            meta=document.get("meta", {}),
            second_opinion=SecondOpinion(**rule) if rule else None,
            context_boosters=[Booster(model) for model in _as_list(context)],
            margin=float(document.get("margin", 0.0)),
        )

    def save(self, path: str | Path) -> None:
        document = {
            "format": MODEL_FORMAT,
            "feature_version": FEATURE_VERSION,
            "feature_names": list(FEATURE_NAMES),
            "threshold": self.threshold,
            "margin": self.margin,
            "calibration": self.calibration,
            "second_opinion": self.second_opinion._asdict() if self.second_opinion else None,
            "meta": self.meta,
            "lightgbm": self.booster.model,
            "lightgbm_context": [booster.model for booster in self.context_boosters],
        }
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            json.dump(document, file)

    def predict(self, features: PageFeatures) -> list[float]:
        """Main probability of every block of a page: the last pass's (the first booster's
        alone in a model without context boosters)."""
        p = self.booster.predict(features.matrix, N_FEATURES)
        contexts: list[array] = []
        for booster in self.context_boosters:
            if not p:
                break
            contexts.append(context_features(p, features))
            p = booster.predict(stacked_rows(features.matrix, contexts), pass_width(len(contexts)))
        return p

    def main_blocks(self, probabilities: Sequence[float]) -> list[bool]:
        """Which blocks are main: p >= the threshold, or within ``margin`` of the page's
        most likely block when that one is main but below threshold + margin."""
        best = max(probabilities, default=0.0)
        floor = self.threshold if best < self.threshold else min(self.threshold, best - self.margin)
        return [p >= floor for p in probabilities]

    def calibrate(self, raw: float) -> float:
        if not self.calibration:
            return raw
        return interpolate(raw, self.calibration["x"], self.calibration["y"])


def _as_list(context: str | list[str]) -> list[str]:
    """A model file's context boosters: a list, or one string (files from before the chain
    of passes had one context pass)."""
    return [context] if isinstance(context, str) else context


def pass_width(contexts: int) -> int:
    """Columns a pass reads after ``contexts`` earlier passes: the block features and each
    earlier pass's context columns."""
    return N_FEATURES + contexts * len(CONTEXT_NAMES)


def context_names(contexts: int) -> list[str]:
    """The column names a pass after ``contexts`` earlier passes reads: the block features,
    ``CONTEXT_NAMES`` for the first pass's columns, ``NAME_passK`` for pass K's."""
    names = list(FEATURE_NAMES)
    for k in range(1, contexts + 1):
        names += CONTEXT_NAMES if k == 1 else [f"{name}_pass{k}" for name in CONTEXT_NAMES]
    return names


def stacked_rows(matrix: array, contexts: Sequence[array]) -> array:
    """Row-major float32 rows of each block's features (``matrix``) followed by its row of
    each of ``contexts`` (``features.context_features``), in order."""
    if not contexts:
        return matrix
    width = len(CONTEXT_NAMES)
    rows = array("f")
    for i in range(len(matrix) // N_FEATURES):
        rows.extend(matrix[i * N_FEATURES : (i + 1) * N_FEATURES])
        for context in contexts:
            rows.extend(context[i * width : (i + 1) * width])
    return rows


def interpolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """The piecewise-linear function through (``xs``, ``ys``) (``xs`` ascending) at ``x``,
    its end values beyond the ends (numpy's ``interp``, to the last bit)."""
    if x < xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    j = bisect_right(xs, x) - 1
    return float((ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j]) + ys[j])


def raw_confidence(probabilities: Sequence[float], matrix: array) -> float:
    """Text-weighted mean of max(p, 1 - p) over the page's blocks."""
    if not probabilities:
        return 0.0
    weights = text_weights(matrix)
    decided = [max(p, 1.0 - p) for p in probabilities]
    return pairwise_sum([w * d for w, d in zip(weights, decided, strict=True)]) / pairwise_sum(
        weights
    )


class LearnedLabeller:
    name = "learned"

    def __init__(
        self,
        model: LearnedModel | str | Path | None = None,
        min_confidence: float | None = None,
        second_opinion: bool | None = None,
        options: LabellerOptions | None = None,
    ) -> None:
        """Arguments left None take ``options.learned`` (``LearnedOptions``), else its
        defaults: no confidence floor, the second opinion on."""
        learned = (options.learned if options is not None else None) or LearnedOptions()
        self.model = model if isinstance(model, LearnedModel) else LearnedModel.load(model)
        self.min_confidence = learned.min_confidence if min_confidence is None else min_confidence
        if second_opinion is None:
            second_opinion = learned.second_opinion
        self.second_opinion = self.model.second_opinion if second_opinion else None

    def label_one(self, page: SimplifiedPage) -> tuple[list[str], float, float]:
        """(labels, calibrated confidence, raw confidence) of one page."""
        features = block_features(page.simplified_html, page.mapping_blocks, page.title, page.hints)
        probabilities = self.model.predict(features)
        main = self.model.main_blocks(probabilities)
        labels = [MAIN if flag else OTHER for flag in main]
        raw = raw_confidence(probabilities, features.matrix)
        confidence = self.model.calibrate(raw) if any(main) else 0.0
        return labels, confidence, raw

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        outcomes = []
        for page in pages:
            started = time.perf_counter()
            labels, confidence, raw = self.label_one(page)
            latency = (time.perf_counter() - started) * 1000
            if self.min_confidence is not None and confidence < self.min_confidence:
                outcomes.append(
                    LabelOutcome(
                        None, failure="low_confidence", latency_ms=latency, confidence=confidence
                    )
                )
            else:
                second = self.second_opinion.ratio(raw) if self.second_opinion else None
                outcomes.append(
                    LabelOutcome(
                        labels, latency_ms=latency, confidence=confidence, second_opinion=second
                    )
                )
        return outcomes
