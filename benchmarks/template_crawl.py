"""The site-template cache in every mode, on per-site crawls in crawl order: served
share, and quality against the labeller alone, through ``dripstream extract
--template-cache``, ``dripstream eval --template-cache`` and the stream (a real broker,
two label workers sharing templates under one key).

The crawl files, each site's pages one after another (a site's burst, as a crawler's
frontier sends it), written by ``build`` to ``out/template_crawl/``:

- ``debian.jsonl``: five whole Debian documentation sites (``template_sites.SITES``,
  unpacked in ``out/sites`` by ``template_sites.py --fetch``; 3,399 pages), each in its
  crawl order (``template_sites.crawl``, seed 0); ``debian-small.jsonl``: the first 12,
  16, 20, 25 and 30 pages of Git, SQLite, Django, Python and PostgreSQL. No human gold:
  the gold field is trafilatura's Markdown, an extractor independent of both runs.
- ``shared.jsonl``: every site of ``../shared/data`` with at least two pages
  (publishers_dev by crawl date, wcxb_dev in file order; ``template_cache.sites``), with
  its human gold.

``run`` measures each file in each mode with the cache and with the labeller alone
(``extract``: ``--jsonl FILE`` with and without ``--template-cache``; ``eval``: likewise;
stream: one worker of the CPU stages, two label workers, the pages produced in file
order, against the offline labeller alone). Reported per mode: pages served, overall and
on the sites with >= 10 pages; ROUGE-5 F1 and WCXB word F1 against the gold, with the
cache and alone; and the cache's records scored against the labeller alone's.

    .venv/bin/python benchmarks/template_crawl.py build
    .venv/bin/python benchmarks/template_crawl.py run [--files debian] [--modes extract,eval]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path

from template_cache import rows_of, sites
from template_sites import SITES, SITES_DIR, crawl

from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.templates import TEMPLATE_LABELLER, registrable_domain
from dripstream.processors.training.scoring import score_page
from dripstream.processors.training.train import FALLBACK_BASELINE, baseline_markdown
from dripstream.processors.training.wordf1 import word_score
from dripstream.streams.demo import broker, start_worker, stop_process
from dripstream.streams.envelope import SOURCE_HEADER
from dripstream.streams.kafka import create_topics
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import produce_pages, wait_for_outputs
from dripstream.topics.catalog import RECORDS

OUT = Path("out/template_crawl")
SMALL = (12, 16, 20, 25, 30)  # debian-small: pages of git, sqlite, django, python, postgresql
WHOLE = 10**6  # debian: every page of each site
BIG = 10  # a site with at least this many pages in the file
SERVED = f"dripper:{TEMPLATE_LABELLER}"


def build() -> None:
    """Write the crawl files (see the module docstring)."""
    OUT.mkdir(parents=True, exist_ok=True)
    order = ("git-doc", "sqlite3-doc", "python-django-doc", "python3.11-doc", "postgresql-doc-15")
    for name, sizes in (("debian", (WHOLE,) * len(order)), ("debian-small", SMALL)):
        _debian(OUT / f"{name}.jsonl", order, sizes)
    with (OUT / "shared.jsonl").open("w", encoding="utf-8") as out:
        for name in ("publishers_dev.jsonl", "wcxb_dev.jsonl.xz"):
            for pages in sites(rows_of(name), 2).values():
                for row in pages:
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")


def _debian(path: Path, order: tuple[str, ...], sizes: tuple[int, ...]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for package, size in zip(order, sizes, strict=True):
            assert package in SITES
            for number, row in enumerate(crawl(SITES_DIR, package, size, seed=0)):
                gold = baseline_markdown(FALLBACK_BASELINE, row["html"], row["url"])
                line = {"id": f"{package}-{number}", **row, "gold_markdown_or_text": gold}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")


LABELLER = ["--labeller", "learned"]
REUSE = False  # --reuse: read extract's records written by an earlier run


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dripstream.streams.cli", *args, *LABELLER]
    return subprocess.run(command, check=True, capture_output=True, text=True)


def extract(path: Path, cache: bool) -> dict[str, dict]:
    """Row id -> record of ``dripstream extract --jsonl``."""
    target = OUT / f"{path.stem}.extract{'.cache' if cache else ''}.jsonl"
    if REUSE and target.exists():
        return _records(target)
    cli(
        "extract",
        "--jsonl",
        str(path),
        "-o",
        str(target),
        "--quiet",
        *(["--template-cache"] * cache),
    )
    return _records(target)


def _records(path: Path) -> dict[str, dict]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
    return {line["input_id"]: line for line in lines}


def evaluate(path: Path, cache: bool) -> dict:
    """``dripstream eval --json`` (its report)."""
    result = cli("eval", str(path), "--json", "--quiet", *(["--template-cache"] * cache))
    return json.loads(result.stdout)


def stream(rows: list[dict], labeller: str) -> dict[str, dict]:
    """Row id -> record, through the stream: one worker of the CPU stages and two label
    workers sharing templates (one key file), the pages produced in file order."""
    already_running = broker("status") == 0
    if not already_running:
        broker("up")
    run = uuid.uuid4().hex[:8]
    settings = StreamSettings.from_env().for_run(f"crawl-{run}", web_port=0)
    asyncio.run(create_topics(settings))
    key = OUT / "template.key"
    key.write_bytes(os.urandom(32))
    env = {"DRIPSTREAM_TEMPLATE_KEY_FILE": str(key), "DRIPSTREAM_LABELLER": labeller}
    log = OUT / f"stream-{run}.log"
    workers = [
        start_worker(replace(settings, stages=("simplify", "reconstruct", "fallback")), log, **env),
        *(start_worker(replace(settings, stages=("label",)), log, **env) for _ in range(2)),
    ]
    try:
        time.sleep(15)  # the workers join their groups (the label stage's two share it)
        pages = [raw_page_from_row(row) for row in rows]
        produced = asyncio.run(produce_pages(settings, pages, progress=False))
        outputs = asyncio.run(wait_for_outputs(settings, produced, deadline_s=900))
    finally:
        for worker in workers:
            stop_process(worker)
        if not already_running:
            broker("down")
    ids = {source: row["id"] for source, row in zip(produced, rows, strict=True)}
    found = {}
    for message in outputs:
        source = message.headers.get(SOURCE_HEADER)
        if source in ids and message.topic == RECORDS:
            found[ids[source]] = json.loads(message.value)
    return found


def mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


def compare(rows: list[dict], cached: dict[str, dict], alone: dict[str, dict]) -> dict:
    """Served share of the records ``cached``, and their quality against the labeller
    ``alone``'s: per page, ROUGE-5 and word F1 against the gold, cached minus alone, and
    ROUGE-5 of the cached Markdown against the alone one (a page whose Markdown is the
    same adds 0 and 1 without scoring), as means over all pages and over the pages of
    sites with >= ``BIG`` pages."""
    site_of = {row["id"]: registrable_domain(row["url"]) for row in rows}
    pages = Counter(site_of.values())
    ids = [row["id"] for row in rows]
    big = [i for i in ids if pages[site_of[i]] >= BIG]
    served = {i for i in ids if (cached.get(i) or {}).get("extractor") == SERVED}
    gold = {row["id"]: row.get("gold_markdown_or_text") or "" for row in rows}

    def markdown(records: dict[str, dict], page: str) -> str:
        return (records.get(page) or {}).get("markdown") or ""

    per_page = {}
    for i in ids:
        ours, theirs = markdown(cached, i), markdown(alone, i)
        if ours == theirs:
            per_page[i] = (0.0, 0.0, 1.0)
            continue
        per_page[i] = (
            score_page(ours, gold[i]).f1 - score_page(theirs, gold[i]).f1,
            word_score(ours, gold[i]).f1 - word_score(theirs, gold[i]).f1,
            score_page(ours, theirs).f1,
        )

    def quality(chosen: list[str]) -> dict[str, float]:
        return {
            "rouge5_minus_alone": mean([per_page[i][0] for i in chosen]),
            "word_f1_minus_alone": mean([per_page[i][1] for i in chosen]),
            "rouge5_vs_alone": mean([per_page[i][2] for i in chosen]),
        }

    return {
        "pages": len(ids),
        "records": sum(1 for i in ids if i in cached),
        "served": len(served),
        "served_share": round(len(served) / len(ids), 3),
        "differing_pages": sum(1 for i in ids if per_page[i][2] != 1.0),
        "big_sites": sum(1 for n in pages.values() if n >= BIG),
        "big_pages": len(big),
        "big_served": len(served.intersection(big)),
        "big_served_share": round(len(served.intersection(big)) / len(big), 3) if big else None,
        "quality": quality(ids),
        "big_quality": quality(big),
    }


def run(files: list[str], modes: list[str], labeller: str) -> dict:
    report: dict[str, object] = {
        "labeller": labeller,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for name in files:
        path = OUT / f"{name}.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
        alone = extract(path, cache=False)
        for mode in modes:
            started = time.perf_counter()
            if mode == "extract":
                result = compare(rows, extract(path, cache=True), alone)
            elif mode == "eval":  # eval scores against the gold itself
                cached = evaluate(path, cache=True)
                plain = evaluate(path, cache=False)
                served = [p for p in cached["pages"] if p["extractor"] == SERVED]
                result = {
                    "pages": len(cached["pages"]),
                    "served": len(served),
                    "served_share": round(len(served) / len(cached["pages"]), 3),
                    "quality": {
                        "rouge5_minus_alone": round(cached["mean_f1"] - plain["mean_f1"], 4),
                        "word_f1_minus_alone": round(
                            cached["mean_word_f1"] - plain["mean_word_f1"], 4
                        ),
                    },
                    "mean_rouge5": [round(cached["mean_f1"], 4), round(plain["mean_f1"], 4)],
                    "templates": cached["templates"],
                }
            else:
                result = compare(rows, stream(rows, labeller), alone)
            result["seconds"] = round(time.perf_counter() - started, 1)
            report[f"{name} {mode}"] = result
            print(name, mode, json.dumps(result), flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("build", "run"))
    parser.add_argument("--files", default="debian,debian-small,shared")
    parser.add_argument("--modes", default="extract,eval,stream")
    parser.add_argument("--labeller", default="learned")
    parser.add_argument("--reuse", action="store_true", help="reuse extract's earlier records")
    args = parser.parse_args()
    if args.action == "build":
        build()
        return
    LABELLER[1] = args.labeller
    global REUSE
    REUSE = args.reuse
    report = run(args.files.split(","), args.modes.split(","), args.labeller)
    (OUT / f"report-{'-'.join(args.files.split(','))}.json").write_text(
        json.dumps(report, indent=1)
    )


if __name__ == "__main__":
    main()
