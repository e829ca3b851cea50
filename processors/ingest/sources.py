"""Readers of crawl output: files in, an iterator of pages out, in constant memory.

One reader per input form; ``read_pages`` picks by the path:

- ``-``: one HTML document on standard input;
- a folder: every ``*.html`` / ``*.htm`` / ``*.xhtml`` below it, in name order;
- ``*.jsonl`` (also ``.jsonl.gz`` / ``.jsonl.xz``): one JSON object a line, with ``url``
  (or ``id``) and ``html`` as text, or a Scrapy-style item (``url``, ``body``, ``headers``,
  ``status``; a base64 ``body`` with ``"body_encoding": "base64"``); ``status``,
  ``fetched_at`` (epoch or ISO-8601), ``crawl_id``, ``content_type`` and ``headers`` are
  kept when present (``dripstream.processors.ingest.crawl.page_from_item``);
- ``*.warc`` / ``*.warc.gz``: the HTML response records, and the 404/410 ones (pages
  gone), with their HTTP status, headers and ``WARC-Date``; revisits resolved against
  the file's own responses, truncated records flagged (fastwarc, streamed; HTTP bodies
  are decoded later, in the pipeline: ``dripstream.processors.ingest.crawl``);
- anything else: one HTML file.

Every reader streams: a file is never loaded whole (except one HTML document), so memory
stays flat whatever the input's size. A record larger than ``MAX_RECORD_BYTES`` (a JSONL
line, a WARC record's content, counted as it is decompressed) is never held: it is that
record's ``TooLarge`` error (``InputPage.error``), and the rest of the file goes on.
``extract``, ``eval`` and ``produce`` all read through here. Adding a source: a reader
function and one branch in ``read_pages``.
"""

from __future__ import annotations

import gzip
import json
import lzma
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from dripstream.processors.errors import PageError, TooLarge
from dripstream.processors.ingest.crawl import MAX_BODY_BYTES, page_from_item, warc_pages
from dripstream.topics.records import RawPage

MAX_RECORD_BYTES = MAX_BODY_BYTES  # a JSONL line, a WARC record's content
_SKIP_BYTES = 1024 * 1024  # an oversized line is skipped in pieces of this size
_READ_BUFFER = 1024 * 1024  # a plain file's read buffer: a page's line in a few reads

HTML_SUFFIXES = (".html", ".htm", ".xhtml")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.xz")
WARC_SUFFIXES = (".warc", ".warc.gz")


class SourceError(ValueError):
    """An input file that cannot be read as the form its name says."""


@dataclass(frozen=True)
class InputPage:
    """A page as read, with the input's own id and, for datasets, the whole row."""

    raw: RawPage
    id: str | None = None
    row: dict[str, Any] = field(default_factory=dict)
    error: PageError | None = None
    """Set when the record could not be read as a page: its outcome is this error."""


def open_lines(path: Path) -> IO[bytes]:
    """A binary stream of a plain, gzip or xz file (JSON lines are decoded as UTF-8 by
    the JSON parser)."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.name.endswith(".xz"):
        return lzma.open(path, "rb")
    return path.open("rb", buffering=_READ_BUFFER)


def bounded_lines(stream: IO[bytes], limit: int = MAX_RECORD_BYTES) -> Iterator[bytes | TooLarge]:
    """The lines of ``stream``, each read with at most ``limit`` bytes held; a longer
    line is skipped in pieces and given as its ``TooLarge`` error."""
    while line := stream.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        del line
        while piece := stream.readline(_SKIP_BYTES):
            size += len(piece)
            if piece.endswith(b"\n"):
                break
        yield TooLarge(f"a line of {size} bytes, more than {limit}")


def parse_rows(lines: Iterable[bytes | TooLarge], where: str) -> Iterator[dict[str, Any]]:
    """JSON objects, one a line; raises SourceError naming ``where`` and the line, for a
    line that is not a JSON object or is too large (see ``row_results``)."""
    for number, row in row_results(lines, where):
        if isinstance(row, TooLarge):
            raise SourceError(f"{where}:{number}: {row}")
        yield row


def row_results(
    lines: Iterable[bytes | TooLarge], where: str
) -> Iterator[tuple[int, dict[str, Any] | TooLarge]]:
    """(line number, JSON object) for each non-blank line; a line too large to read
    (``bounded_lines``) comes as its ``TooLarge``, and one that is not a JSON object raises
    SourceError naming ``where`` and the line.

    JSON may escape a lone surrogate (``\\ud800``), which no UTF-8 output can hold: in
    every field but the page itself (``html``, ``body``: bytes from here on) it becomes
    U+FFFD, so a record can always be written."""
    for number, line in enumerate(lines, 1):
        if isinstance(line, TooLarge):
            yield number, line
            continue
        if not line or line.isspace():
            continue
        try:
            row = _json_object(line)
        except json.JSONDecodeError as error:
            raise SourceError(f"{where}:{number}: not a JSON object: {error}") from None
        if not isinstance(row, dict):
            raise SourceError(f"{where}:{number}: not a JSON object")
        yield number, row


PAGE_FIELDS = frozenset(("html", "body"))
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate of its strings (keys included) as U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(item) for key, item in value.items()}
    return value


def read_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a (plain, gzip or xz) JSONL file."""
    path = Path(path)
    with open_lines(path) as lines:
        yield from parse_rows(bounded_lines(lines), str(path))


