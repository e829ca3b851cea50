"""Labels + mapping blocks -> Markdown, and the failures that route a page to fallback."""

from __future__ import annotations

import pytest

from dripstream.processors.errors import LabelMismatch, NothingSelected
from dripstream.processors.extract.reconstruct import reconstruct
from dripstream.topics.records import MAIN, OTHER

BLOCKS = [
    '<h1 _item_id="1">Title</h1>',
    '<p _item_id="2">Menu link</p>',
    '<p _item_id="3">First <a href="/x">paragraph</a>.</p>',
    '<p _item_id="4">Second paragraph.</p>',
    '<p _item_id="5">Footer</p>',
]


def test_nothing_selected_raises() -> None:
    with pytest.raises(NothingSelected):
        reconstruct(BLOCKS, [OTHER] * len(BLOCKS))


def test_selected_blocks_without_text_raise() -> None:
    blocks = ['<p _item_id="1"> </p>', '<div _item_id="2"><span></span></div>', "<p>text</p>"]
    with pytest.raises(NothingSelected, match="2 selected blocks hold no text"):
        reconstruct(blocks, [MAIN, MAIN, OTHER])


@pytest.mark.parametrize("count", [0, 4, 6])
def test_wrong_label_count_raises(count: int) -> None:
    with pytest.raises(LabelMismatch):
        reconstruct(BLOCKS, [MAIN] * count)


def test_unknown_labels_are_not_main() -> None:
    with pytest.raises(NothingSelected):
        reconstruct(BLOCKS, ["MAIN", "yes", "1", "", "other"])


def test_selected_blocks_keep_document_order() -> None:
    result = reconstruct(BLOCKS, [MAIN, OTHER, MAIN, MAIN, OTHER], base_url="https://e.com/a/")
    assert result.markdown == (
        "# Title\n\nFirst [paragraph](https://e.com/x).\n\nSecond paragraph."
    )
    assert result.main_blocks == 3


def test_only_main_blocks_are_in_the_markdown() -> None:
    result = reconstruct(BLOCKS, [OTHER, MAIN, OTHER, OTHER, MAIN])
    assert result.markdown == "Menu link\n\nFooter"
    assert result.main_blocks == 2
