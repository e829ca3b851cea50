"""Removing the WebMainBench annotation tool's marks from a page.

The tool leaves ``cc-select="true"`` on selected elements, a ``mark-selected`` class,
``data-anno-uid`` attributes, ``<marked-text>``/``<marked-tail>`` wrapper elements and an
injected ``<style id="cc-extraStyle">``. An extractor under evaluation must see none of
them, or it would see the answer.
"""

from __future__ import annotations

import re

SELECT_ATTR = "cc-select"

_EXTRA_STYLE = re.compile(
    r"<style[^>]*\bid=[\"']?cc-extraStyle[\"']?[^>]*>.*?</style>", re.IGNORECASE | re.DOTALL
)
_ANNO_UID = re.compile(r"\s+data-anno-uid=(?:\"[^\"]*\"|'[^']*'|[^\s>]+)", re.IGNORECASE)
_SELECT = re.compile(r"\s+cc-select=(?:\"[^\"]*\"|'[^']*'|[^\s>]+)", re.IGNORECASE)
_MARKED_TAG = re.compile(r"</?marked-(?:text|tail)\b[^>]*>", re.IGNORECASE)
_MARK_CLASS = re.compile(r"(\sclass=[\"'])([^\"']*)([\"'])", re.IGNORECASE)


def _drop_mark_class(match: re.Match[str]) -> str:
    names = [name for name in match.group(2).split() if name != "mark-selected"]
    return f"{match.group(1)}{' '.join(names)}{match.group(3)}"


def strip_annotation_marks(html: str, keep_selection: bool = False) -> str:
    """Remove every annotation mark; with ``keep_selection`` keep ``cc-select`` only.

    The wrapper elements are unwrapped (their text stays). ``keep_selection`` is for the
    oracle labeller, which reads the selection and nothing else: it keeps ``cc-select``
    and the wrappers that carry it (inline elements, so segmentation is unchanged); the
    selection attribute never reaches either branch (attributes are pruned there).
    """
    html = _EXTRA_STYLE.sub("", html)
    html = _ANNO_UID.sub("", html)
    if "mark-selected" in html:
        html = _MARK_CLASS.sub(_drop_mark_class, html)
    if not keep_selection:
        html = _SELECT.sub("", html)
        if "marked-" in html:
            html = _MARKED_TAG.sub("", html)
    return html


def has_annotation(html: str) -> bool:
    return SELECT_ATTR in html
