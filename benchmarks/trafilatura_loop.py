"""The yardstick for whole-process speed: trafilatura over a JSONL file of pages, one
page after another, as a user would script it (``extract(html, output_format=
"markdown")``, its defaults). Read ``html`` and ``url`` from each line (``.jsonl`` or
``.jsonl.xz``); print the number of pages that gave text.

    .venv/bin/python benchmarks/trafilatura_loop.py ../shared/data/articles_dev.jsonl

Time it as a whole process beside ``dripstream extract --jsonl FILE -o OUT``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys

import trafilatura


def main(path: str) -> int:
    opener = lzma.open if path.endswith(".xz") else open
    extracted = 0
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            page = json.loads(line)
            markdown = trafilatura.extract(
                page["html"], url=page.get("url"), output_format="markdown"
            )
            extracted += bool(markdown)
    print(extracted)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="JSONL of pages (html, url), .jsonl or .jsonl.xz")
    sys.exit(main(parser.parse_args().path))
