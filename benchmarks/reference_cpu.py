"""CPU-path benchmark of the reference Dripper implementation (PyPI ``mineru-html``).

What it measures, per page, on one pinned core (``os.sched_setaffinity(0, {0})``):

* **pre**  -- the reference's own pre-processing, ``simplify_single_input``
  (``simplify_html``: the simplified HTML given to the model plus the mapping
  HTML that carries the same ``_item_id`` attributes).
* **post** -- what the reference runs after the model, with a synthetic model
  answer that labels *every* item ``main`` (compact form ``1main2main...``) so
  the mapping does its full work: ``parse_result`` -> ``extract_main_html_single``
  -> ``convert2content`` (mineru-webkit's ``convert_html_to_structured_data``,
  output format ``mm_md``, the reference default).

These are the same functions ``MinerUHTMLGeneric.process`` calls; the model
call and ``build_prompt`` (a string template) are left out. The page pipeline
runs once untimed on the first page to warm mineru-webkit's cached converter.

Reported: pages, total seconds, pages/s, mean / p50 / p99 per-page ms for pre
and post, peak RSS (``ru_maxrss``; also the value just after loading the data)
and, in a separate untimed pass, the tracemalloc peak per page (max and mean).

Run with the reference venv (created by ``benchmarks/setup_reference.sh``)::

    .cache/ref-venv/bin/python benchmarks/reference_cpu.py \
        --data /work/shared/data/articles_dev.jsonl [--repeat N] [--json]

The package's top-level ``__init__`` imports transformers, so this script
registers a bare package module for ``mineru_html`` and imports only the
``mineru_html.process`` submodules it needs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import resource
import statistics
import sys
import time
import tracemalloc
import types
from collections.abc import Callable
from typing import Any

os.sched_setaffinity(0, {0})


def _import_reference() -> dict[str, Any]:
    """Import the reference's CPU-path modules without running ``mineru_html/__init__``."""
    spec = importlib.util.find_spec("mineru_html")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("mineru_html missing: run benchmarks/setup_reference.sh, use .cache/ref-venv")
    if "mineru_html" not in sys.modules:
        pkg = types.ModuleType("mineru_html")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["mineru_html"] = pkg
    base = importlib.import_module("mineru_html.base")
    process = importlib.import_module("mineru_html.process")
    utils = importlib.import_module("mineru_html.utils")
    return {"base": base, "process": process, "utils": utils}


REF = _import_reference()
Case = Any  # mineru_html.base.MinerUHTMLCase


def run_pre(html: str, url: str | None) -> Case:
    """Reference pre-processing: simplified HTML + mapping HTML."""
    base = REF["base"]
    case = base.MinerUHTMLCase(base.MinerUHTMLInput(raw_html=html, url=url))
    return REF["process"].simplify_single_input(case)


def run_post(case: Case) -> Case:
    """Reference post-processing with every item labelled ``main``."""
    base, process, utils = REF["base"], REF["process"], REF["utils"]
    item_ids = utils.get_all_item_ids(case.process_data.simpled_html)
    answer = "".join(f"{i}main" for i in item_ids)
    case.generate_output = base.MinerUHTMLGenerateOutput(response=answer)
    case = process.parse_result(case)
    case = process.extract_main_html_single(case)
    return process.convert2content(case, output_format="mm_md")


def load_pages(path: str) -> list[tuple[str, str | None]]:
    """Read ``(html, url)`` pairs from a JSONL file, dropping other fields."""
    pages: list[tuple[str, str | None]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                pages.append((row["html"], row.get("url")))
    return pages


def _timed(fn: Callable[[], Case]) -> tuple[float, Case | None, bool]:
    t0 = time.perf_counter()
    try:
        out, ok = fn(), True
    except Exception:  # the reference raises its own errors on bad pages
        out, ok = None, False
    return (time.perf_counter() - t0) * 1e3, out, ok


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))] if s else float("nan")


def _summary(ms: list[float]) -> dict[str, float]:
    return {
        "mean_ms": statistics.fmean(ms) if ms else float("nan"),
        "p50_ms": _pct(ms, 0.50),
        "p99_ms": _pct(ms, 0.99),
    }


def benchmark(pages: list[tuple[str, str | None]], repeat: int, trace: bool) -> dict[str, Any]:
    """Time pre and post for every page ``repeat`` times, then an optional tracemalloc pass."""
    rss_loaded_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    run_post(run_pre(*pages[0]))  # warm-up (mineru-webkit builds its converter chain once)

    pre_ms: list[float] = []
    post_ms: list[float] = []
    errors = {"pre": 0, "post": 0}
    t_start = time.perf_counter()
    for _ in range(repeat):
        for html, url in pages:
            dt, case, ok = _timed(lambda h=html, u=url: run_pre(h, u))
            pre_ms.append(dt)
            if not ok:
                errors["pre"] += 1
                continue
            dt, _, ok = _timed(lambda c=case: run_post(c))
            post_ms.append(dt)
            errors["post"] += not ok
    total_s = time.perf_counter() - t_start
    rss_peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    result: dict[str, Any] = {
        "pages": len(pages) * repeat,
        "unique_pages": len(pages),
        "repeat": repeat,
        "total_s": total_s,
        "pages_per_s": len(pages) * repeat / total_s,
        "pre": _summary(pre_ms),
        "post": _summary(post_ms),
        "errors": errors,
        "peak_rss_mib": rss_peak_mib,
        "rss_after_load_mib": rss_loaded_mib,
    }
    if trace:
        peaks: list[float] = []
        tracemalloc.start()
        for html, url in pages:
            tracemalloc.reset_peak()
            try:
                run_post(run_pre(html, url))
            except Exception:
                continue
            peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
            tracemalloc.clear_traces()
        tracemalloc.stop()
        result["tracemalloc_peak_mib"] = {"max": max(peaks), "mean": statistics.fmean(peaks)}
    return result


def print_table(r: dict[str, Any]) -> None:
    """Human-readable summary."""
    err = r["errors"]
    print(
        f"pages {r['pages']} ({r['unique_pages']} x {r['repeat']})  total {r['total_s']:.2f} s  "
        f"{r['pages_per_s']:.2f} pages/s  errors pre={err['pre']} post={err['post']}"
    )
    print(f"{'stage':<6}{'mean ms':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for stage in ("pre", "post"):
        s = r[stage]
        print(f"{stage:<6}{s['mean_ms']:>10.1f}{s['p50_ms']:>10.1f}{s['p99_ms']:>10.1f}")
    rss, loaded = r["peak_rss_mib"], r["rss_after_load_mib"]
    print(f"peak RSS {rss:.1f} MiB (after loading the data: {loaded:.1f} MiB)")
    if "tracemalloc_peak_mib" in r:
        t = r["tracemalloc_peak_mib"]
        print(f"tracemalloc peak per page: max {t['max']:.1f} MiB, mean {t['mean']:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="JSONL with 'html' (and 'url') per line")
    ap.add_argument("--repeat", type=int, default=1, help="timed passes over the data (default 1)")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N pages (0 = all)")
    ap.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc pass")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()

    pages = load_pages(args.data)
    if args.limit:
        pages = pages[: args.limit]
    if not pages:
        sys.exit("no pages")
    result = benchmark(pages, max(1, args.repeat), trace=not args.no_tracemalloc)
    result["affinity"] = sorted(os.sched_getaffinity(0))
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