def _json_object(line: bytes) -> Any:
    """``json.loads(line)``, by msgspec's faster parser where it accepts the line; what it
    refuses (a lone surrogate escape, ``NaN``, an integer past 64 bits, malformed JSON or
    UTF-8) goes to ``json.loads``, whose value or error stands, and an object's lone
    surrogates become U+FFFD outside the page fields."""
    try:
        return msgspec.json.decode(line)
    except msgspec.MsgspecError:
        value = json.loads(line)
    if isinstance(value, dict) and _SURROGATE_ESCAPE.search(line):
        return {
            _without_surrogates(name): item if name in PAGE_FIELDS else _without_surrogates(item)
            for name, item in value.items()
        }
    return value


def raw_page_from_row(row: dict[str, Any], html: str | None = None) -> RawPage:
    """A dataset or crawl row (the RawPage form or a Scrapy-style item) as a RawPage;
    ``html`` replaces the row's page (cleaned copies). Raises ValueError for a field that
    cannot be read."""
    return page_from_item(row, html)


def jsonl_pages(lines: IO[bytes], where: str) -> Iterator[InputPage]:
    """The pages of JSON lines (a file, standard input), each line read bounded: a line
    too large is that row's ``TooLarge`` (``InputPage.error``)."""
    for number, row in row_results(bounded_lines(lines), where):
        if isinstance(row, TooLarge):
            yield InputPage(RawPage(url="", html=b""), f"{where}:{number}", error=row)
            continue
        page_id = row.get("id")
        try:
            raw = raw_page_from_row(row)
        except ValueError as error:
            raise SourceError(f"{where}: row {number}: {error}") from None
        yield InputPage(raw, str(page_id) if page_id is not None else None, row)


def _jsonl_pages(path: Path) -> Iterator[InputPage]:
    with open_lines(path) as lines:
        yield from jsonl_pages(lines, str(path))


def _warc_pages(path: Path, skipped: Counter[str] | None) -> Iterator[InputPage]:
    with path.open("rb") as stream:
        for record_id, raw in warc_pages(stream, max_bytes=MAX_RECORD_BYTES, skipped=skipped):
            if isinstance(raw, PageError):
                yield InputPage(RawPage(url="", html=b""), record_id, error=raw)
            else:
                yield InputPage(raw, record_id)


def _html_file(path: Path) -> InputPage:
    return InputPage(RawPage(url=path.resolve().as_uri(), html=path.read_bytes()), str(path))


def read_pages(
    source: str,
    url: str | None = None,
    charset: str | None = None,
    skipped: Counter[str] | None = None,
) -> Iterator[InputPage]:
    """The pages of one source (see the module docstring); ``url`` and ``charset`` apply
    to a single HTML document (a file or standard input). WARC records that are not
    pages but might have been (revisits without their response, segments, other
    content types: ``crawl.warc_pages``) are counted in ``skipped`` by reason."""
    if source == "-":
        yield InputPage(RawPage(url=url or "stdin:", html=sys.stdin.buffer.read(), charset=charset))
        return
    path = Path(source)
    if not path.exists():
        raise SourceError(f"{source}: no such file or folder")
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.suffix.lower() in HTML_SUFFIXES and child.is_file():
                yield _html_file(child)
    elif path.name.endswith(WARC_SUFFIXES):
        yield from _warc_pages(path, skipped)
    elif path.name.endswith(JSONL_SUFFIXES):
        yield from _jsonl_pages(path)
    else:
        page = _html_file(path)
        if url or charset:
            page = InputPage(
                RawPage(url=url or page.raw.url, html=page.raw.html, charset=charset), page.id
            )
        yield page


def skipped_summary(skipped: Counter[str]) -> str | None:
    """The ``skipped: N reason, ...`` line for input records that were not pages (most
    first), or None when none was skipped."""
    if not skipped:
        return None
    return "skipped: " + ", ".join(f"{count} {reason}" for reason, count in skipped.most_common())
