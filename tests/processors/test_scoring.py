"""Behaviour of the ROUGE-N scoring used for evaluation (dripstream.processors.training.scoring)."""

from __future__ import annotations

import time

import jieba
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dripstream.processors.training.scoring import (
    Score,
    normalise_for_scoring,
    rouge_n,
    score_page,
    tokenize,
)

PLAIN = (
    "Release notes\n\n"
    "The new version is faster and safer than the old one.\n\n"
    "Install it with pip and run the tests again before you upgrade.\n\n"
    "First item of the list\nSecond item of the list\n\n"
    "Quoted words from the author of the project\n\n"
    "for x in range(3): print(x)\n\n"
    "Name Value\nalpha 1\nbeta 2\n\n"
    "Read the documentation site for details and of the pipeline.\n\n"
    "Options - such as snake_case names - are listed: 2 * 3 * 4 stays.\n"
)

MARKDOWN = (
    "# Release notes\n\n"
    "The **new version** is _faster_ and ~~safer~~ than the *old* one.\n\n"
    "Install it with `pip` and run the __tests__ again before you upgrade.\n\n"
    "- First item of the list\n* Second item of the list\n\n"
    "> Quoted words from the author of the project\n\n"
    "```python\nfor x in range(3): print(x)\n```\n\n"
    "| Name | Value |\n|---|:--:|\n| alpha | 1 |\n| beta | 2 |\n\n"
    'Read the [documentation site](https://example.com/docs_(v2) "Docs") for details '
    "and ![a diagram](img/diagram.png) of the pipeline.\n\n"
    "Options \\- such as snake\\_case names \\- are listed: 2 \\* 3 \\* 4 stays.\n"
)


def test_identical_texts_score_one() -> None:
    score = score_page(PLAIN, PLAIN)
    assert score == Score(1.0, 1.0, 1.0)


def test_disjoint_texts_score_zero() -> None:
    score = score_page("alpha beta gamma delta epsilon zeta", "one two three four five six")
    assert score == Score(0.0, 0.0, 0.0)


def test_markdown_scores_one_against_its_plain_text_equivalent() -> None:
    assert normalise_for_scoring(MARKDOWN) == normalise_for_scoring(PLAIN)
    assert score_page(MARKDOWN, PLAIN).f1 == 1.0


@pytest.mark.parametrize(
    ("markdown", "plain"),
    [
        ("## Heading ##", "Heading"),
        ("Title\n=====\n\nBody", "Title\nBody"),
        ("1. one\n2) two\n10. ten", "one two ten"),
        ("- [x] done\n- [ ] open", "done open"),
        ("> > nested quote", "nested quote"),
        ('[text](http://a.b/c) and [ref][1]\n\n[1]: http://a.b "T"', "text and ref"),
        ('text ![alt words](x.png "title") more', "text more"),
        ("[![logo](l.png) home](http://home)", "home"),
        (
            "***both*** and **bold** and __under__ and _em_ and ~~del~~",
            "both and bold and under and em and del",
        ),
        ("a | b\n---|---\n1 | 2", "a b 1 2"),
        ("**More information:**G. Petit *is*the", "More information:G. Petit isthe"),
        ("~~~\ncode line\n~~~", "code line"),
        ("1\\. not a list \\- \\*literal\\* \\# \\[x\\]", "not a list - literal # [x]"),
        ("fish &amp; chips &nbsp;&lt;3", "fish & chips <3"),
        ("<p>para</p><br/>next <https://example.com>", "para next https://example.com"),
        ("note[^1]\n\n[^1]: the footnote", "note the footnote"),
        ("ＡＢＣ　１２３", "ABC 123"),
        ("***\n---\n___", ""),
    ],
)
def test_markdown_syntax_is_stripped_to_its_text(markdown: str, plain: str) -> None:
    assert normalise_for_scoring(markdown) == normalise_for_scoring(plain)


def test_text_that_only_looks_like_markup_is_kept() -> None:
    text = "snake_case __init__x 2 * 3 * 4 C# #hashtag x|y 3.5 million"
    expected = "snake_case __init__x 2 * 3 * 4 C# #hashtag x y 3.5 million"
    assert normalise_for_scoring(text) == expected


def test_case_is_kept_and_whitespace_collapsed() -> None:
    assert normalise_for_scoring("  Hello\t\tWORLD \n\n\n again  ") == "Hello WORLD again"


def test_chinese_text_is_tokenised_into_words() -> None:
    tokens = tokenize("我们在北京大学学习自然语言处理")
    assert "".join(tokens) == "我们在北京大学学习自然语言处理"
    assert 1 < len(tokens) < len("我们在北京大学学习自然语言处理")
    assert "北京大学" in tokens


