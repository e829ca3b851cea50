"""Decoding never fails on hostile charset declarations, and deep JSON is not a page."""

from __future__ import annotations

import codecs

import pytest

from dripstream.processors.errors import NotHtml
from dripstream.processors.ingest.decode import (
    WHATWG_LABELS,
    charset_codec,
    check_html,
    decode_html,
    detect_charset,
)

TEXT = "Le café crème et la crêpe brûlée sont délicieux à Noël."
# Python codecs that are not the charset of any web page: bytes-to-bytes transforms,
# str-to-str, IDNA/Punycode, the always-failing "undefined", and UTF-7 (a classic XSS).
NOT_PAGE_CHARSETS = [
    "rot13",
    "rot_13",
    "hex",
    "base64",
    "zlib",
    "bz2",
    "uu",
    "quopri",
    "idna",
    "punycode",
    "undefined",
    "utf-7",
    "unicode_escape",
    "raw_unicode_escape",
    "mbcs",
    "x-user-defined",
    "replacement",
    "hz-gb-2312",
    "iso-2022-kr",
]


def _page(head: str = "") -> str:
    return f"<html><head>{head}</head><body><p>{TEXT}</p></body></html>"


@pytest.mark.parametrize("charset", NOT_PAGE_CHARSETS)
@pytest.mark.parametrize("where", ["meta", "http-equiv", "hint"])
def test_a_charset_that_is_no_text_encoding_is_ignored(charset: str, where: str) -> None:
    head = {
        "meta": f'<meta charset="{charset}">',
        "http-equiv": f'<meta http-equiv="Content-Type" content="text/html; charset={charset}">',
        "hint": "",
    }[where]
    text = _page(head)
    data = text.encode("utf-8")
    hint = charset if where == "hint" else None
    codec, how = detect_charset(data, hint)
    assert (codec, how) == ("utf-8", "detected")
    assert decode_html(data, hint) == text


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        ("Windows-1251", "cp1251"),
        ("  WINDOWS-1251\t", "cp1251"),
        ('"koi8-r"', "koi8-r"),
        ("latin1", "cp1252"),
        ("US-ASCII", "cp1252"),
        ("x-sjis", "cp932"),
        ("ks_c_5601-1987", "cp949"),
        ("gb2312", "gb18030"),
        ("utf8", "utf-8"),
        ("utf_8", "utf-8"),
        ("unicode-1-1-utf-8", "utf-8"),
    ],
)
def test_whatwg_labels_name_their_charset(label: str, codec: str) -> None:
    assert charset_codec(label) == codec


def test_every_whatwg_label_maps_to_a_text_codec_that_decodes_any_bytes() -> None:
    every_byte = bytes(range(256))
    for label, codec in WHATWG_LABELS.items():
        assert codecs.lookup(codec)._is_text_encoding, label  # type: ignore[attr-defined]
        assert isinstance(every_byte.decode(codec, errors="replace"), str), label


def test_a_declared_whatwg_charset_is_used() -> None:
    russian = "Привет, мир! Это тестовая страница."
    data = f'<html><head><meta charset="x-cp1251"></head><body><p>{russian}</p></body></html>'
    assert detect_charset(data.encode("cp1251")) == ("cp1251", "meta")
    assert russian in decode_html(data.encode("cp1251"))


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_wide_encodings_without_a_bom_are_detected(codec: str) -> None:
    text = _page()
    data = text.encode(codec)
    assert detect_charset(data) == (codec, "detected")
    assert decode_html(data) == text
    check_html(data, decode_html(data))  # a page, not binary data


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b' \n[{"a":' + b'[{"b":' * 50_000,
    ],
    ids=["open-brackets", "nested-arrays", "nested-objects", "mixed"],
)
def test_json_nested_beyond_any_parser_is_not_html(data: bytes) -> None:
    with pytest.raises(NotHtml, match="JSON"):
        check_html(data, decode_html(data))
