"""CPU-path benchmark of dripstream's processors, the counterpart of reference_cpu.py.

Per page, on one pinned core (``os.sched_setaffinity(0, {0})``):

* **pre**  -- ``simplify_page``: decode, HTML checks, dual-branch simplification and the
  token count (the estimate unless ``--tokenizer`` is given);
* **post** -- ``reconstruct_page`` with every block labelled main (the same synthetic
  answer the reference benchmark uses), i.e. mapping + Markdown conversion.

Also reported: token reduction (simplified vs raw HTML, same counter), peak RSS and, in
a separate untimed pass, the tracemalloc peak per page.

    .venv/bin/python benchmarks/processors_cpu.py --data ../shared/data/articles_dev.jsonl \
        [--repeat N] [--json] [--tokenizer tokenizer.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
import tracemalloc
from typing import Any

from dripstream.processors.extract.tokens import (
    EstimatedTokenCounter,
    HuggingFaceTokenCounter,
    TokenBudget,
)
from dripstream.processors.pipeline import PipelineSettings, reconstruct_page, simplify_page
from dripstream.topics.records import MAIN, LabelledPage, RawPage, SimplifiedPage


def _labelled_all_main(page: SimplifiedPage) -> LabelledPage:
    return LabelledPage(
        page_id=page.page_id,
        url=page.url,
        title=page.title,
        mapping_blocks=page.mapping_blocks,
        labels=[MAIN] * page.block_count,
        labeller="all-main",
        token_count=page.token_count,
        source=page.source,
    )


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "mean": statistics.fmean(ordered),
        "p50": ordered[len(ordered) // 2],
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
    }


def run(pages: list[RawPage], settings: PipelineSettings, repeat: int) -> dict[str, Any]:
    pre_ms: list[float] = []
    post_ms: list[float] = []
    routed = {"simplified": 0, "fallback": 0}
    started = time.perf_counter()
    for _ in range(repeat):
        for raw in pages:
            t0 = time.perf_counter()
            page = simplify_page(raw, settings)
            t1 = time.perf_counter()
            pre_ms.append((t1 - t0) * 1000)
            if not isinstance(page, SimplifiedPage):
                routed["fallback"] += 1
                continue
            routed["simplified"] += 1
            reconstruct_page(_labelled_all_main(page))
            post_ms.append((time.perf_counter() - t1) * 1000)
    total = time.perf_counter() - started
    count = len(pages) * repeat
    return {
        "pages": count,
        "seconds": total,
        "pages_per_s": count / total,
        "pre_ms": _summary(pre_ms),
        "post_ms": _summary(post_ms),
        "routed": routed,
    }


def token_reduction(pages: list[RawPage], settings: PipelineSettings) -> dict[str, Any]:
    counter = settings.token_counter
    raw_tokens, simplified_tokens, ratios = [], [], []
    for raw in pages:
        page = simplify_page(raw, settings)
        raw_count = counter.count(raw.html.decode("utf-8", "replace"))
        raw_tokens.append(raw_count)
        simplified_tokens.append(page.token_count)
        ratios.append(page.token_count / raw_count)
    return {
        "counter": counter.name,
        "raw_mean": statistics.fmean(raw_tokens),
        "raw_median": statistics.median(raw_tokens),
        "simplified_mean": statistics.fmean(simplified_tokens),
        "simplified_median": statistics.median(simplified_tokens),
        "reduction_of_means": 1
        - statistics.fmean(simplified_tokens) / statistics.fmean(raw_tokens),
        "reduction_median_per_page": 1 - statistics.median(ratios),
    }


def memory_per_page(pages: list[RawPage], settings: PipelineSettings) -> dict[str, float]:
    peaks = []
    tracemalloc.start()
    for raw in pages:
        tracemalloc.reset_peak()
        page = simplify_page(raw, settings)
        if isinstance(page, SimplifiedPage):
            reconstruct_page(_labelled_all_main(page))
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
    tracemalloc.stop()
    return {"max_mib": max(peaks), "mean_mib": statistics.fmean(peaks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokenizer")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    with open(args.data, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    pages = [
        RawPage(url=row["url"], html=row["html"].encode("utf-8"), charset="utf-8") for row in rows
    ]
    # An unbounded budget: every page takes the model path, as in the reference run.
    counter = HuggingFaceTokenCounter(args.tokenizer) if args.tokenizer else EstimatedTokenCounter()
    settings = PipelineSettings(budget=TokenBudget(context_tokens=10**9), token_counter=counter)
    run(pages[:1], settings, 1)  # warm-up, untimed
    result = run(pages, settings, args.repeat)
    result["tokens"] = token_reduction(pages, settings)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["tracemalloc_per_page"] = memory_per_page(pages, settings)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(
        f"pages {result['pages']}  total {result['seconds']:.2f} s  "
        f"{result['pages_per_s']:.1f} pages/s  routed {result['routed']}"
    )
    for stage in ("pre_ms", "post_ms"):
        s = result[stage]
        print(
            f"{stage[:-3]:5s} mean {s['mean']:.2f} ms  p50 {s['p50']:.2f} ms  p99 {s['p99']:.2f} ms"
        )
    t = result["tokens"]
    print(
        f"tokens ({t['counter']}): raw mean {t['raw_mean']:.0f} median {t['raw_median']:.0f}; "
        f"simplified mean {t['simplified_mean']:.0f} median {t['simplified_median']:.0f}; "
        f"reduction {t['reduction_of_means']:.1%} (of means), "
        f"{t['reduction_median_per_page']:.1%} (median page)"
    )
    m = result["tracemalloc_per_page"]
    print(
        f"peak RSS {result['peak_rss_mib']:.1f} MiB; tracemalloc per page max "
        f"{m['max_mib']:.1f} MiB mean {m['mean_mib']:.2f} MiB"
    )


if __name__ == "__main__":
    main()
