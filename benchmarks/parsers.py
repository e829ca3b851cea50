"""Why lexbor: parse + visit every node, selectolax (lexbor) vs lxml, on one pinned core.

.venv/bin/python benchmarks/parsers.py --data ../shared/data/articles_dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import lxml.html
from selectolax.lexbor import LexborHTMLParser


def lexbor_visit(html: str) -> int:
    count = 0
    stack = [LexborHTMLParser(html).root]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        count += 1
        _ = node.tag, node.attributes
        stack.extend(node.iter(include_text=True))
    return count


def lxml_visit(html: str) -> int:
    count = 0
    for element in lxml.html.document_fromstring(html).iter():
        count += 1
        _ = element.tag, element.attrib, element.text, element.tail
    return count


def timed(visit: Callable[[str], int], pages: list[str], repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        for html in pages:
            visit(html)
    return (time.perf_counter() - started) / (len(pages) * repeat) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    with open(args.data, encoding="utf-8") as lines:
        pages = [json.loads(line)["html"] for line in lines if line.strip()]
    for name, visit in (("selectolax/lexbor", lexbor_visit), ("lxml", lxml_visit)):
        print(f"{name:18s} parse + visit all nodes: {timed(visit, pages, args.repeat):.2f} ms/page")


if __name__ == "__main__":
    main()
