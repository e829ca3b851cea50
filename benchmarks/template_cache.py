"""The site-template cache on the shared sites: how much it serves and what that costs.

For each dataset, the pages of every site with at least ``--min-pages`` pages go
through the pipeline in crawl order (publishers_dev: by crawl date; wcxb_dev: file
order), once with the teacher alone and once with the cache in front of it (audited: the
teacher also labels every served page, only to measure). Reported per dataset, and for
the sites with >= 10 pages:

- share of pages served from templates;
- on the served pages: block agreement with the teacher, and ROUGE-5 of the template's
  Markdown against the teacher's Markdown;
- quality against gold (ROUGE-5 and WCXB word F1) of cascade vs teacher alone, over all
  the sites' pages.

    .venv/bin/python benchmarks/template_cache.py --teacher learned
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from dripstream.processors.errors import NothingSelected
from dripstream.processors.extract.reconstruct import reconstruct
from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.registry import budget_for, build_labeller
from dripstream.processors.label.templates import (
    TEMPLATE_LABELLER,
    TemplateCache,
    TemplateSettings,
    registrable_domain,
)
from dripstream.processors.pipeline import PipelineSettings, extract_pages
from dripstream.processors.training.scoring import score_page
from dripstream.processors.training.template_audit import Audit, AuditedCascade
from dripstream.processors.training.wordf1 import word_score
from dripstream.topics.records import MAIN

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def rows_of(name: str) -> list[dict]:
    path = DATA / name
    opener = lzma.open if name.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def sites(rows: list[dict], min_pages: int) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[registrable_domain(row["url"])].append(row)
    for pages in grouped.values():
        pages.sort(key=lambda row: (row.get("meta") or {}).get("crawl_date") or "")
    return {site: pages for site, pages in grouped.items() if len(pages) >= min_pages}


def markdown_of(page, labels: list[str]) -> str:
    """The Markdown the labels reconstruct; empty when they select no block (the
    pipeline sends such a page to the fallback)."""
    try:
        return reconstruct(page.mapping_blocks, labels, base_url=page.url).markdown
    except NothingSelected:
        return ""


def teacher_settings(teacher_name: str) -> PipelineSettings:
    """The teacher's budget as the CLI and the stream give it (the default profile's
    context for a prompt labeller, a block cap for a CPU one)."""
    return budget_for(teacher_name)


Judge = Callable[[str, str], str]  # (html, url) -> an extractor's Markdown


def run_site(
    pages: list[dict],
    teacher_name: str,
    settings: TemplateSettings,
    judges: Sequence[Judge] = (),
    seed: int | None = None,
) -> dict:
    """The site's pages through the teacher alone and through the cache in front of it
    (``seed``: its shadow draw). With ``judges`` (extractors independent of both), each
    served page whose labels differ from the teacher's also gets, per judge, the ROUGE-5
    of the template's Markdown minus that of the teacher's, both against the judge's
    Markdown (``judged``)."""
    raws = [raw_page_from_row(row) for row in pages]
    html_of = {row["url"]: row["html"] for row in pages}
    pipeline = teacher_settings(teacher_name)
    teacher = build_labeller(teacher_name)
    alone = extract_pages(raws, teacher, pipeline)
    cascade = AuditedCascade(build_labeller(teacher_name), TemplateCache(settings, seed=seed))
    with_cache = [extract_pages([raw], cascade, pipeline)[0] for raw in raws]  # crawl order
    served_flags = [
        bool(outcome.record and outcome.record.extractor.endswith(f":{TEMPLATE_LABELLER}"))
        for outcome in with_cache
    ]

    def audited(audit: Audit) -> dict:
        ours = markdown_of(audit.page, audit.template)
        theirs = markdown_of(audit.page, audit.teacher)
        if audit.template == audit.teacher:
            judged = [0.0] * len(judges)
        else:
            verdicts = [judge(html_of[audit.page.url], audit.page.url) for judge in judges]
            judged = [score_page(ours, v).f1 - score_page(theirs, v).f1 for v in verdicts]
        return {
            "agreement": audit.agreement,
            "rouge_vs_teacher": score_page(ours, theirs).f1 if MAIN in audit.teacher else 1.0,
            "judged": judged,
        }

    audits = [audited(audit) for audit in cascade.audits]

    def quality(outcomes: list) -> tuple[list[float], list[float]]:
        rouge, words = [], []
        for row, outcome in zip(pages, outcomes, strict=True):
            markdown = outcome.record.markdown if outcome.record else ""
            gold = row.get("gold_markdown_or_text") or ""
            rouge.append(score_page(markdown, gold).f1)
            words.append(word_score(markdown, gold).f1)
        return rouge, words

    return {
        "pages": len(pages),
        "served": sum(served_flags),
        "served_flags": served_flags,  # per page, in crawl order
        "audits": audits,
        "teacher_quality": quality(alone),
        "cascade_quality": quality(with_cache),
    }


def summarise(results: dict[str, dict]) -> dict[str, object]:
    pages = sum(r["pages"] for r in results.values())
    served = sum(r["served"] for r in results.values())
    audits = [a for r in results.values() for a in r["audits"]]

    def mean(values: list[float]) -> float | None:
        return round(statistics.fmean(values), 4) if values else None

    def flat(key: str, index: int) -> list[float]:
        return [v for r in results.values() for v in r[key][index]]

    return {
        "sites": len(results),
        "pages": pages,
        "served": served,
        "served_share": round(served / pages, 3) if pages else 0.0,
        "served_block_agreement": mean([a["agreement"] for a in audits]),
        "served_exact_pages": sum(1 for a in audits if a["agreement"] == 1.0),
        "served_rouge_vs_teacher": mean([a["rouge_vs_teacher"] for a in audits]),
        "rouge_vs_gold_teacher": mean(flat("teacher_quality", 0)),
        "rouge_vs_gold_cascade": mean(flat("cascade_quality", 0)),
        "word_f1_teacher": mean(flat("teacher_quality", 1)),
        "word_f1_cascade": mean(flat("cascade_quality", 1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="learned")
    parser.add_argument("--min-pages", type=int, default=2)
    parser.add_argument("--verify-pages", type=int, default=3)
    parser.add_argument("--out", default="out/templates.json")
    args = parser.parse_args()
    settings = TemplateSettings(verify_pages=args.verify_pages)
    report = {"teacher": args.teacher, "verify_pages": args.verify_pages}
    for name in ("publishers_dev.jsonl", "wcxb_dev.jsonl.xz"):
        results = {
            site: run_site(pages, args.teacher, settings)
            for site, pages in sites(rows_of(name), args.min_pages).items()
        }
        big = {site: r for site, r in results.items() if r["pages"] >= 10}
        report[name] = {
            "all_sites": summarise(results),
            "sites_with_10_pages": summarise(big),
            "per_big_site": {site: summarise({site: r}) for site, r in big.items()},
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
