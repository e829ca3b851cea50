"""Would site-level boilerplate removal help the learned labeller? (measured, not shipped)

A classic signal on whole-site crawls: text that recurs on many pages of one site is
boilerplate (menus, footers, "related" boxes). This replays the shared sites' pages in
crawl order (``template_cache.sites``: every registrable domain with >= 2 pages) and,
after the learned labeller, turns to *other* each main block whose text (tags stripped,
whitespace collapsed, lower-cased, at least ``--min-chars`` long) was on at least ``k``
earlier pages of the same site. Reported per file and rule: the mean change of ROUGE-5
and of WCXB word F1 against gold over all the sites' pages (Markdown from the labels
alone, no fallback), and how many demoted blocks the gold-derived labels
(``dripstream.processors.training.labels``) call main or other.

    .venv/bin/python benchmarks/repeated_text.py
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict

from template_cache import markdown_of, rows_of, sites, teacher_settings

from dripstream.processors.extract.html_tags import block_text
from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.registry import build_labeller
from dripstream.processors.pipeline import simplify_page
from dripstream.processors.training.labels import derive_block_labels
from dripstream.processors.training.scoring import score_page
from dripstream.processors.training.wordf1 import word_score
from dripstream.topics.records import MAIN, OTHER, SimplifiedPage

_WHITESPACE = re.compile(r"\s+")


def _text_key(mapping_block: str) -> str:
    return _WHITESPACE.sub(" ", block_text(mapping_block)).strip().lower()


def replay(rows: list[dict], rules: list[tuple[int, int]]) -> dict[str, object]:
    teacher = build_labeller("learned")
    settings = teacher_settings("learned")
    gains: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    demoted: Counter[str] = Counter()
    pages = 0
    for site_pages in sites(rows, 2).values():
        seen: Counter[str] = Counter()  # text -> earlier pages of the site that had it
        for row in site_pages:
            page = simplify_page(raw_page_from_row(row), settings)
            if not isinstance(page, SimplifiedPage):
                continue
            [outcome] = teacher.label([page])
            if outcome.labels is None:
                continue
            gold = row.get("gold_markdown_or_text") or ""
            texts = [_text_key(block) for block in page.mapping_blocks]
            derived = derive_block_labels(page.mapping_blocks, gold)

            def scores(labels: list[str], gold: str = gold, page=page) -> tuple[float, float]:
                markdown = markdown_of(page, labels)
                return score_page(markdown, gold).f1, word_score(markdown, gold).f1

            base = scores(list(outcome.labels))
            for k, min_chars in rules:
                labels = list(outcome.labels)
                hits = [
                    i
                    for i, text in enumerate(texts)
                    if labels[i] == MAIN and len(text) >= min_chars and seen[text] >= k
                ]
                for i in hits:
                    labels[i] = OTHER
                    demoted[f"k={k} min={min_chars}: gold {derived[i]}"] += 1
                rouge, words = scores(labels) if hits else base
                gains[(k, min_chars)][0] += rouge - base[0]
                gains[(k, min_chars)][1] += words - base[1]
            pages += 1
            seen.update({text for text in texts if text})
    return {
        "pages": pages,
        "mean_gain_rouge5_wordf1": {
            f"k={k} min={m}": [round(g / max(pages, 1), 4) for g in gain]
            for (k, m), gain in gains.items()
        },
        "demoted_blocks": dict(sorted(demoted.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--min-chars", type=int, nargs="+", default=[20, 50])
    args = parser.parse_args()
    rules = [(k, m) for k in args.k for m in args.min_chars]
    for name in ("publishers_dev.jsonl", "wcxb_dev.jsonl.xz"):
        print(name, json.dumps(replay(rows_of(name), rules)), flush=True)


if __name__ == "__main__":
    main()
