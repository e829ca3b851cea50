"""The yardsticks for whole-process speed: trafilatura or rs-trafilatura over a JSONL file
of pages, one page after another, as a user would script them (trafilatura:
``extract(html, url=url, output_format="markdown")``; rs-trafilatura:
``extract(html, output_markdown=True)``), or the floor: lexbor alone (``--tool lexbor``:
selectolax parses each page and visits every node, the least any extractor on this
parser does). Reads ``html`` and ``url`` from each line (``.jsonl`` or ``.jsonl.xz``);
prints the number of pages that gave text (lexbor: that have a node).

    .venv/bin/python benchmarks/trafilatura_loop.py ../shared/data/articles_dev.jsonl
    VENV/bin/python benchmarks/trafilatura_loop.py --tool rs-trafilatura FILE

Time it as a whole process beside ``dripstream extract --jsonl FILE -o OUT``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
from collections.abc import Callable


def extractor(tool: str) -> Callable[[str, str | None], bool]:
    """Whether the tool found text in a page (html, url)."""
    if tool == "lexbor":
        from selectolax.lexbor import LexborHTMLParser

        def floor(html: str, url: str | None) -> bool:
            nodes, stack = 0, [LexborHTMLParser(html).root]
            while stack:
                node = stack.pop()
                if node is not None:
                    nodes += 1
                    _ = node.tag, node.attributes
                    stack.extend(node.iter(include_text=True))
            return nodes > 0

        return floor
    if tool == "rs-trafilatura":
        import rs_trafilatura

        def rs(html: str, url: str | None) -> bool:
            result = rs_trafilatura.extract(html, output_markdown=True)
            return bool(result and (result.content_markdown or result.main_content))

        return rs
    import trafilatura

    def python(html: str, url: str | None) -> bool:
        return bool(trafilatura.extract(html, url=url, output_format="markdown"))

    return python


def main(path: str, tool: str) -> int:
    extract = extractor(tool)
    opener = lzma.open if path.endswith(".xz") else open
    extracted = 0
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            page = json.loads(line)
            extracted += extract(page["html"], page.get("url"))
    print(extracted)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="JSONL of pages (html, url), .jsonl or .jsonl.xz")
    parser.add_argument(
        "--tool", choices=("trafilatura", "rs-trafilatura", "lexbor"), default="trafilatura"
    )
    arguments = parser.parse_args()
    sys.exit(main(arguments.path, arguments.tool))
