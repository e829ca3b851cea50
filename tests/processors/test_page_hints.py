"""Page hints: what a page declares it is (og:type, JSON-LD @type), carried to features."""

from __future__ import annotations

import msgspec
from selectolax.lexbor import LexborHTMLParser

from dripstream.processors.extract.page_hints import MAX_LD_CHARS, page_hints
from dripstream.processors.extract.simplify import simplify
from dripstream.processors.label.features import FEATURE_NAMES, N_FEATURES, page_features
from dripstream.processors.pipeline import PipelineSettings, simplify_page
from dripstream.processors.training.train import matrix_array
from dripstream.topics.records import RawPage, SimplifiedPage

BODY = "<body><article><p>" + "The river rose in the night and the town woke to water. " * 8
BODY += "</p></article></body>"


def hints_of(head: str) -> tuple[str, ...]:
    return page_hints(LexborHTMLParser(f"<html><head>{head}</head>{BODY}</html>"))


def ld(text: str) -> str:
    return f'<script type="application/ld+json">{text}</script>'


def test_open_graph_types_name_articles_sites_and_products() -> None:
    assert hints_of('<meta property="og:type" content="article">') == ("og_article",)
    assert hints_of('<meta property="og:type" content=" Website ">') == ("og_website",)
    assert hints_of('<meta property="og:type" content="product.item">') == ("og_product",)
    assert hints_of('<meta name="og:type" content="ebay-objects:item">') == ("og_product",)
    assert hints_of('<meta property="og:type" content="video.movie">') == ()


def test_json_ld_types_are_found_in_graphs_lists_and_full_iris() -> None:
    graph = '{"@context": "https://schema.org", "@graph": [{"@type": "WebPage"}, '
    graph += '{"@type": "NewsArticle", "headline": "Flood"}]}'
    assert hints_of(ld(graph)) == ("ld_article",)
    assert hints_of(ld('{"@type": ["Product", "Thing"], "offers": {"@type": "Offer"}}')) == (
        "ld_product",
    )
    assert hints_of(ld('{"@type": "https://schema.org/FAQPage"}')) == ("ld_faq",)
    assert hints_of(ld('{"@type": "schema:DiscussionForumPosting"}')) == ("ld_forum",)
    assert hints_of(ld('{"@type": "ItemList"}') + ld('{"@type": "BlogPosting"}')) == (
        "ld_article",
        "ld_list",
    )


def test_hints_come_in_one_fixed_order_whatever_the_page_order() -> None:
    head = ld('{"@type": "Product"}') + '<meta property="og:type" content="article">'
    assert hints_of(head) == ("og_article", "ld_product")


def test_malformed_json_ld_still_gives_its_types() -> None:
    assert hints_of(ld('{"@type": "NewsArticle", "headline": "cut off here')) == ("ld_article",)


def test_types_outside_json_ld_scripts_do_not_count() -> None:
    other = '<script type="application/json">{"@type": "Product"}</script>'
    assert hints_of(other + "<p>@type Product</p>") == ()
    assert hints_of("") == ()


def test_only_the_first_json_ld_text_within_the_limit_is_scanned() -> None:
    padding = ld('{"filler": "' + "x" * MAX_LD_CHARS + '"}')
    assert hints_of(padding + ld('{"@type": "Product"}')) == ()
    assert hints_of(ld('{"@type": "Product"}') + padding) == ("ld_product",)


def test_simplified_pages_carry_the_hints_into_the_features() -> None:
    html = f'<html><head><meta property="og:type" content="article"></head>{BODY}</html>'
    assert simplify(html).hints == ("og_article",)
    page = simplify_page(
        RawPage(url="https://example.org/a", html=html.encode()), PipelineSettings()
    )
    assert isinstance(page, SimplifiedPage)
    assert page.hints == ["og_article"]
    X = matrix_array(
        page_features(page.simplified_html, page.mapping_blocks, page.title, page.hints),
        N_FEATURES,
    )
    hint_columns = {
        name: X[:, i] for i, name in enumerate(FEATURE_NAMES) if name.startswith("hint_")
    }
    assert set(hint_columns["hint_og_article"]) == {1.0}
    assert all(
        set(values) == {0.0} for name, values in hint_columns.items() if name != "hint_og_article"
    )


def test_a_simplified_message_from_before_hints_decodes_without_them() -> None:
    old = {
        "page_id": "p",
        "url": "https://example.org/a",
        "title": "",
        "simplified_html": '<p _item_id="1">x</p>',
        "mapping_blocks": ['<p _item_id="1">x</p>'],
        "token_count": 3,
        "tokenizer": "t",
    }
    page = msgspec.json.decode(msgspec.json.encode(old), type=SimplifiedPage)
    assert page.hints == []


def test_a_hint_this_labeller_does_not_know_is_ignored_not_fatal() -> None:
    html = f"<html><head></head>{BODY}</html>"
    page = simplify_page(
        RawPage(url="https://example.org/a", html=html.encode()), PipelineSettings()
    )
    assert isinstance(page, SimplifiedPage)
    known = page_features(page.simplified_html, page.mapping_blocks, page.title, ["og_article"])
    with_new = page_features(
        page.simplified_html, page.mapping_blocks, page.title, ["og_article", "ld_recipe"]
    )
    assert known.tobytes() == with_new.tobytes()
