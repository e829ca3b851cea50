"""Block labels derived from gold text (dripstream.processors.training.labels)."""

from __future__ import annotations

import json
from pathlib import Path

from dripstream.processors.training.labels import (
    agreement_with_marks,
    derive_block_labels,
    derive_labels,
)
from dripstream.topics.records import MAIN, OTHER

ARTICLE = [
    "<p>Home About Contact Login</p>",
    "<h1>Rivers of the northern plains</h1>",
    "<p>The rivers of the northern plains carry snow melt from the mountains every spring.</p>",
    "<img src='a.png'>",
    "<h2>Floods</h2>",
    "<p>When the melt comes early the lower valleys flood and the farms move their herds.</p>",
    "<p>Related: The rivers of the northern plains carry snow melt from the mountains</p>",
    "<p>Copyright 2026 Example Media, all rights reserved.</p>",
]
GOLD = (
    "Rivers of the northern plains\n\nThe rivers of the northern plains carry snow melt from "
    "the mountains every spring.\n\nFloods\n\nWhen the melt comes early the lower valleys "
    "flood and the farms move their herds."
)


def test_blocks_whose_text_the_gold_holds_in_order_are_main() -> None:
    labels = derive_block_labels(ARTICLE, GOLD)
    assert labels == [OTHER, MAIN, MAIN, MAIN, MAIN, MAIN, OTHER, OTHER]


def test_a_repeat_of_text_already_placed_is_other() -> None:
    labels = derive_block_labels(ARTICLE, GOLD)
    assert labels[6] == OTHER  # the teaser repeating the lead


def test_a_short_block_is_main_only_where_the_gold_has_it() -> None:
    blocks = ["<p>Floods</p>", *ARTICLE[1:3], "<h2>Floods</h2>", ARTICLE[5]]
    labels = derive_block_labels(blocks, GOLD)
    assert labels == [OTHER, MAIN, MAIN, MAIN, MAIN]


def test_empty_gold_labels_everything_other() -> None:
    assert set(derive_block_labels(ARTICLE, "")) == {OTHER}


def test_derive_labels_writes_labelled_records(tmp_path: Path) -> None:
    html = "<html><body>" + "".join(ARTICLE) + "</body></html>"
    rows = [
        {
            "id": "p1",
            "url": "https://example.org/a",
            "html": html,
            "gold_markdown_or_text": GOLD,
            "meta": {"page_type": "article"},
        }
    ]
    out = tmp_path / "labelled.jsonl"
    report = derive_labels(rows, out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert report.pages == 1 and len(records) == 1
    record = records[0]
    assert record["labeller"] == "gold"
    assert len(record["labels"]) == len(record["mapping_blocks"]) == report.blocks
    assert record["labels"].count(MAIN) == report.main_blocks >= 4
    assert {"page_id", "url", "title", "mapping_blocks", "labels"} <= set(record)


def test_derived_labels_agree_with_the_human_marks(data_dir: Path) -> None:
    with open(data_dir / "webmainbench_sample.jsonl", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    agreement = agreement_with_marks(rows)
    assert agreement.pages == 9
    assert agreement.accuracy >= 0.97
    assert agreement.main_precision >= 0.97 and agreement.main_recall >= 0.95
