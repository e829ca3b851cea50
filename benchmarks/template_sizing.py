"""Size of the site-template state, measured: bytes a site on the templates topic
(msgpack, before compression) and Python memory a site in a worker's cache.

    .venv/bin/python benchmarks/template_sizing.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tracemalloc
from pathlib import Path

import cramjam

sys.path.insert(0, str(Path(__file__).resolve().parent))

from template_cache import rows_of, sites

from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.registry import build_labeller
from dripstream.processors.label.templates import TemplateCache, TemplateCascade
from dripstream.processors.pipeline import PipelineSettings, simplify_page
from dripstream.topics.codecs import from_msgpack, to_msgpack
from dripstream.topics.records import SimplifiedPage, SiteState


def main() -> None:
    grouped = sites(rows_of("wcxb_dev.jsonl.xz"), 2)
    pages = []
    for rows in grouped.values():
        for row in rows:
            page = simplify_page(raw_page_from_row(row), PipelineSettings())
            if isinstance(page, SimplifiedPage):
                pages.append(page)
    teacher = build_labeller("heuristic")
    cache = TemplateCache()
    cascade = TemplateCascade(teacher, cache)
    for page in pages:
        cascade.label([page])
    records = {site: to_msgpack(cache.state(site)) for site in cache.sites}
    # What a worker holds: the same states loaded into a fresh cache (parsing caches apart).
    tracemalloc.start()
    fresh = TemplateCache()
    before = tracemalloc.get_traced_memory()[0]
    for site, record in records.items():
        fresh.load(from_msgpack(record, SiteState), site)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    sizes = [len(record) for record in records.values()]
    signatures = [sum(len(c.counts) for c in clusters) for clusters in cache.sites.values()]
    result = {
        "sites": len(cache.sites),
        "pages": len(pages),
        "state_bytes_per_site_mean": round(statistics.fmean(sizes)),
        "state_bytes_per_site_max": max(sizes),
        "state_zstd_bytes_per_site_mean": round(
            statistics.fmean(len(bytes(cramjam.zstd.compress(r))) for r in records.values())
        ),
        "signatures_per_site_mean": round(statistics.fmean(signatures), 1),
        "python_bytes_per_site_mean": round(held / len(cache.sites)),
        "estimate_10e6_sites_topic_gib": round(statistics.fmean(sizes) * 1e6 / 2**30, 1),
        "estimate_10e6_sites_memory_gib": round(held / len(cache.sites) * 1e6 / 2**30, 1),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
