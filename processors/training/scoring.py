"""ROUGE-N scoring of extracted Markdown against gold Markdown or plain text.

This is the evaluation used by the Dripper paper: bring candidate and gold to
one canonical text form, tokenise with jieba, compute ROUGE-N F1 with N=5 and
average over pages.  The candidate (our Markdown) and the gold (Markdown or
plain text) go through exactly the same :func:`normalise_for_scoring`.

Canonical text form (``normalise_for_scoring``)
-----------------------------------------------
Preparation:

1. Line breaks ``\\r\\n`` and ``\\r`` become ``\\n``.
2. HTML character references are unescaped (``&amp;`` -> ``&``, ``&#39;`` -> ``'``).
3. Unicode NFKC normalisation (full-width forms, ligatures, ``\\xa0`` -> space).
4. Every whitespace character other than ``\\n`` becomes a plain space.

Whole lines that are pure Markdown structure are dropped:

5. Code fence lines (a line that starts with ```` ``` ```` or ``~~~``); the code
   between fences is kept as text.
6. Table separator rows (``|---|:--:|``, ``---|---``), thematic breaks
   (``---``, ``***``, ``___``) and setext heading underlines (``===``).
7. Reference-link definitions (``[id]: https://... "title"``).

Line prefixes are stripped, repeatedly, at the start of every line:

8. Heading hashes (``#`` .. ``######`` followed by a space or the line end) and
   closing hashes of such headings (``## Title ##``).
9. Blockquote markers (``>``).
10. List bullets (``-``, ``*``, ``+``, ``•``) and numbers (``1.``, ``1)``), each
    followed by a space, and task-list boxes (``[ ]``, ``[x]``).
11. Footnote definition labels (``[^1]:``); the footnote text is kept.

Inline syntax:

12. HTML comments are removed; autolinks ``<https://...>`` keep their address;
    any other HTML tag (``<br>``, ``<span class=x>``) becomes a space. A tag the
    converter escaped (``\\<Title\\>``) is left to rule 17 first, then goes the same way,
    so no stray backslash is left where the gold has none.
13. Images ``![alt](src "title")`` are removed (WebMainBench's gold Markdown carries
    no images, not even for selected ones, and text gold has none); links ``[text](url)`` become
    ``text``; reference links ``[text][id]`` / ``[text][]`` become ``text``;
    footnote references ``[^1]`` are removed.
14. Code spans lose their backticks (```` `x` ```` -> ``x``).
15. Emphasis markers ``**``, ``__``, ``~~``, ``*``, ``_`` are removed where
    they are markup: a pair (with no such marker character in between) whose
    opener is not escaped and is followed by non-space, and whose closer is
    preceded by non-space.  As in CommonMark, ``_`` and ``__`` must also not
    touch a word character on the outside (``snake_case`` is kept) while
    ``*``, ``**`` and ``~~`` may sit inside a word (``**Note:**Text`` ->
    ``Note:Text``); ``2 * 3 * 4`` is kept.
16. Table pipes: every ``|`` (escaped or not) becomes a space.
17. Backslash escapes of ASCII punctuation are removed (``\\-`` -> ``-``,
    ``\\*`` -> ``*``, ``1\\.`` -> ``1.``), as produced by html2text.

Finishing:

18. Rules 2-17 are applied again until the text no longer changes, first
    keeping line structure, then once more on the single-line result; an
    escaped or entity-encoded marker therefore ends up exactly as if it had
    been written plainly, and the function is idempotent.
19. All whitespace runs (including line breaks) collapse to a single space;
    leading and trailing whitespace is removed.

Case is kept (no lowercasing), as in the Dripper / WebMainBench evaluation,
which compares html2text Markdown with the gold text without case folding.
Since both sides are normalised identically, rules that also touch genuine
plain text (a gold line starting with ``1.`` loses the number) are harmless.

Tokenisation and ROUGE
----------------------
``tokenize`` is ``jieba.lcut`` (precise mode, HMM on) with pure-whitespace
tokens dropped.  ``rouge_n`` counts clipped n-gram overlap; both sides empty
scores 1, exactly one side empty scores 0, and when either side has fewer than
``n`` tokens both sides are compared with ``n' = min(n, len(cand), len(ref))``
so that short pages do not all score zero.
"""

