"""What a page says it is: its Open Graph ``og:type`` and its schema.org JSON-LD ``@type``
values, reduced to a small fixed vocabulary (``HINTS``).

Publishers declare these for search engines and social cards, so they are present on most
commercial pages and generic across sites: ``og:type`` "article" on news and blog posts,
"product" on shop pages; JSON-LD ``NewsArticle``, ``Product``, ``DiscussionForumPosting``,
``ItemList``, ``FAQPage``. The learned labeller reads them as page-type signals (the same
class of list is a teaser list to drop on an article, the content of a collection page).

Only the vocabularies of the two standards appear here, never a site's own words. JSON-LD
is scanned for ``"@type"`` values with a regular expression rather than parsed, so a
malformed block still yields its types and a huge one costs a bounded scan
(``MAX_LD_CHARS``).
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser

MAX_LD_CHARS = 200_000  # JSON-LD text scanned per page, at most
_ARTICLE_TYPES = frozenset(
    (
        "article newsarticle blogposting reportagenewsarticle analysisnewsarticle "
        "opinionnewsarticle technarticle scholarlyarticle liveblogposting"
    ).split()
)
_PRODUCT_TYPES = frozenset("product productgroup offer aggregateoffer".split())
_FORUM_TYPES = frozenset("discussionforumposting qapage socialmediaposting".split())
_LIST_TYPES = frozenset("itemlist collectionpage searchresultspage offercatalog".split())
_FAQ_TYPES = frozenset(("faqpage",))

HINTS = (
    "og_article",
    "og_website",
    "og_product",
    "ld_article",
    "ld_product",
    "ld_forum",
    "ld_list",
    "ld_faq",
)
_LD_KINDS = (
    ("ld_article", _ARTICLE_TYPES),
    ("ld_product", _PRODUCT_TYPES),
    ("ld_forum", _FORUM_TYPES),
    ("ld_list", _LIST_TYPES),
    ("ld_faq", _FAQ_TYPES),
)
_TYPE_VALUE = re.compile(r'"@type"\s*:\s*(\[[^\]]{0,2000}\]|"[^"]{0,200}")')
_QUOTED = re.compile(r'"([^"]*)"')


def _og_hints(kind: str) -> set[str]:
    if kind == "article":
        return {"og_article"}
    if kind == "website":
        return {"og_website"}
    if kind.startswith("product") or kind.endswith(":item"):  # product, product.item, x:item
        return {"og_product"}
    return set()


def ld_types(text: str) -> set[str]:
    """The ``@type`` values in JSON-LD text, lower-cased, without a vocabulary prefix
    (``https://schema.org/Product`` -> ``product``)."""
    found = set()
    for match in _TYPE_VALUE.finditer(text[:MAX_LD_CHARS]):
        for value in _QUOTED.findall(match.group(1)):
            found.add(value.rsplit("/", 1)[-1].rsplit(":", 1)[-1].strip().lower())
    return found


def page_hints(tree: LexborHTMLParser) -> tuple[str, ...]:
    """The page's hints, in ``HINTS`` order."""
    found: set[str] = set()
    for meta in tree.css('meta[property="og:type"], meta[name="og:type"]'):
        found |= _og_hints((meta.attributes.get("content") or "").strip().lower())
    texts, size = [], 0
    for script in tree.css('script[type="application/ld+json"]'):
        texts.append(script.text() or "")
        size += len(texts[-1])
        if size >= MAX_LD_CHARS:
            break
    if texts:
        types = ld_types("".join(texts))
        found.update(name for name, vocabulary in _LD_KINDS if types & vocabulary)
    return tuple(name for name in HINTS if name in found)
