"""The fallback extractor: trafilatura on the page's HTML, Markdown out.

It extracts the pages the pipeline routes to the fallback (in process, or in the stream's
fallback stage), and the learned labeller's second opinion. trafilatura is imported on
first use (``load_extractor``): a process that never falls back does not pay for it."""

from __future__ import annotations

import contextlib
import logging
from functools import lru_cache
from typing import Any

from dripstream.processors.errors import NothingSelected

EXTRACTOR = "fallback:trafilatura"
# Short enough that trafilatura tries its backup extractors on it (see warm_up_extractor).
WARM_UP_PAGE = "<html><body><p>A short page.</p></body></html>"


@lru_cache(maxsize=1)
def load_extractor() -> Any:
    """trafilatura, imported once."""
    import trafilatura

    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    return trafilatura


def warm_up_extractor() -> None:
    """Import trafilatura and extract one short page, which builds what its backup
    extractors load on first use (jusText's stop words of every language): run in a
    sandbox's zygote, the children forked after it share that state instead of each
    building it."""
    with contextlib.suppress(NothingSelected):
        fallback_markdown(WARM_UP_PAGE)


def fallback_markdown(html: str, url: str | None = None, fast: bool = False) -> str:
    """Markdown of the page's main content by trafilatura; raises NothingSelected if empty.
    ``fast``: trafilatura's fast mode, without its backup extractors (readability, jusText)
    that it otherwise runs when its own result looks short; the learned labeller's second
    opinion runs this way (its rule is fitted on this mode's output)."""
    markdown = load_extractor().extract(
        html,
        url=url,
        output_format="markdown",
        include_tables=True,
        include_images=False,
        include_links=False,
        favor_recall=False,
        fast=fast,
    )
    if not markdown or not markdown.strip():
        raise NothingSelected("the fallback extractor found no main content")
    return markdown.strip()
