"""Typed, classified failures of the CPU stages.

Every failure a page can cause is one of these; the stream turns them into dead letters
(or fallback records) with ``error_class`` = the class name and ``reason`` = a short code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class PageError(Exception):
    """Base class: a page that cannot be processed, with a stable reason code."""

    reason = "page_error"


class EmptyDocument(PageError):
    reason = "empty_document"


class NotHtml(PageError):
    reason = "not_html"


class ErrorStatus(PageError):
    """The crawler's HTTP status says the body is not the page's content (a redirect, an
    error page: any status outside 2xx but 404/410, which mean gone)."""

    reason = "http_status"


class TooLarge(PageError):
    """The input is larger than a page may be: its bytes, its decoded body in any coding,
    or what decoding it needs (``decoding``)."""

    reason = "too_large"


@contextmanager
def decoding(what: str) -> Iterator[None]:
    """Undoing an input's encodings (JSON, base64, HTTP codings, charset) that runs out of
    the page's memory means the input is too large: ``TooLarge``, the same class whatever
    the encoding, not a fault of the page's processing (``PageMemoryExceeded``)."""
    try:
        yield
    except MemoryError:
        raise TooLarge(f"decoding {what} needs more than a page's memory") from None


class TooDeep(PageError):
    reason = "too_deep"


class TooManyElements(PageError):
    reason = "too_many_elements"


class PageTimeout(PageError):
    reason = "timeout"


class NothingSelected(PageError):
    """The labels selected no block with content: the caller routes to fallback."""

    reason = "nothing_selected"


class LabelMismatch(PageError):
    """The labeller returned a label count that does not match the block count."""

    reason = "label_mismatch"


class NotAnnotated(PageError):
    """The oracle labeller was given a page without annotation marks."""

    reason = "not_annotated"


class PageMemoryExceeded(PageError):
    """The page's work needed more memory than the per-page limit (sandbox)."""

    reason = "memory_limit"


class WorkerCrashed(PageError):
    """The page's work ended its child process or raised an unexpected error."""

    reason = "crashed"


class SourceExpired(PageError):
    """The fallback stage could not fetch the original page: the pages topic's
    retention (or a deletion) removed it before the fallback ran."""

    reason = "source_expired"


class OutputTooLarge(PageError):
    """A stage's output is larger than a Kafka message may be."""

    reason = "output_too_large"