def test_tokenize_drops_whitespace_and_matches_jieba() -> None:
    text = "Hello, world!  这是一个测试。\n\nThe end 3.5% of C++ code."
    expected = [t for t in jieba.lcut(text) if not t.isspace()]
    assert tokenize(text) == expected
    assert all(t.strip() for t in tokenize(text))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab 北京大学中文。,.\n\t-_*#&%+", max_size=60))
def test_tokenize_equals_jieba_lcut_without_whitespace(text: str) -> None:
    assert tokenize(text) == [t for t in jieba.lcut(text) if not t.isspace()]


def test_extra_candidate_text_lowers_precision_not_recall() -> None:
    gold = "the quick brown fox jumps over the lazy dog near the river bank"
    candidate = gold + " subscribe to our newsletter for more great stories every day"
    score = score_page(candidate, gold)
    assert score.recall == 1.0
    assert score.precision < 1.0
    assert score.precision < score.f1 < score.recall
    swapped = score_page(gold, candidate)
    assert swapped.precision == 1.0
    assert swapped.recall == score.precision


def test_repeated_ngrams_are_clipped() -> None:
    score = rouge_n(["a"] * 10, ["a"] * 3, n=1)
    assert score.precision == pytest.approx(0.3)
    assert score.recall == 1.0


def test_empty_inputs() -> None:
    assert rouge_n([], []) == Score(1.0, 1.0, 1.0)
    assert rouge_n(["a"], []) == Score(0.0, 0.0, 0.0)
    assert rouge_n([], ["a"]) == Score(0.0, 0.0, 0.0)
    assert score_page("", "   \n") == Score(1.0, 1.0, 1.0)
    assert score_page("---\n***\n```", "") == Score(1.0, 1.0, 1.0)


def test_inputs_shorter_than_n_use_smaller_ngrams() -> None:
    assert rouge_n(["a", "b"], ["a", "b"], n=5) == Score(1.0, 1.0, 1.0)
    # n falls back to min(5, 2, 6) = 2: candidate bigram "a b" is in the reference.
    score = rouge_n(["a", "b"], ["x", "a", "b", "y", "z", "w"], n=5)
    assert score.precision == 1.0
    assert score.recall == pytest.approx(1 / 5)
    assert score_page("Hello world", "Hello world").f1 == 1.0
    assert score_page("Hello", "Goodbye").f1 == 0.0


def test_invalid_n_is_rejected() -> None:
    with pytest.raises(ValueError):
        rouge_n(["a"], ["a"], n=0)


def test_long_documents_score_quickly() -> None:
    words = [f"w{i % 5000}" for i in range(100_000)]
    gold = " ".join(words)
    candidate = " ".join(words[1000:] + words[:1000])
    start = time.perf_counter()
    score = score_page(candidate, gold)
    elapsed = time.perf_counter() - start
    assert 0.9 < score.f1 < 1.0
    assert elapsed < 1.0


token_lists = st.lists(st.sampled_from(["a", "b", "c", "d", "北京", "."]), max_size=30)


@settings(max_examples=300, deadline=None)
@given(token_lists, token_lists, st.integers(min_value=1, max_value=6))
def test_scores_are_bounded_and_swap_symmetric(
    candidate: list[str], reference: list[str], n: int
) -> None:
    score = rouge_n(candidate, reference, n)
    for value in (score.precision, score.recall, score.f1):
        assert 0.0 <= value <= 1.0
    swapped = rouge_n(reference, candidate, n)
    assert swapped.f1 == score.f1
    assert swapped.precision == score.recall
    assert swapped.recall == score.precision


markdownish = st.lists(
    st.sampled_from([*"ab 1.\n\t#>-*_~`|[]()!\\&;<>/:=+x北", "&amp;", "```", "](", "<b>"]),
    max_size=50,
).map("".join)


@settings(max_examples=1000, deadline=None)
@given(markdownish)
def test_normalisation_is_idempotent(text: str) -> None:
    once = normalise_for_scoring(text)
    assert normalise_for_scoring(once) == once


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_normalisation_is_idempotent_on_any_text(text: str) -> None:
    once = normalise_for_scoring(text)
    assert normalise_for_scoring(once) == once
    assert once == once.strip()
    assert "  " not in once and "\n" not in once


def test_an_escaped_tag_normalises_like_the_gold_without_a_stray_backslash() -> None:
    from dripstream.processors.training.scoring import normalise_for_scoring

    escaped = normalise_for_scoring(r"Watch \<The Palace: Tale\> tonight")
    assert escaped == normalise_for_scoring("Watch <The Palace: Tale> tonight")
    assert "\\" not in escaped
