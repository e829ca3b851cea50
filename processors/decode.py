"""Bytes -> text, and the checks that tell HTML from everything else.

Charset order: explicit hint (HTTP header / record field), byte-order mark, ``<meta
charset>`` / ``http-equiv`` in the first 4 KiB, then statistical detection
(charset-normalizer). Invalid sequences are replaced; decoding never raises.
"""

from __future__ import annotations

import codecs
import json
import re

from charset_normalizer import from_bytes

from processors.errors import EmptyDocument, NotHtml

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.IGNORECASE
)
_HTML_SIGNS = re.compile(
    r"<\s*(!doctype\s+html|html|head|body|title|meta|div|p|span|a|table|article|section|"
    r"h[1-6]|ul|ol|li|br|img|main|header|footer|nav|script|style|link)\b",
    re.IGNORECASE,
)
# File signatures of common non-HTML payloads a crawler may hand us.
_BINARY_MAGIC = (
    (b"%PDF-", "PDF document"),
    (b"\x89PNG", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"RIFF", "RIFF media"),
    (b"\x00\x00\x01\x00", "icon"),
    (b"wOFF", "web font"),
)
_SNIFF_BYTES = 4096
# charset-normalizer often ranks a Central European or Baltic code page first for Western
# text in windows-1252 (a short French page comes out as cp1257, English with curly quotes
# as cp1250). When it cannot tell windows-1252 apart from its best guess (chaos within
# this margin, coherence no lower), take windows-1252, the web's default legacy charset.
_CP1252_CHAOS_MARGIN = 0.05


def _normalise_codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        codec = codecs.lookup(name.strip().strip("\"'"))
    except LookupError:
        return None
    # WHATWG: labels for latin-1 / ascii mean windows-1252 in practice.
    if codec.name in ("latin-1", "iso8859-1", "ascii"):
        return "cp1252"
    return codec.name


def detect_charset(data: bytes, hint: str | None = None) -> tuple[str, str]:
    """Return (codec name, how it was found): hint, bom, meta or detected."""
    codec = _normalise_codec(hint)
    # A utf-16/utf-32 hint over bytes without a single NUL is a lie (markup in either
    # encoding always has NUL bytes): ignore it, like a meta that claims utf-16.
    wide = codec is not None and codec.startswith(("utf-16", "utf-32"))
    if codec and not (wide and b"\x00" not in data[:_SNIFF_BYTES]):
        return codec, "hint"
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name, "bom"
    match = _META_CHARSET.search(data[:_SNIFF_BYTES])
    if match:
        codec = _normalise_codec(match.group(1).decode("ascii", "replace"))
        # A page that declares utf-16 in ASCII bytes is lying: it is ASCII-compatible.
        if codec and not codec.startswith("utf-16") and not codec.startswith("utf-32"):
            return codec, "meta"
    try:
        data.decode("utf-8")
        return "utf-8", "detected"
    except UnicodeDecodeError:
        pass
    matches = from_bytes(data[:65536])
    best = matches.best()
    if best is not None and best.encoding:
        for candidate in matches:
            if (
                candidate.encoding == "cp1252"
                and candidate.chaos <= best.chaos + _CP1252_CHAOS_MARGIN
                and candidate.coherence >= best.coherence
            ):
                return "cp1252", "detected"
        return _normalise_codec(best.encoding) or "utf-8", "detected"
    return "utf-8", "default"


def decode_html(data: bytes, charset_hint: str | None = None) -> str:
    """Decode page bytes to text, replacing invalid sequences; never raises."""
    codec, _ = detect_charset(data, charset_hint)
    text = data.decode(codec, errors="replace")
    return text[1:] if text.startswith("\ufeff") else text


def check_html(data: bytes, text: str, content_type: str | None = None) -> None:
    """Raise EmptyDocument or NotHtml for payloads that are not an HTML page."""
    if not data.strip() or not text.strip():
        raise EmptyDocument("the payload is empty or whitespace only")
    head = data[:16].lstrip()
    for magic, what in _BINARY_MAGIC:
        if head.startswith(magic):
            raise NotHtml(f"the payload is a {what}, not HTML")
    if content_type and not _is_html_content_type(content_type):
        raise NotHtml(f"content type {content_type!r} is not HTML")
    sample = text[:_SNIFF_BYTES]
    controls = sum(1 for ch in sample if ch < "\x09" or "\x0e" <= ch < "\x20")
    if controls > len(sample) * 0.05 or sample.count("\ufffd") > len(sample) * 0.25:
        raise NotHtml("the payload looks like binary data")
    if sample.lstrip()[:1] in ("{", "[") and _is_json(text):
        raise NotHtml("the payload is JSON, not HTML")
    if not _HTML_SIGNS.search(text[:262144]):
        raise NotHtml("no HTML markup found in the payload")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _is_html_content_type(content_type: str) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime in (
        "",
        "text/html",
        "application/xhtml+xml",
        "text/plain",
        "application/xml",
        "text/xml",
        "application/octet-stream",
    )
