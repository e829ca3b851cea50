"""Labels + mapping blocks -> Markdown (post-processing)."""

from __future__ import annotations

from dataclasses import dataclass

from dripstream.processors.errors import LabelMismatch, NothingSelected
from dripstream.processors.extract.markdown import html_to_markdown
from dripstream.topics.records import MAIN


@dataclass(frozen=True)
class Reconstruction:
    markdown: str
    main_blocks: int


def reconstruct(
    mapping_blocks: list[str], labels: list[str], base_url: str | None = None
) -> Reconstruction:
    """Join the blocks labelled main and convert them to Markdown.

    Raises LabelMismatch when the labels do not align with the blocks and NothingSelected
    when no selected block holds content, so the caller can route the page to fallback.
    """
    if len(labels) != len(mapping_blocks):
        raise LabelMismatch(f"{len(labels)} labels for {len(mapping_blocks)} blocks")
    selected = [block for block, label in zip(mapping_blocks, labels, strict=True) if label == MAIN]
    if not selected:
        raise NothingSelected("no block was labelled main")
    markdown = html_to_markdown("".join(selected), base_url)
    if not markdown:
        raise NothingSelected(f"{len(selected)} selected blocks hold no text")
    return Reconstruction(markdown, len(selected))
