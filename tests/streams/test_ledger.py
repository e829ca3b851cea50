"""The ledger counts per produced message, so a URL crawled twice cannot hide a loss."""

from __future__ import annotations

from dripstream.streams.envelope import SOURCE_HEADER
from dripstream.streams.tools import TopicMessage, compute_ledger
from dripstream.topics.catalog import RECORDS


def output(source: bytes) -> TopicMessage:
    return TopicMessage(RECORDS, 0, 0, b"k", b'{"extractor":"dripper"}', {SOURCE_HEADER: source})


def test_two_inputs_of_one_url_with_one_output_count_one_lost() -> None:
    produced = [b"run-0", b"run-1"]  # produce ids of two messages keyed by the same URL
    ledger = compute_ledger(produced, [output(b"run-0")], 1.0)
    assert (ledger.produced, ledger.records, ledger.lost) == (2, 1, 1)


def test_a_redelivered_input_counts_as_a_duplicate_not_a_second_input() -> None:
    ledger = compute_ledger([b"run-0"], [output(b"run-0"), output(b"run-0")], 1.0)
    assert (ledger.lost, ledger.duplicates) == (0, 1)