from __future__ import annotations

import html
import logging
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

__all__ = ["Score", "normalise_for_scoring", "rouge_n", "score_page", "tokenize"]

_MAX_PASSES = 50

# --- preparation -----------------------------------------------------------
_ODD_SPACE = re.compile(r"[^\S\n ]")  # whitespace other than "\n" and " "
_SPACE_RUN = re.compile(r"  +")
_SPACE_AROUND_NEWLINE = re.compile(r" *\n[ \n]*")
_ANY_SPACE_RUN = re.compile(r"[^\S ]\s*| \s+")  # only runs that change

# --- whole lines -------------------------------------------------------------
_DROP_LINE = re.compile(
    r"^ *(?:"
    r"(?:`{3,}|~{3,}).*"  # code fence
    r"|[|+]?(?: *:?-+:? *[|+])* *:?-+:? *[|+]? *"  # table separator / --- rule
    r"|(?:\* *){3,}|(?:_ *){3,}"  # *** and ___ rules
    r"|=+ *"  # setext underline
    r"|\[[^\[\]\n]+\]: *<?[^ \n<>]+>?(?: +(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))? *"
    r")$\n?",
    re.MULTILINE,
)
_HEADING_CLOSING = re.compile(r"^( {0,3}#{1,6} +\S.*?) +#+ *$", re.MULTILINE)
_LINE_PREFIX = re.compile(
    r"^ *(?:(?:>|#{1,6}(?= |$)|[-*+•](?= |$)|\d{1,9}[.)](?= |$)|\[[ xX]\](?= |$)"
    r"|\[\^[^\[\]\n]+\]:) *)+",
    re.MULTILINE,
)

