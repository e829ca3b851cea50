"""Label-stage throughput with and without the site-template cache, same run.

A simulated crawl: ``--sites`` sites, each with three page layouts (article, listing,
video), ``--pages`` pages in all, interleaved as a crawler would fetch them. Every page is
simplified first (not timed); then the label step runs in batches of 16, once with the
teacher alone and once with the cache in front of it. Reported: pages/s of the label
step, teacher calls, and model calls avoided per 1,000 pages.

    .venv/bin/python benchmarks/template_throughput.py --teacher heuristic
    .venv/bin/python benchmarks/template_throughput.py --teacher vllm   # tiny random model

With ``vllm`` the teacher is the real engine (CPU build) with a random-weight tiny Qwen3
(built under ``.cache/models``): its labels are noise, so no template can verify and the
cache must avoid no call - the measurement shows the cost of the cache, and that it never
serves a teacher it cannot predict.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from dripstream.processors.label.registry import LabellerOptions, build_labeller
from dripstream.processors.label.templates import TEMPLATE_LABELLER, TemplateCache, TemplateCascade
from dripstream.processors.pipeline import PipelineSettings, simplify_page
from dripstream.topics.records import RawPage, SimplifiedPage

WORDS = "tide harbour ferry crossing morning weather cargo island lighthouse route".split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def page(rng: random.Random, site: int, layout: str, number: int) -> RawPage:
    menu = "".join(f'<a href="/s{i}">Section {i}</a>' for i in range(6))
    if layout == "article":
        body = f"<h1>{sentence(rng, 6)}</h1>" + "".join(
            f"<p>{sentence(rng, rng.randint(25, 60))}</p>" for _ in range(rng.randint(4, 9))
        )
        main = f'<article class="story">{body}</article>'
    elif layout == "listing":
        items = "".join(
            f'<li class="card"><a href="/a{i}">{sentence(rng, 8)}</a> {sentence(rng, 12)}</li>'
            for i in range(rng.randint(6, 12))
        )
        main = f'<main class="listing"><h1>{sentence(rng, 3)}</h1><ul>{items}</ul></main>'
    else:
        main = f'<div class="player"><h1>{sentence(rng, 5)}</h1><p>{sentence(rng, 40)}</p></div>'
    html = (
        f'<html><head><title>Site {site}</title></head><body><div class="menu">{menu}</div>'
        f"{main}"
        f'<div class="extras"><p>{sentence(rng, 15)}</p><p>Contact us.</p></div>'
        "</body></html>"
    )
    return RawPage(url=f"https://www.site{site}.example/{layout}/{number}", html=html.encode())


def crawl(sites: int, pages: int, seed: int) -> list[SimplifiedPage]:
    rng = random.Random(seed)
    layouts = ("article", "listing", "video")
    simplified = []
    for number in range(pages):
        raw = page(rng, rng.randrange(sites), rng.choice(layouts), number)
        step = simplify_page(raw, PipelineSettings())
        if isinstance(step, SimplifiedPage):
            simplified.append(step)
    return simplified


def run(labeller, pages: list[SimplifiedPage]) -> tuple[float, int]:
    started = time.perf_counter()
    served = 0
    for start in range(0, len(pages), 16):
        outcomes = labeller.label(pages[start : start + 16])
        served += sum(1 for outcome in outcomes if outcome.labeller == TEMPLATE_LABELLER)
    return time.perf_counter() - started, served


def teacher_for(name: str):
    if name != "vllm":
        return build_labeller(name)
    from dripstream.gpu_worker.synthetic import save_random_qwen3

    folder = Path(".cache/models/qwen3-tiny-random")
    if not (folder / "config.json").exists():
        save_random_qwen3(folder)
    return build_labeller(
        "vllm", LabellerOptions(profile="test-qwen3-tiny-random", model=str(folder))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="heuristic")
    parser.add_argument("--sites", type=int, default=20)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    pages = crawl(args.sites, args.pages, args.seed)
    teacher = teacher_for(args.teacher)
    run(teacher, pages[:16])  # warm
    alone_s, _ = run(teacher, pages)
    cascade = TemplateCascade(teacher, TemplateCache())
    cached_s, served = run(cascade, pages)
    teacher_calls = cascade.cache.counts["teacher"] + cascade.cache.counts["shadow"]
    result = {
        "teacher": args.teacher,
        "pages": len(pages),
        "sites": args.sites,
        "teacher_alone_pages_per_s": round(len(pages) / alone_s, 1),
        "with_cache_pages_per_s": round(len(pages) / cached_s, 1),
        "speedup": round(alone_s / cached_s, 2),
        "served_by_template": served,
        "teacher_calls_with_cache": teacher_calls,
        "model_calls_avoided_per_1000": round(1000 * (len(pages) - teacher_calls) / len(pages)),
        "cache_counts": cascade.cache.counts,
    }
    print(json.dumps(result, indent=1))
    if hasattr(teacher, "close"):
        teacher.close()


if __name__ == "__main__":
    main()
