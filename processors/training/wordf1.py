"""WCXB's own metric: word-level F1 plus must-have / must-not-have snippet rates.

Definitions (the same on extraction and gold, applied to the text as it is; Markdown
syntax is taken out first with ``scoring.normalise_for_scoring``, so a
``#`` or a link target in our Markdown does not count as words):

* tokens: ``re.findall(r"\\w+", text.lower())`` (Unicode word characters, so digits and
  non-Latin letters count; punctuation never does);
* word F1: bag-of-words overlap, ``overlap = sum(min(count_extraction[w], count_gold[w]))``,
  precision = overlap / extraction tokens, recall = overlap / gold tokens, F1 their
  harmonic mean; both empty scores 1, exactly one empty scores 0. The dataset figure is
  the mean over pages (reported per ``meta.page_type``);
* a snippet (``meta.with`` / ``meta.without``) is *present* when its token sequence, joined
  by single spaces, occurs in the extraction's token sequence joined the same way (token
  boundaries respected); ``with_found`` is the share of a page's must-have snippets that
  are present, ``without_leaked`` the share of its must-not-have snippets that are present.
  A page without snippets of a kind has ``None`` for that rate and is left out of its mean.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from dripstream.processors.training.scoring import normalise_for_scoring

__all__ = ["WordScore", "snippet_rate", "word_f1", "word_score", "word_tokens"]

_WORD = re.compile(r"\w+")


def word_tokens(text: str) -> list[str]:
    """Lower-cased ``\\w+`` tokens of ``text``."""
    return _WORD.findall(text.lower())


def word_f1(candidate: Sequence[str], reference: Sequence[str]) -> tuple[float, float, float]:
    """(precision, recall, F1) of the bag-of-words overlap of two token lists."""
    if not candidate and not reference:
        return 1.0, 1.0, 1.0
    if not candidate or not reference:
        return 0.0, 0.0, 0.0
    small, big = (
        (Counter(candidate), Counter(reference))
        if len(candidate) <= len(reference)
        else (Counter(reference), Counter(candidate))
    )
    overlap = sum(min(count, big[word]) for word, count in small.items())
    precision = overlap / len(candidate)
    recall = overlap / len(reference)
    f1 = 2 * overlap / (len(candidate) + len(reference))
    return precision, recall, f1


def snippet_rate(joined_tokens: str, snippets: Sequence[str]) -> float | None:
    """Share of ``snippets`` present in ``joined_tokens`` (``" ".join(tokens)``)."""
    wanted = [" ".join(word_tokens(snippet)) for snippet in snippets]
    wanted = [snippet for snippet in wanted if snippet]
    if not wanted:
        return None
    padded = f" {joined_tokens} "
    return sum(f" {snippet} " in padded for snippet in wanted) / len(wanted)


@dataclass(frozen=True, slots=True)
class WordScore:
    precision: float
    recall: float
    f1: float
    with_found: float | None
    without_leaked: float | None


def word_score(
    extraction: str,
    gold: str,
    with_snippets: Sequence[str] = (),
    without_snippets: Sequence[str] = (),
    markdown: bool = True,
) -> WordScore:
    """WCXB word F1 and snippet rates of one page (Markdown syntax removed first)."""
    if markdown:
        extraction = normalise_for_scoring(extraction)
    candidate = word_tokens(extraction)
    precision, recall, f1 = word_f1(candidate, word_tokens(gold))
    joined = " ".join(candidate)
    return WordScore(
        precision,
        recall,
        f1,
        snippet_rate(joined, with_snippets),
        snippet_rate(joined, without_snippets),
    )
