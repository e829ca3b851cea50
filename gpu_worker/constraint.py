"""The answer a page may get: its regex (ids in order), token cap, and parser.

``json``:    ``{"1":"main","2":"other",...,"N":"main"}`` (no spaces)
``compact``: ``<answer>1main2other...Nmain</answer>``

The regex lists the page's own ids, so a constrained decoder can emit nothing but one
label per block, in order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dripstream.gpu_worker.profiles import OutputFormat


class AnswerError(ValueError):
    """An answer that is not one label per block in order; ``reason`` names why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _parts(output_format: OutputFormat) -> tuple[str, str, str, str]:
    """(opening, per-block pattern with {id} and {label}, separator, closing)."""
    if output_format == "json":
        return "{", '"{id}":"{label}"', ",", "}"
    return "<answer>", "{id}{label}", "", "</answer>"


def answer_regex(output_format: OutputFormat, block_count: int, labels: Sequence[str]) -> str:
    """The regex of the one well-formed answer shape for ``block_count`` blocks."""
    opening, item, separator, closing = _parts(output_format)
    choice = "(" + "|".join(re.escape(label) for label in labels) + ")"
    items = (
        re.escape(item.format(id=index, label="\0")).replace("\0", choice)
        for index in range(1, block_count + 1)
    )
    return re.escape(opening) + re.escape(separator).join(items) + re.escape(closing)


def format_answer(output_format: OutputFormat, labels: Sequence[str]) -> str:
    """The canonical answer text for ``labels`` (block 1 first)."""
    opening, item, separator, closing = _parts(output_format)
    items = (item.format(id=index, label=label) for index, label in enumerate(labels, 1))
    return opening + separator.join(items) + closing


def max_answer_tokens(output_format: OutputFormat, block_count: int, labels: Sequence[str]) -> int:
    """Characters of the longest allowed answer, + 1 for the end token: every token of an
    ASCII answer covers at least one character, so the constrained answer always fits."""
    opening, item, separator, closing = _parts(output_format)
    longest = max(len(label) for label in labels)
    per_item = len(item.format(id="", label="")) + longest
    digits = sum(len(str(index)) for index in range(1, block_count + 1))
    separators = len(separator) * max(block_count - 1, 0)
    return len(opening) + block_count * per_item + digits + separators + len(closing) + 1


def parse_answer(
    output_format: OutputFormat, text: str, block_count: int, labels: Sequence[str]
) -> list[str]:
    """One label per block, in id order; raises ``AnswerError`` otherwise."""
    text = text.strip()
    opening, item, separator, closing = _parts(output_format)
    if not (text.startswith(opening) and text.endswith(closing)):
        raise AnswerError("answer_malformed", f"not enclosed in {opening}...{closing}")
    body = text[len(opening) : len(text) - len(closing)]
    pattern = re.compile(
        re.escape(item.format(id="\1", label="\2"))
        .replace("\x01", r"(\d+)")
        .replace("\x02", "(" + "|".join(re.escape(label) for label in labels) + ")")
    )
    found: list[str] = []
    position = 0
    while position < len(body):
        if found and separator:
            if not body.startswith(separator, position):
                raise AnswerError("answer_malformed", f"no separator at character {position}")
            position += len(separator)
        match = pattern.match(body, position)
        if match is None:
            raise AnswerError("answer_malformed", f"unreadable at character {position}")
        if int(match.group(1)) != len(found) + 1:
            raise AnswerError("answer_ids_out_of_order", f"id {match.group(1)} at {len(found) + 1}")
        found.append(match.group(2))
        position = match.end()
    if len(found) != block_count:
        raise AnswerError("answer_incomplete", f"{len(found)} labels for {block_count} blocks")
    return found
