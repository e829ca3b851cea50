"""Bytes -> text, and the checks that tell HTML from everything else.

Charset order, as browsers and w3lib apply it: byte-order mark, explicit hint (the HTTP
header's charset / the record's field), ``<meta charset>`` / ``http-equiv`` in the first
4 KiB, then statistical detection (charset-normalizer). Invalid sequences are replaced;
decoding never raises.

Only the labels of the WHATWG Encoding Standard name a charset (``WHATWG_LABELS``, plus
``utf-32``/``utf-32le``/``utf-32be``, which our BOM sniffing knows too). Anything else a
page or a header declares is ignored, even a Python codec name: ``rot13``, ``hex``,
``base64``, ``zlib``, ``idna``, ``punycode``, ``undefined``, ``utf-7`` and the like are not
text encodings of a web page. The WHATWG ``replacement`` labels (ISO-2022-KR/CN, HZ) and
``x-user-defined`` are ignored as well: the charset is then detected.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import NamedTuple

from dripstream.processors.errors import EmptyDocument, NotHtml

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
_CONTROL_CHARS = re.compile("[\x00-\x08\x0e-\x1f]")  # not whitespace: binary data
# charset-normalizer often ranks a Central European or Baltic code page first for Western
# text in windows-1252 (a short French page comes out as cp1257, English with curly quotes
# as cp1250). When it cannot tell windows-1252 apart from its best guess (chaos within
# this margin, coherence no lower), take windows-1252, the web's default legacy charset.
_CP1252_CHAOS_MARGIN = 0.05


def _labels(codec: str, labels: str) -> dict[str, str]:
    return dict.fromkeys(labels.split(), codec)


# WHATWG Encoding Standard (https://encoding.spec.whatwg.org/#names-and-labels): every
# label of every encoding, mapped to the Python codec that decodes it. Latin-1 and ASCII
# labels mean windows-1252, GBK means gb18030, Shift_JIS windows-31j, EUC-KR windows-949
# and Big5 Big5-HKSCS, as in browsers.
WHATWG_LABELS: dict[str, str] = {
    **_labels("utf-8", "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8"),
    **_labels("cp866", "866 cp866 csibm866 ibm866"),
    **_labels(
        "iso8859-2",
        "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 iso_8859-2:1987 l2 latin2",
    ),
    **_labels(
        "iso8859-3",
        "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 iso_8859-3:1988 l3 latin3",
    ),
    **_labels(
        "iso8859-4",
        "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 iso_8859-4:1988 l4 latin4",
    ),
    **_labels(
        "iso8859-5",
        "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 iso_8859-5 "
        "iso_8859-5:1988",
    ),
    **_labels(
        "iso8859-6",
        "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 iso-8859-6 "
        "iso-8859-6-e iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 iso_8859-6:1987",
    ),
    **_labels(
        "iso8859-7",
        "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 iso8859-7 "
        "iso88597 iso_8859-7 iso_8859-7:1987 sun_eu_greek",
    ),
    **_labels(
        "iso8859-8",
        "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 iso8859-8 "
        "iso88598 iso_8859-8 iso_8859-8:1988 visual csiso88598i iso-8859-8-i logical",
    ),
    **_labels("iso8859-10", "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6"),
    **_labels("iso8859-13", "iso-8859-13 iso8859-13 iso885913"),
    **_labels("iso8859-14", "iso-8859-14 iso8859-14 iso885914"),
    **_labels("iso8859-15", "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9"),
    **_labels("iso8859-16", "iso-8859-16"),
    **_labels("koi8-r", "cskoi8r koi koi8 koi8-r koi8_r"),
    **_labels("koi8-u", "koi8-ru koi8-u"),
    **_labels("mac-roman", "csmacintosh mac macintosh x-mac-roman"),
    **_labels("cp874", "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874"),
    **_labels("cp1250", "cp1250 windows-1250 x-cp1250"),
    **_labels("cp1251", "cp1251 windows-1251 x-cp1251"),
    **_labels(
        "cp1252",
        "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 iso8859-1 "
        "iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252",
    ),
    **_labels("cp1253", "cp1253 windows-1253 x-cp1253"),
    **_labels(
        "cp1254",
        "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 "
        "iso_8859-9:1989 l5 latin5 windows-1254 x-cp1254",
    ),
    **_labels("cp1255", "cp1255 windows-1255 x-cp1255"),
    **_labels("cp1256", "cp1256 windows-1256 x-cp1256"),
    **_labels("cp1257", "cp1257 windows-1257 x-cp1257"),
    **_labels("cp1258", "cp1258 windows-1258 x-cp1258"),
    **_labels("mac-cyrillic", "x-mac-cyrillic x-mac-ukrainian"),
    **_labels(
        "gb18030",
        "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk gb18030",
    ),
    **_labels("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5"),
    **_labels("euc_jp", "cseucpkdfmtjapanese euc-jp x-euc-jp"),
    **_labels("iso2022_jp", "csiso2022jp iso-2022-jp"),
    **_labels("cp932", "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis"),
    **_labels(
        "cp949",
        "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 "
        "ksc_5601 windows-949",
    ),
    **_labels("utf-16-be", "unicodefffe utf-16be"),
    **_labels("utf-16-le", "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le"),
}
# Not WHATWG, but safe text encodings our BOM sniffing already decodes.
_EXTRA_LABELS: dict[str, str] = {
    **_labels("utf-32-le", "utf-32 utf32 utf-32le"),
    **_labels("utf-32-be", "utf-32be"),
}
# Surrounding whitespace as WHATWG strips it (ASCII whitespace) and stray quotes.
_LABEL_STRIP = "\t\n\f\r \"'"


def charset_codec(label: str | None) -> str | None:
    """The Python codec for a charset label, or None when the label names no web charset.

    Only WHATWG labels (case-insensitive; ``_`` may stand for ``-``) and utf-32 are
    charsets: a Python codec that is not a page encoding (rot13, base64, zlib, idna,
    punycode, undefined, utf-7, ...) is None, so the caller ignores the declaration.
    """
    if not label:
        return None
    key = label.strip(_LABEL_STRIP).lower()
    for candidate in (key, key.replace("_", "-")):
        codec = WHATWG_LABELS.get(candidate) or _EXTRA_LABELS.get(candidate)
        if codec:
            return codec
    return None


def _normalise_codec(name: str | None) -> str | None:
    return charset_codec(name)


def _python_codec(name: str | None) -> str | None:
    """A codec name from charset-normalizer (a Python name): its WHATWG label, else the
    codec itself if Python knows it as a text encoding that decodes bytes."""
    if not name:
        return None
    codec = charset_codec(name)
    if codec:
        return codec
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_PAGE_CODECS:
        return None
    return "cp1252" if info.name in ("latin-1", "iso8859-1", "ascii") else info.name


# Python text codecs that are no web page's charset (charset-normalizer may still name
# some of them); the 7-bit ones are what WHATWG maps to "replacement".
_NOT_PAGE_CODECS = frozenset(
    "idna punycode undefined utf-7 raw-unicode-escape unicode-escape palmos mbcs oem hz "
    "iso2022_kr iso2022_jp_2 iso2022_jp_2004 iso2022_jp_3 iso2022_jp_ext".split()
)


def _wide_without_bom(sample: bytes) -> str | None:
    """UTF-32 or UTF-16 without a byte-order mark, told by where the NUL bytes are: markup
    is mostly ASCII, so every second (or three in four) byte of it is NUL."""
    sample = sample[: len(sample) // 4 * 4]
    if len(sample) < 16 or sample.count(0) < len(sample) // 8:
        return None
    quarters = [sample[i::4].count(0) for i in range(4)]
    size = len(sample) // 4
    if min(quarters[1], quarters[2], quarters[3]) >= size // 2 and quarters[0] <= size // 20:
        return "utf-32-le"
    if min(quarters[0], quarters[1], quarters[2]) >= size // 2 and quarters[3] <= size // 20:
        return "utf-32-be"
    even, odd = quarters[0] + quarters[2], quarters[1] + quarters[3]
    half = len(sample) // 2
    if odd >= half // 4 and even <= odd // 20:
        return "utf-16-le"
    if even >= half // 4 and odd <= even // 20:
        return "utf-16-be"
    return None


class DecodedHtml(NamedTuple):
    """A page as text, and the bytes that are that text's UTF-8 encoding when the page
    holds them (valid UTF-8 after its byte-order mark): the parser reads those as they
    are instead of encoding the text again. None for any other page."""

    text: str
    utf8: bytes | None


def detect_charset(data: bytes, hint: str | None = None) -> tuple[str, str]:
    """Return (codec name, how it was found): bom, hint, meta or detected."""
    codec, how, _ = _detect_charset(data, hint)
    return codec, how


def _detect_charset(data: bytes, hint: str | None) -> tuple[str, str, str | None]:
    """detect_charset, plus the text when detection had to decode the page to tell."""
    # A byte-order mark wins over everything, as in browsers and w3lib: it cannot be
    # there by accident, while HTTP headers are often wrong.
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name, "bom", None
    codec = _normalise_codec(hint)
    # A utf-16/utf-32 hint over bytes without a single NUL is a lie (markup in either
    # encoding always has NUL bytes): ignore it, like a meta that claims utf-16.
    wide = codec is not None and codec.startswith(("utf-16", "utf-32"))
    if codec and not (wide and b"\x00" not in data[:_SNIFF_BYTES]):
        return codec, "hint", None
    match = _META_CHARSET.search(data[:_SNIFF_BYTES])
    if match:
        codec = _normalise_codec(match.group(1).decode("ascii", "replace"))
        # A page that declares utf-16 in ASCII bytes is lying: it is ASCII-compatible.
        if codec and not codec.startswith("utf-16") and not codec.startswith("utf-32"):
            return codec, "meta", None
    wide = _wide_without_bom(data[:_SNIFF_BYTES])
    if wide:
        return wide, "detected", None
    try:
        return "utf-8", "detected", data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes  # few pages get here: imported on first use

    matches = from_bytes(data[:65536])
    best = matches.best()
    if best is not None and best.encoding:
        for candidate in matches:
            if (
                candidate.encoding == "cp1252"
                and candidate.chaos <= best.chaos + _CP1252_CHAOS_MARGIN
                and candidate.coherence >= best.coherence
            ):
                return "cp1252", "detected", None
        return _python_codec(best.encoding) or "utf-8", "detected", None
    return "utf-8", "default", None


def decode_html(data: bytes, charset_hint: str | None = None) -> str:
    """Decode page bytes to text, replacing invalid sequences; never raises."""
    return decode_html_utf8(data, charset_hint).text


def decode_html_utf8(data: bytes, charset_hint: str | None = None) -> DecodedHtml:
    """decode_html, with the page's UTF-8 bytes when it has them (see DecodedHtml)."""
    codec, _, text = _detect_charset(data, charset_hint)
    if text is not None:
        return DecodedHtml(text, data)
    if codec == "utf-8":
        body = data[len(codecs.BOM_UTF8) :] if data.startswith(codecs.BOM_UTF8) else data
        try:
            return DecodedHtml(body.decode("utf-8"), body)
        except UnicodeDecodeError:
            pass
    try:
        text = data.decode(codec, errors="replace")
    except (LookupError, UnicodeError, ValueError):  # belt and braces: never raise
        text = data.decode("utf-8", errors="replace")
    return DecodedHtml(text[1:] if text.startswith("\ufeff") else text, None)


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
    controls = len(_CONTROL_CHARS.findall(sample))
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
    except RecursionError:
        # Nested deeper than any parser here follows (e.g. 100k "["): it is JSON-shaped
        # data from the first character on, whatever follows, and not a page. The C
        # scanner stops at the recursion limit, so this costs no more than the limit.
        return True
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
