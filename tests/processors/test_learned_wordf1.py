"""WCXB's metric: word F1 over lower-cased \\w+ tokens and snippet rates."""

from __future__ import annotations

import pytest

from dripstream.processors.training.wordf1 import snippet_rate, word_f1, word_score, word_tokens


def test_tokens_are_lower_cased_word_runs() -> None:
    assert word_tokens("Hello, World! It's 2026.") == ["hello", "world", "it", "s", "2026"]


def test_word_f1_is_bag_of_words_overlap() -> None:
    precision, recall, f1 = word_f1(["a", "b", "b", "c"], ["b", "c", "d"])
    assert precision == pytest.approx(2 / 4)
    assert recall == pytest.approx(2 / 3)
    assert f1 == pytest.approx(2 * 2 / 7)
    assert word_f1([], []) == (1.0, 1.0, 1.0)
    assert word_f1(["a"], []) == (0.0, 0.0, 0.0)


def test_markdown_syntax_does_not_count_as_words() -> None:
    score = word_score("# Title\n\nSee [the docs](https://example.org/x).", "Title See the docs")
    assert score.f1 == pytest.approx(1.0)


def test_snippets_match_on_token_boundaries() -> None:
    joined = " ".join(word_tokens("Subscribe to our newsletter today"))
    assert snippet_rate(joined, ["our newsletter", "cookie policy"]) == 0.5
    assert snippet_rate(joined, ["newslet"]) == 0.0
    assert snippet_rate(joined, []) is None


def test_word_score_reports_with_and_without_rates() -> None:
    score = word_score(
        "The article body. Share this!",
        "The article body.",
        with_snippets=["article body"],
        without_snippets=["share this", "log in"],
    )
    assert score.with_found == 1.0
    assert score.without_leaked == 0.5


def test_a_page_is_scored_by_its_files_metric() -> None:
    """Benchmarks score news pages by ROUGE-5 and WCXB pages by word F1 with snippets."""
    from dripstream.processors.training.scoring import score_page
    from dripstream.processors.training.train import page_metric

    gold = "one two three four five six seven eight"
    text = "one two three four five six eight seven"
    meta = {"with": ["one two"], "without": ["nine"]}
    assert page_metric(text, gold, meta, rouge=True) == score_page(text, gold).f1
    assert (
        page_metric(text, gold, meta, rouge=False)
        == word_score(text, gold, ["one two"], ["nine"]).f1
    )
    assert page_metric(text, gold, meta, rouge=True) < page_metric(text, gold, meta, rouge=False)
