"""Search-sink throughput: documents per second into the local OpenSearch (scripts/search.sh
up), through ``OpenSearchSink`` exactly as the stream's sink stage drives it (write each
record, flush per batch), and the engine's start time.

    python benchmarks/search_sink.py [--docs 5000] [--batch 500] [--target URL/INDEX]

Records are built from the dev set's gold texts (../shared/data/articles_dev.jsonl,
~6 KB of text each) under distinct URLs; a fresh index is used and dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dripstream.processors.pipeline import Outcome  # noqa: E402
from dripstream.processors.sinks.search import OpenSearchSink, SearchIndex  # noqa: E402
from dripstream.topics.records import PageRecord, document_id  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=500, help="records per flush")
    parser.add_argument("--target", default="http://127.0.0.1:9200")
    parser.add_argument(
        "--data", default=str(ROOT.parent / "shared" / "data" / "articles_dev.jsonl")
    )
    args = parser.parse_args()
    if subprocess.run(["bash", str(ROOT / "scripts" / "search.sh"), "status"]).returncode:
        started = time.monotonic()
        subprocess.run(["bash", str(ROOT / "scripts" / "search.sh"), "up"], check=True)
        print(json.dumps({"engine_start_s": round(time.monotonic() - started, 1)}))
    lines = Path(args.data).read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["gold_markdown_or_text"] for line in lines]
    target = f"{args.target}/bench-{uuid.uuid4().hex[:8]}"
    sink = OpenSearchSink(target)
    started = time.monotonic()
    for number in range(args.docs):
        url = f"https://bench.example/{number}"
        record = PageRecord(
            id=document_id(url),
            version=str(number),
            url=url,
            title=f"Page {number}",
            markdown=texts[number % len(texts)],
            extractor="dripper:heuristic",
            language="en",
            fetched_at=1_714_564_800.0 + number,
            http_status=200,
        )
        sink.write(Outcome("ok", record), str(number))
        if (number + 1) % args.batch == 0:
            assert not sink.flush()
    assert not sink.flush()
    seconds = time.monotonic() - started
    index = SearchIndex(target)
    index.refresh()
    count = index.count()
    index.client.indices.delete(index=index.index)
    print(
        json.dumps(
            {
                "docs": args.docs,
                "batch": args.batch,
                "indexed": count,
                "seconds": round(seconds, 2),
                "docs_per_s": round(args.docs / seconds),
                "mib_per_s": round(
                    sum(len(texts[n % len(texts)]) for n in range(args.docs)) / 2**20 / seconds, 1
                ),
            }
        )
    )
    sink.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
