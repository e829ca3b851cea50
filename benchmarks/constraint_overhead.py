"""Per-page cost of the regex constraint, the way vLLM's xgrammar backend pays it.

    .venv/bin/python benchmarks/constraint_overhead.py --pages 32

For each real simplified page: compile the page's regex (``GrammarCompiler.compile_regex``
with the Qwen tokenizer's 151,936-entry vocabulary, as vLLM configures it, cache off so
every page pays), then walk the canonical answer token by token (``fill_next_token_bitmask``
+ ``accept_token``: what the engine does at each decode step). Pinned to one core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.vllm_cpu import load_pages  # noqa: E402
from dripstream.gpu_worker.constraint import answer_regex, format_answer  # noqa: E402
from dripstream.gpu_worker.synthetic import save_qwen_tokenizer  # noqa: E402

VOCAB_SIZE = 151936


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/articles_dev.jsonl")
    parser.add_argument("--pages", type=int, default=32)
    parser.add_argument("--format", choices=["json", "compact"], default="json")
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})

    import xgrammar as xgr
    from transformers import AutoTokenizer

    folder = Path(tempfile.mkdtemp(prefix="qwen-tokenizer-"))
    save_qwen_tokenizer(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    pages = load_pages(args.data, args.pages, folder)

    started = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=VOCAB_SIZE)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    setup_ms = (time.perf_counter() - started) * 1000

    labels = ["main", "other"]
    rows = []
    for index, page in enumerate(pages):
        regex = answer_regex(args.format, page.block_count, labels)
        answer = format_answer(args.format, [labels[i % 2] for i in range(page.block_count)])
        answer_ids = tokenizer.encode(answer, add_special_tokens=False)
        started = time.perf_counter()
        compiled = compiler.compile_regex(regex)
        compiled_at = time.perf_counter()
        matcher = xgr.GrammarMatcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, VOCAB_SIZE)
        for token in answer_ids:
            matcher.fill_next_token_bitmask(bitmask, 0)
            if not matcher.accept_token(token):
                raise RuntimeError(f"page {index}: the canonical answer was refused")
        finished = time.perf_counter()
        rows.append(
            {
                "blocks": page.block_count,
                "answer_tokens": len(answer_ids),
                "compile_ms": (compiled_at - started) * 1000,
                "mask_ms": (finished - compiled_at) * 1000,
            }
        )

    def mean(key: str) -> float:
        return statistics.fmean(row[key] for row in rows)

    mask_per_token_us = sum(r["mask_ms"] for r in rows) / sum(r["answer_tokens"] for r in rows)
    report = {
        "pages": len(rows),
        "format": args.format,
        "tokenizer_info_and_compiler_setup_ms": round(setup_ms, 1),
        "mean_blocks": round(mean("blocks"), 1),
        "mean_answer_tokens": round(mean("answer_tokens"), 1),
        "compile_ms_mean": round(mean("compile_ms"), 2),
        "compile_ms_max": round(max(r["compile_ms"] for r in rows), 2),
        "mask_ms_per_page_mean": round(mean("mask_ms"), 2),
        "mask_us_per_token": round(mask_per_token_us * 1000, 1),
        "total_ms_per_page_mean": round(mean("compile_ms") + mean("mask_ms"), 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
