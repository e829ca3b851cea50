"""Documentation pages labelled by their own markup (distant supervision).

Documentation generators mark the page's main region: Sphinx ``role="main"``, ``<main>``,
rustdoc's ``id="main-content"``, AsciiDoc's ``div#content``, Doxygen's ``div.contents``,
DocBook's one top-level section under ``<body>`` (``chapter``, ``sect1``, ``refentry``...).
``main_region_text`` reads the text of that region, which stands in for a page's gold text
(``gold_markdown_or_text``): the blocks are then labelled from it by the same derivation as
the human-labelled files (:mod:`dripstream.processors.training.labels`). A page whose
markup declares no such region, or several, gives None and is not used.

The rule reads only the page's markup: no feature of the labeller comes from it, and no
site or generator is named anywhere but in the list of sources ``DISTANT_SITES`` (Debian's
HTML documentation packages, fetched by ``scripts/distant-docs.sh``), whose pages
``distant_rows`` samples into the training file shipped with the package
(``DISTANT_FILE``). Those pages only ever train: they are never scored.
"""

from __future__ import annotations

import json
import lzma
import random
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser, LexborNode

# Elements that declare themselves the page's main region, in the order tried: the first
# selector that matches exactly one element wins.
MAIN_SELECTORS = ('[role="main"]', "main", "#main-content", "div#content", "div.contents")
# DocBook's top-level section classes: one such div directly under <body> is the region.
DOCBOOK_SECTIONS = frozenset(
    "appendix article bibliography book chapter glossary index part preface reference "
    "refentry section sect1 sect2 set toc".split()
)
MIN_WORDS = 50  # a region with fewer words is not a page worth training on
# Debian package -> (its HTML documentation root, the site's host): the pages' group is
# the site, so cross-validation never trains on a site it scores (several are in WCXB).
DISTANT_SITES = {
    "git-doc": ("usr/share/doc/git-doc", "git-scm.com"),
    "libstdc++-12-doc": ("usr/share/doc/gcc-12-base/libstdc++", "gcc.gnu.org"),
    "postgresql-doc-15": ("usr/share/doc/postgresql-doc-15/html", "postgresql.org"),
    "python-flask-doc": ("usr/share/doc/python-flask-doc/html", "flask.palletsprojects.com"),
    "python-jinja2-doc": ("usr/share/doc/python-jinja2-doc/html", "jinja.palletsprojects.com"),
    "python-pandas-doc": ("usr/share/doc/python-pandas-doc/html", "pandas.pydata.org"),
    "python-requests-doc": ("usr/share/doc/python-requests-doc/html", "requests.readthedocs.io"),
    "python-scipy-doc": ("usr/share/doc/python-scipy-doc/html", "docs.scipy.org"),
    "python-werkzeug-doc": (
        "usr/share/doc/python-werkzeug-doc/html",
        "werkzeug.palletsprojects.com",
    ),
    "python3.11-doc": ("usr/share/doc/python3.11/html", "docs.python.org"),
    "rust-doc": ("usr/share/doc/rust-doc/html", "doc.rust-lang.org"),
    "sphinx-doc": ("usr/share/doc/sphinx-doc/html", "sphinx-doc.org"),
}
# Generated listings that are not documentation pages (source listings, indexes, search).
_SKIPPED = ("_sources", "_modules", "genindex", "search.html", "py-modindex")
DISTANT_FILE = "distant_documentation.jsonl.xz"
PAGES_PER_SITE = 60


def main_region(html: str) -> LexborNode | None:
    """The one element the page's markup declares its main region, or None."""
    tree = LexborHTMLParser(html)
    for selector in MAIN_SELECTORS:
        nodes = tree.css(selector)
        if len(nodes) == 1:
            return nodes[0]
    if tree.body is None:
        return None
    sections = [
        child
        for child in tree.body.iter()
        if child.tag == "div" and (child.attributes.get("class") or "").strip() in DOCBOOK_SECTIONS
    ]
    return sections[0] if len(sections) == 1 else None


def main_region_text(html: str) -> str | None:
    """The text of the page's declared main region (scripts and styles left out), None
    where it declares none or it holds fewer than ``MIN_WORDS`` words."""
    region = main_region(html)
    if region is None:
        return None
    for node in region.css("script, style"):
        node.decompose()
    text = region.text(separator="\n")
    return text if len(text.split()) >= MIN_WORDS else None


def distant_rows(root: str | Path, per_site: int = PAGES_PER_SITE, seed: int = 0) -> Iterator[dict]:
    """Up to ``per_site`` pages of each of ``DISTANT_SITES`` unpacked under ``root``
    (``root/PACKAGE/...``, its version in ``root/PACKAGE/VERSION``), drawn with ``seed``,
    each with a declared main region: rows of ``id, url, html, meta`` (domain, page type,
    source package and version)."""
    for package, (docs, host) in sorted(DISTANT_SITES.items()):
        version = (Path(root) / package / "VERSION").read_text().strip()
        top = Path(root) / package / docs
        files = sorted(
            path
            for path in top.rglob("*.htm*")
            if not any(part in path.as_posix() for part in _SKIPPED)
        )
        random.Random(seed).shuffle(files)
        taken = 0
        for path in files:
            if taken == per_site:
                break
            html = path.read_text(encoding="utf-8", errors="replace")
            if main_region_text(html) is None:
                continue
            relative = path.relative_to(top).as_posix()
            yield {
                "id": f"{package}/{relative}",
                "url": f"https://{host}/{relative}",
                "html": html,
                "meta": {
                    "domain": host,
                    "page_type": "documentation",
                    "source": f"{package} {version}",
                },
            }
            taken += 1


def load_distant_rows(path: str | Path | None = None) -> list[dict]:
    """The rows of the shipped training file (or ``path``), each with its gold text: the
    text of its declared main region."""
    if path is None:
        path = Path(str(resources.files("dripstream.processors.training").joinpath(DISTANT_FILE)))
    rows = []
    with lzma.open(path, "rt", encoding="utf-8") as file:
        for line in file:
            row = json.loads(line)
            gold = main_region_text(row["html"])
            if gold is not None:
                rows.append({**row, "gold_markdown_or_text": gold})
    return rows


def write_distant_file(rows: Sequence[dict], path: str | Path) -> int:
    """Write ``rows`` as xz-compressed JSONL (the shipped file's form); their count."""
    with lzma.open(path, "wt", encoding="utf-8", preset=9) as file:
        for row in rows:
            file.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    return len(rows)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m dripstream.processors.training.distant UNPACKED_DIR OUT_FILE")
    count = write_distant_file(list(distant_rows(sys.argv[1])), sys.argv[2])
    print(f"{count} pages -> {sys.argv[2]}")