# --- inline ------------------------------------------------------------------
_HTML_COMMENT = re.compile(r"(?<!\\)<!--.*?-->", re.DOTALL)
_AUTOLINK = re.compile(r"<((?:https?|ftp)://[^<>\s]+|mailto:[^<>\s]+|[^<>\s@]+@[^<>\s@]+)>")
_HTML_TAG = re.compile(r"(?<!\\)</?[A-Za-z][A-Za-z0-9:-]*(?:\s[^<>]*)?/?>")
_LINK_TARGET = (
    r"\(\s*(?:<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
)
_IMAGE = re.compile(r"!\[([^\[\]]*)\]" + _LINK_TARGET)
_LINK = re.compile(r"\[([^\[\]]*)\]" + _LINK_TARGET)
_FOOTNOTE_REF = re.compile(r"\[\^[^\[\]\s]+\]")
_REF_LINK = re.compile(r"!?\[([^\[\]]*)\]\[[^\[\]]*\]")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)([^`]+)(?<!`)\1(?!`)")
# (marker char, pattern); each pattern starts with the literal marker so that
# the regex engine can skip quickly to candidates; the lookbehind right after
# it checks the character before the opener.
_EMPHASIS = [
    (c, re.compile(rf"{m}(?<!{before}{m})(?=\S)([^{c}]+)(?<=[^\s\\]){m}{after}"))
    for m, c, before, after in (
        (r"\*\*", "*", r"\\", ""),
        ("__", "_", r"[\w\\]", r"(?!\w)"),
        ("~~", "~", r"\\", ""),
        (r"\*", "*", r"\\", ""),
        ("_", "_", r"[\w\\]", r"(?!\w)"),
    )
]
_PIPE = re.compile(r"\\?\|")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def _pass(text: str) -> str:
    """Apply rules 2-17 once, keeping line structure (single spaces, no blank lines)."""
    if "&" in text:
        text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text)
    text = _ODD_SPACE.sub(" ", text)
    text = _DROP_LINE.sub("", text)
    text = _HEADING_CLOSING.sub(r"\1", text)
    text = _LINE_PREFIX.sub("", text)
    if "<" in text:
        text = _HTML_COMMENT.sub(" ", text)
        text = _AUTOLINK.sub(r"\1", text)
        text = _HTML_TAG.sub(" ", text)
    if "[" in text:
        text = _IMAGE.sub(" ", text)
        text = _LINK.sub(r"\1", text)
        text = _FOOTNOTE_REF.sub("", text)
        text = _REF_LINK.sub(r"\1", text)
    if "`" in text:
        text = _CODE_SPAN.sub(r"\2", text)
    for char, pattern in _EMPHASIS:
        if char in text:
            text = pattern.sub(r"\1", text)
    if "|" in text:
        text = _PIPE.sub(" ", text)
    if "\\" in text:
        text = _ESCAPE.sub(r"\1", text)
    text = _ODD_SPACE.sub(" ", text)
    if "  " in text:
        text = _SPACE_RUN.sub(" ", text)
    if "\n" in text:
        text = _SPACE_AROUND_NEWLINE.sub("\n", text)
    return text.strip()


def _fixpoint(text: str, collapse: bool) -> str:
    """Repeat ``_pass`` (optionally collapsing to one line) until nothing changes."""
    for _ in range(_MAX_PASSES):
        new = _pass(text)
        if collapse:
            new = _ANY_SPACE_RUN.sub(" ", new).strip()
        if new == text:
            break
        text = new
    return text


def normalise_for_scoring(text: str) -> str:
    """Return the canonical text form of Markdown or plain text (rules in module doc)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _fixpoint(text, collapse=False)
    text = _ANY_SPACE_RUN.sub(" ", text).strip()
    return _fixpoint(text, collapse=True)


# --- tokenisation ------------------------------------------------------------
_jieba_lock = threading.Lock()
_jieba_ready = False


def _jieba() -> ModuleType:
    """Import and initialise jieba once, with its log output silenced."""
    global _jieba_ready
    import jieba

    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_ready = True
    return jieba


@lru_cache(maxsize=1 << 16)
def _cut_chunk(chunk: str) -> tuple[str, ...]:
    """jieba tokens of one whitespace-free chunk (cached: words repeat a lot)."""
    return tuple(_jieba().lcut(chunk))


def tokenize(text: str) -> list[str]:
    """Split text into jieba tokens (precise mode, HMM on), dropping whitespace tokens.

    jieba never joins characters across whitespace, so cutting each
    whitespace-separated chunk separately gives exactly ``jieba.lcut(text)``
    minus the whitespace tokens; chunks are cached, which makes long
    space-separated (e.g. English) texts several times faster.
    """
    tokens: list[str] = []
    for chunk in text.split():
        if len(chunk) <= 64:
            tokens.extend(_cut_chunk(chunk))
        else:
            tokens.extend(_jieba().lcut(chunk))
    return tokens


# --- ROUGE -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Score:
    """ROUGE precision, recall and F1, each in [0, 1]."""

    precision: float
    recall: float
    f1: float


def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    """Multiset of the n-grams of ``tokens``."""
    return Counter(zip(*(tokens[i:] for i in range(n)), strict=False))


def rouge_n(candidate_tokens: Sequence[str], reference_tokens: Sequence[str], n: int = 5) -> Score:
    """Clipped ROUGE-N of candidate against reference tokens.

    Both empty: 1/1/1; one empty: 0/0/0.  If either side has fewer than ``n``
    tokens, ``n`` is lowered to ``min(n, len(candidate), len(reference))``.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if not candidate_tokens and not reference_tokens:
        return Score(1.0, 1.0, 1.0)
    if not candidate_tokens or not reference_tokens:
        return Score(0.0, 0.0, 0.0)
    n = min(n, len(candidate_tokens), len(reference_tokens))
    cand = _ngrams(candidate_tokens, n)
    ref = _ngrams(reference_tokens, n)
    small, big = (cand, ref) if len(cand) <= len(ref) else (ref, cand)
    overlap = sum(min(count, big[gram]) for gram, count in small.items() if gram in big)
    cand_total = len(candidate_tokens) - n + 1
    ref_total = len(reference_tokens) - n + 1
    precision = overlap / cand_total
    recall = overlap / ref_total
    f1 = 2 * overlap / (cand_total + ref_total)
    return Score(precision, recall, f1)


def score_page(candidate_markdown: str, gold: str, n: int = 5) -> Score:
    """ROUGE-N of extracted Markdown against gold Markdown or text, after normalisation."""
    return rouge_n(
        tokenize(normalise_for_scoring(candidate_markdown)),
        tokenize(normalise_for_scoring(gold)),
        n,
    )
