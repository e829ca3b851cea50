"""Bytes -> text: charset precedence, lying pages, and telling HTML from other payloads."""

from __future__ import annotations

import codecs
import random

import pytest

from dripstream.processors.errors import EmptyDocument, NotHtml
from dripstream.processors.ingest.decode import (
    check_html,
    decode_html,
    decode_html_utf8,
    detect_charset,
)

FRENCH = "Le café crème et la crêpe brûlée sont délicieux à Noël, déjà très appréciés. "


def _page(body: str, head: str = "") -> str:
    return f"<html><head>{head}</head><body><p>{body}</p></body></html>"


# -- charset precedence ---------------------------------------------------------------------


def test_hint_beats_meta() -> None:
    data = _page(FRENCH, '<meta charset="utf-8">').encode("cp1252")
    assert detect_charset(data, "windows-1252") == ("cp1252", "hint")
    assert FRENCH in decode_html(data, "windows-1252")


@pytest.mark.parametrize("hint", ["utf-16", "utf-16-le", "utf-32"])
def test_wide_hint_over_ascii_compatible_bytes_is_ignored(hint: str) -> None:
    text = _page(FRENCH)
    data = text.encode("utf-8")
    assert detect_charset(data, hint) == ("utf-8", "detected")
    assert decode_html(data, hint) == text


def test_utf16_hint_over_utf16_bytes_without_bom_is_used() -> None:
    text = _page(FRENCH)
    data = text.encode("utf-16-le")
    assert detect_charset(data, "utf-16le") == ("utf-16-le", "hint")
    assert decode_html(data, "utf-16le") == text


def test_unknown_hint_is_ignored() -> None:
    data = _page(FRENCH, '<meta charset="windows-1252">').encode("cp1252")
    assert detect_charset(data, "no-such-charset") == ("cp1252", "meta")


@pytest.mark.parametrize(
    ("bom", "codec"),
    [
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ],
)
def test_bom_decides_and_is_removed(bom: bytes, codec: str) -> None:
    text = _page(FRENCH, '<meta charset="iso-8859-5">')
    data = bom + text.encode(codec)
    assert detect_charset(data) == (codec, "bom")
    decoded = decode_html(data)
    assert decoded == text
    assert not decoded.startswith("\ufeff")


def test_utf8_bom_beats_meta() -> None:
    data = codecs.BOM_UTF8 + _page(FRENCH, '<meta charset="windows-1251">').encode("utf-8")
    assert FRENCH in decode_html(data)


@pytest.mark.parametrize(
    "head",
    [
        '<meta charset="windows-1251">',
        "<meta charset=windows-1251>",
        '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">',
    ],
)
def test_meta_charset_is_used(head: str) -> None:
    russian = "Привет, мир! Это тестовая страница."
    data = _page(russian, head).encode("cp1251")
    assert detect_charset(data) == ("cp1251", "meta")
    assert russian in decode_html(data)


def test_meta_latin1_means_windows_1252() -> None:
    text = _page("“quoted” – dash", '<meta charset="iso-8859-1">')
    data = text.encode("cp1252")
    assert detect_charset(data) == ("cp1252", "meta")
    assert "“quoted” – dash" in decode_html(data)


def test_meta_beyond_the_sniffing_window_is_not_read() -> None:
    data = ("<!--" + "x" * 5000 + "-->" + _page("plain", '<meta charset="koi8-r">')).encode()
    assert detect_charset(data)[1] == "detected"


def test_utf8_page_without_declaration_is_detected() -> None:
    data = _page("日本語のテキストと" + FRENCH).encode("utf-8")
    assert detect_charset(data) == ("utf-8", "detected")


ARTICLE_FR = (
    "La Révolution française est une période de bouleversements politiques et sociaux en "
    "France, dans ses colonies et en Europe à la fin du XVIIIe siècle. Traditionnellement, on "
    "la fait commencer à l'ouverture des États généraux le 5 mai 1789 et finir au coup d'État "
    "de Napoléon Bonaparte en novembre 1799. Elle met fin à l'Ancien Régime en remplaçant la "
    "monarchie absolue par une monarchie constitutionnelle, puis par la Première République. "
    "Elle a détruit la société d'ordres et les privilèges, aboli la féodalité, proclamé "
    "l'égalité des citoyens devant la loi. Les députés rédigent la Déclaration des droits de "
    "l'homme et du citoyen, qui affirme la liberté, la propriété, la sûreté et la résistance à "
    "l'oppression. Les événements de cette époque ont profondément marqué les mentalités."
)
ARTICLE_EN = (
    "The café’s “special” menu – crème brûlée, a naïve soufflé – costs €12… “Really?” she "
    "asked. It’s the best in town, isn’t it? The chef’s résumé lists Zürich and São Paulo."
)


@pytest.mark.parametrize(
    "article", [ARTICLE_FR, ARTICLE_EN, FRENCH], ids=["french", "smart-quotes", "short-french"]
)
def test_cp1252_page_without_declaration_is_detected(article: str) -> None:
    data = _page(article).encode("cp1252")
    codec, how = detect_charset(data)
    assert (codec, how) == ("cp1252", "detected")
    assert article in decode_html(data)


