"""Peak memory of ``dripstream produce`` on a big WARC and a big JSONL file: it must not
grow with the file (readers stream; sends in flight are bounded by count and bytes).

    python benchmarks/produce_memory.py [--mib 200] [--page-kib 64] [--keep DIR]

Writes a gzipped WARC (gzip-encoded, some chunked bodies, as crawlers store them) and a
JSONL file of about ``--mib`` MiB of pages, creates fresh topics on the local broker
(127.0.0.1:9092, its own prefix), runs ``dripstream produce`` on each in a child process
and prints the child's peak RSS (wait4) next to the file size, as a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import io
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "harbour tide vessel cargo quay pilot wind west north crew evening dawn hold log "
    "lighthouse anchor rope sail mast deck keel bow stern gull wave rock shelf pool"
).split()


def page(rng: random.Random, number: int, kib: int) -> bytes:
    paragraphs = []
    size = 0
    while size < kib * 1024:
        text = " ".join(rng.choice(WORDS) for _ in range(120))
        paragraphs.append(f"<p>{text} {rng.getrandbits(64):x}.</p>")
        size += len(paragraphs[-1])
    return (
        f"<html><head><title>Page {number}</title></head><body><article>"
        f"<h1>Page {number}</h1>{''.join(paragraphs)}</article></body></html>"
    ).encode()


def write_files(folder: Path, mib: int, kib: int) -> tuple[Path, Path]:
    rng = random.Random(7)
    warc, jsonl = folder / "big.warc.gz", folder / "big.jsonl"
    written = number = 0
    with warc.open("wb") as out, jsonl.open("w", encoding="utf-8") as rows:
        writer = WARCWriter(out, gzip=True)
        while written < mib * 1024 * 1024:
            body = page(rng, number, kib)
            url = f"https://big.example/{number}"
            encoded = gzip.compress(body, compresslevel=1)
            headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip")]
            if number % 2:
                encoded = b"%x\r\n%s\r\n0\r\n\r\n" % (len(encoded), encoded)
                headers.append(("Transfer-Encoding", "chunked"))
            http = StatusAndHeaders("200 OK", headers, "HTTP/1.1")
            writer.write_record(
                writer.create_warc_record(
                    url, "response", payload=io.BytesIO(encoded), http_headers=http
                )
            )
            rows.write(json.dumps({"url": url, "html": body.decode()}) + "\n")
            written += len(body)
            number += 1
    return warc, jsonl


def produce(path: Path, prefix: str) -> dict[str, object]:
    env = {**os.environ, "DRIPSTREAM_TOPIC_PREFIX": prefix}
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "dripstream.streams.cli", "produce", str(path), "--quiet"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    return {
        "file": path.name,
        "file_mib": round(path.stat().st_size / 2**20, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "seconds": round(seconds, 1),
        "exit": child.returncode,
        "stderr": (child.stderr.read().decode()[-300:] if child.stderr else ""),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=200, help="MiB of pages per file")
    parser.add_argument("--page-kib", type=int, default=64, help="KiB per page")
    parser.add_argument("--keep", help="write the files here and keep them")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from dripstream.streams.kafka import create_topics
    from dripstream.streams.settings import StreamSettings

    prefix = f"bench-produce-{uuid.uuid4().hex[:8]}."
    asyncio.run(create_topics(StreamSettings.from_env(topic_prefix=prefix)))
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        warc, jsonl = write_files(folder, args.mib, args.page_kib)
        for path in (warc, jsonl):
            print(json.dumps(produce(path, prefix)), flush=True)
    resource.getrusage(resource.RUSAGE_CHILDREN)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
