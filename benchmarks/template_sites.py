"""The site-template cache on whole sites crawled page after page (no gold needed).

The shared data has three sites of 10 or more pages. This benchmark takes whole real
sites instead: the HTML documentation of PostgreSQL 15 (1,169 pages) and of Python 3.11
(530 pages) as Debian ships them, and that of Git (242 pages, AsciiDoc) and Django 3.2
(692 pages, Sphinx), sites no rule of the cache was tuned on, and SQLite's website (766
pages: release notes, the C API reference, syntax diagrams; hand-made HTML), likewise;
fetched by ``--fetch`` (``apt-get download`` and ``dpkg-deb -x`` into ``out/sites``, no
root needed). Pages go through the pipeline in a
crawl order (shuffled with a fixed seed: a crawler's frontier is not alphabetical), once
with the teacher alone and once with the cache in front of it, the teacher also labelling
every served page (only to measure). Reported per site:

- share of pages served from templates, overall and over the second half of the crawl
  (after the templates had the first half to learn);
- on the served pages: block agreement with the teacher, pages served exactly as the
  teacher would have labelled them, and ROUGE-5 of the template's Markdown against the
  teacher's.

    .venv/bin/python benchmarks/template_sites.py --fetch --teacher heuristic

There is no gold for these pages. With ``--judges``, each served page whose labels differ
from the teacher's is scored against two extractors independent of both (trafilatura,
rs-trafilatura: the bench extra): ROUGE-5 of the template's Markdown against the judge's,
minus that of the teacher's, summed over the site's pages and divided by their number
(``judged_cascade_minus_teacher``; > 0: the cascade is closer to the judge than the teacher
alone).

The cache draws its 5% shadow checks at random (``--seed`` fixes the draw); which pages
it draws moves a site's share. With ``--draws N``, each site's crawl is also replayed
through the cache alone ``N`` times with draws 0..N-1, the teacher's labels computed
once: the served share's mean, lowest and highest (``draws``). ``--departure 0`` turns
the cache's content checks off.

With ``--why``, each site's crawl is also replayed through the cache alone, saying why
each page the template did not serve went to the teacher (``templates.NOT_SERVED``; for a
page of an unverified cluster, also what the template would have said of it), and
which signatures lacked a vote or had a mixed one most often, with the teacher's label counts
for them (main, other) summed over the site's clusters.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
from collections import Counter, defaultdict
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from template_cache import run_site, teacher_settings

from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label.base import LabelOutcome
from dripstream.processors.label.registry import build_labeller
from dripstream.processors.label.templates import (
    BACKOFF_MARK,
    NOT_SERVED,
    TEMPLATE_LABELLER,
    TemplateCache,
    TemplateCascade,
    TemplateSettings,
)
from dripstream.processors.pipeline import simplify_page
from dripstream.processors.training.train import BASELINES, baseline_markdown
from dripstream.topics.records import SimplifiedPage

SITES_DIR = Path("out/sites")
# Debian package -> (documentation root inside it, the site's base URL)
SITES = {
    "postgresql-doc-15": (
        "usr/share/doc/postgresql-doc-15/html",
        "https://www.postgresql.org/docs/15/",
    ),
    "python3.11-doc": ("usr/share/doc/python3.11/html", "https://docs.python.org/3.11/"),
    "git-doc": ("usr/share/doc/git-doc", "https://git-scm.com/docs/"),
    "python-django-doc": (
        "usr/share/doc/python-django-doc/html",
        "https://docs.djangoproject.com/en/3.2/",
    ),
    "sqlite3-doc": ("usr/share/doc/sqlite3", "https://www.sqlite.org/"),
}


def fetch(directory: Path) -> None:
    """Download the documentation packages and unpack them (no installation)."""
    directory.mkdir(parents=True, exist_ok=True)
    missing = [name for name in SITES if not (directory / name).is_dir()]
    if missing:
        subprocess.run(["apt-get", "download", *missing], cwd=directory, check=True)
    for name in missing:
        [deb] = directory.glob(f"{name}_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(directory / name)], check=True)


def crawl(directory: Path, package: str, pages: int, seed: int) -> list[dict]:
    root, base = SITES[package]
    top = directory / package / root
    files = sorted(f for f in top.rglob("*.html") if "_sources" not in f.parts)
    random.Random(seed).shuffle(files)
    return [
        {"url": base + f.relative_to(top).as_posix(), "html": f.read_text(errors="replace")}
        for f in files[:pages]
    ]


def summary(result: dict) -> dict[str, object]:
    audits = result["audits"]
    flags = result["served_flags"]
    half = flags[len(flags) // 2 :]

    def mean(values: list[float]) -> float | None:
        return round(statistics.fmean(values), 4) if values else None

    return {
        "pages": result["pages"],
        "served": result["served"],
        "served_share": round(result["served"] / result["pages"], 3),
        "served_share_second_half": round(sum(half) / len(half), 3) if half else 0.0,
        "served_block_agreement": mean([a["agreement"] for a in audits]),
        "served_exact_pages": sum(1 for a in audits if a["agreement"] == 1.0),
        "served_rouge_vs_teacher": mean([a["rouge_vs_teacher"] for a in audits]),
        # Per judge: ROUGE-5 against the judge's Markdown, cascade minus teacher alone,
        # over all the site's pages (pages served as the teacher would label them add 0).
        "judged_cascade_minus_teacher": {
            name: round(sum(a["judged"][i] for a in audits) / result["pages"], 4)
            for i, name in enumerate(result["judges"])
        },
    }


class Replay:
    """A teacher that answers from labels computed before (keyed by page id)."""

    name = "replay"

    def __init__(self, answers: dict[str, LabelOutcome]) -> None:
        self.answers = answers

    def label(self, pages: Sequence[SimplifiedPage]) -> list[LabelOutcome]:
        return [self.answers[page.page_id] for page in pages]


def draws(
    rows: list[dict], teacher_name: str, count: int, settings: TemplateSettings
) -> dict[str, float]:
    """The served share over ``count`` shadow draws (see the module docstring)."""
    teacher = build_labeller(teacher_name)
    pipeline = teacher_settings(teacher_name)
    pages = [simplify_page(raw_page_from_row(row), pipeline) for row in rows]
    pages = [page for page in pages if isinstance(page, SimplifiedPage)]
    answers = {
        page.page_id: outcome for page, outcome in zip(pages, teacher.label(pages), strict=True)
    }
    shares = []
    for seed in range(count):
        cascade = TemplateCascade(Replay(answers), TemplateCache(settings, seed=seed))
        served = sum(cascade.label([page])[0].labeller == TEMPLATE_LABELLER for page in pages)
        shares.append(served / len(rows))
    return {
        "mean": round(statistics.fmean(shares), 4),
        "lowest": round(min(shares), 4),
        "highest": round(max(shares), 4),
    }


def why(rows: list[dict], teacher_name: str, top: int = 8) -> dict[str, object]:
    """Why the pages the cache did not serve went to the teacher (see the docstring)."""
    teacher = build_labeller(teacher_name)
    cache = TemplateCache(TemplateSettings())
    settings = teacher_settings(teacher_name)
    reasons: Counter[str] = Counter()
    unsure: Counter[str] = Counter()
    for row in rows:
        page = simplify_page(raw_page_from_row(row), settings)
        if not isinstance(page, SimplifiedPage):
            reasons["not labelled (fallback)"] += 1
            continue
        decision = cache.consider(page)
        [outcome] = teacher.label([page])
        reason = NOT_SERVED.get(decision.why_not, "served")
        if decision.why_not == "unverified":  # and what the template would have said
            cluster = cache.sites[decision.site][decision.cluster]
            labels, why_not = cluster.serve(decision.keys, cache.settings, decision.weights)
            reason += f"; verified, it would have {'served' if labels else 'said: ' + why_not}"
        reasons[reason] += 1
        if decision.why_not in ("unknown_blocks", "mixed_labels"):
            cluster = cache.sites[decision.site][decision.cluster]
            for keys in decision.keys:
                vote = cluster.vote(keys, cache.settings)
                if vote is None or vote[1] < cache.settings.agreement:
                    unsure[keys[0]] += 1
        if outcome.labels is not None and (decision.labels is None or decision.shadow):
            cache.teach(decision, outcome.labels, outcome.confidence)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for clusters in cache.sites.values():
        for cluster in clusters:
            for key, (main, other) in cluster.counts.items():
                if not key.startswith(BACKOFF_MARK) and key in unsure:
                    counts[key][0] += main
                    counts[key][1] += other
    return {
        "reasons": dict(reasons),
        "unsure_signatures": [
            {"signature": key, "pages": n, "teacher_main_other": counts[key]}
            for key, n in unsure.most_common(top)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="learned")
    parser.add_argument("--pages", type=int, default=400, help="pages per site, at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fetch", action="store_true", help="download the sites first")
    parser.add_argument("--dir", type=Path, default=SITES_DIR)
    parser.add_argument("--out", default="out/template_sites.json")
    parser.add_argument("--why", action="store_true", help="also say why pages were not served")
    parser.add_argument("--draws", type=int, default=0, help="also replay over this many draws")
    parser.add_argument(
        "--departure", type=float, default=TemplateSettings().departure, help="0: no content check"
    )
    parser.add_argument(
        "--judges",
        action="store_true",
        help="judge served pages that differ from the teacher by trafilatura and rs-trafilatura",
    )
    args = parser.parse_args()
    if args.fetch:
        fetch(args.dir)
    report: dict[str, object] = {"teacher": args.teacher, "seed": args.seed}
    for package in SITES:
        rows = crawl(args.dir, package, args.pages, args.seed)
        judges = BASELINES if args.judges else ()
        result = run_site(
            rows,
            args.teacher,
            TemplateSettings(departure=args.departure),
            [partial(baseline_markdown, name) for name in judges],
            seed=args.seed,
        )
        result["judges"] = list(judges)
        report[package] = summary(result)
        print(package, json.dumps(report[package]), flush=True)
        if args.draws:
            settings = TemplateSettings(departure=args.departure)
            report[package]["draws"] = draws(rows, args.teacher, args.draws, settings)
            print(package, "draws", json.dumps(report[package]["draws"]), flush=True)
        if args.why:
            report[f"{package} why"] = why(rows, args.teacher)
            print(package, "why", json.dumps(report[f"{package} why"]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