def test_latin1_page_without_declaration_decodes_its_letters() -> None:
    data = _page(ARTICLE_FR).encode("latin-1")
    text = decode_html(data)
    assert ARTICLE_FR in text
    assert "\ufffd" not in text


def test_page_claiming_utf16_in_ascii_bytes_still_decodes_as_ascii() -> None:
    text = _page("Plain ASCII words only.", '<meta charset="utf-16">')
    data = text.encode("ascii")
    codec, how = detect_charset(data)
    assert not codec.startswith("utf-16")
    assert how != "meta"
    assert decode_html(data) == text


def test_page_claiming_utf8_over_latin1_bytes_decodes_with_replacements() -> None:
    data = _page(FRENCH, '<meta charset="utf-8">').encode("latin-1")
    text = decode_html(data)
    assert "\ufffd" in text
    assert "Le caf\ufffd cr\ufffdme" in text
    assert "<p>" in text


def test_hint_of_a_wrong_codec_never_raises() -> None:
    data = "日本語".encode() + b"\xff\xfe\x00"
    text = decode_html(data, "ascii")  # ascii -> cp1252, which has undefined bytes
    assert isinstance(text, str)
    assert decode_html(b"\xff\xfe\xd8", "utf-16")  # odd length, unpaired surrogate


def test_decoding_random_bytes_never_raises() -> None:
    rng = random.Random(7)
    for _ in range(50):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        assert isinstance(decode_html(data), str)


# -- check_html -----------------------------------------------------------------------------


def _check(data: bytes, content_type: str | None = None) -> None:
    check_html(data, decode_html(data), content_type)


@pytest.mark.parametrize("data", [b"", b"   \n\t\r\n  ", b"\xef\xbb\xbf  \n"])
def test_empty_or_whitespace_payload_is_empty_document(data: bytes) -> None:
    with pytest.raises(EmptyDocument):
        _check(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"html": "<p>not a page</p>", "items": [1, 2, 3]}',
        b'  [{"div": "<div>x</div>"}]',
    ],
    ids=["object", "array"],
)
def test_json_is_not_html(data: bytes) -> None:
    with pytest.raises(NotHtml, match="JSON"):
        _check(data)


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj <</Type /Catalog>> <html>", "PDF"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR<html>", "PNG"),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03<html><body>", "gzip"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "JPEG"),
    ],
    ids=["pdf", "png", "gzip", "jpeg"],
)
def test_binary_magic_is_not_html(data: bytes, what: str) -> None:
    with pytest.raises(NotHtml, match=what):
        _check(data)


@pytest.mark.parametrize("seed", range(5))
def test_random_binary_is_not_html(seed: int) -> None:
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(4096))
    with pytest.raises(NotHtml):
        _check(data)


def test_plain_text_without_markup_is_not_html() -> None:
    data = ("Just a plain text file. " * 40 + "\n1 < 2 and 3 > 2.\n").encode()
    with pytest.raises(NotHtml, match="no HTML markup"):
        _check(data)


def test_non_html_content_type_is_not_html() -> None:
    with pytest.raises(NotHtml, match="content type"):
        _check(_page("x").encode(), "image/png")


def test_html_content_type_with_parameters_is_accepted() -> None:
    _check(_page("x").encode(), "text/html; charset=UTF-8")


@pytest.mark.parametrize(
    "data",
    [
        b"<!DOCTYPE html><html><head><title>Cut",
        b"<html><body><div><p>Some text that stops in the mid",
        b"<p>Just a paragraph",
        b"  \n<DIV CLASS=x>upper case markup</DIV>",
    ],
)
def test_truncated_or_partial_html_is_accepted(data: bytes) -> None:
    _check(data)  # does not raise


def test_json_looking_html_is_accepted() -> None:
    _check(b"[not json] <div>but a page</div>")


# -- the page's own UTF-8 bytes, handed to the parser ---------------------------------------


@pytest.mark.parametrize(
    ("data", "hint"),
    [
        (_page(FRENCH + " “quoted” 日本語").encode("utf-8"), None),  # detected
        (_page(FRENCH, '<meta charset="utf-8">').encode("utf-8"), None),  # meta
        (_page(FRENCH).encode("utf-8"), "utf-8"),  # hint
        (codecs.BOM_UTF8 + _page(FRENCH).encode("utf-8"), None),  # after the BOM
    ],
)
def test_valid_utf8_pages_come_with_their_bytes(data: bytes, hint: str | None) -> None:
    decoded = decode_html_utf8(data, hint)
    assert decoded.text == decode_html(data, hint)
    assert decoded.utf8 == decoded.text.encode("utf-8")


@pytest.mark.parametrize(
    ("data", "hint"),
    [
        (_page(FRENCH).encode("cp1252"), "windows-1252"),  # another charset
        (_page(FRENCH).encode("utf-8")[:-40] + b"\xff\xfe" + b"</p></html>", "utf-8"),  # invalid
        (_page(FRENCH).encode("utf-16-le"), "utf-16le"),
    ],
)
def test_other_pages_have_no_utf8_bytes(data: bytes, hint: str) -> None:
    decoded = decode_html_utf8(data, hint)
    assert decoded.text == decode_html(data, hint)
    assert decoded.utf8 is None
