"""Wrong records a site-template cache serves after a site moves its story into a place it
had learned as boilerplate (a redesign, or a site steering the cache).

Each of ``--sites`` synthetic news sites is crawled for ``--learn`` pages of one article
layout (a menu, the story in ``<article class="story">``, a box of contact lines), with
the teacher labelling what the cache does not serve. Then ``--pages`` pages of the
redesigned layout follow, the story's paragraphs in the contact box:

- ``move``: a one-line teaser left in the story's place;
- ``decoy``: as many filler paragraphs as the story has left in the story's place (the
  page's main text share stays near the layout's);
- ``dodge``: ``move``, each page's bytes tweaked (a counter in a comment) until its page
  id is one a page-id hash would never draw for a shadow check.

A record is wrong when the template served it and no block it labelled main holds the
story's marker word. Reported per variant: wrong records over all sites, the most on one
site, the pages served, shadow checks and suspensions; and, for the ``learn`` phase, the
share of pages served and the served pages' block agreement with the teacher.
``--departure 0`` turns the content checks off: what the random shadow draw alone catches.

    .venv/bin/python benchmarks/template_redesign.py --teacher learned
"""

from __future__ import annotations

import argparse
import json
import random

from dripstream.processors.extract.html_tags import block_text
from dripstream.processors.label.registry import build_labeller
from dripstream.processors.label.templates import (
    TEMPLATE_LABELLER,
    TemplateCache,
    TemplateCascade,
    TemplateSettings,
)
from dripstream.processors.pipeline import PipelineSettings, simplify_page
from dripstream.topics.records import MAIN, RawPage, SimplifiedPage

WORDS = "tide harbour ferry crossing morning weather cargo island lighthouse route".split()
MARKER = "zanzibarite"  # in every paragraph of a story, nowhere else
VARIANTS = ("move", "decoy", "dodge")


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def page(rng: random.Random, site: int, number: int, variant: str = "") -> RawPage:
    """An article page of ``site``; with a ``variant``, after the redesign."""
    menu = "".join(f'<a href="/s{i}">Section {i}</a>' for i in range(6))
    count = rng.randint(4, 9)
    story = "".join(
        f"<p>{sentence(rng, rng.randint(25, 60))[:-1]} {MARKER}.</p>" for _ in range(count)
    )
    contact = f"<p>{sentence(rng, 15)}</p><p>Contact us.</p>"
    title = f"<h1>{sentence(rng, 6)}</h1>"
    if not variant:
        article, extras = title + story, contact
    elif variant == "decoy":
        filler = "".join(f"<p>{sentence(rng, rng.randint(25, 60))}</p>" for _ in range(count))
        article, extras = title + filler, story + contact
    else:
        article, extras = title + f"<p>{sentence(rng, 8)}</p>", story + contact
    html = (
        f'<html><head><title>Site {site}</title></head><body><div class="menu">{menu}</div>'
        f'<article class="story">{article}</article><div class="extras">{extras}</div>'
        "</body></html>"
    )
    url = f"https://www.site{site}.example/article/{number}"
    if variant != "dodge":
        return RawPage(url=url, html=html.encode())
    for nonce in range(10_000):  # a page id a hash-of-page-id draw never picks
        raw = RawPage(url=url, html=f"{html}<!-- {nonce} -->".encode())
        if int(_simplified(raw).page_id[:8], 16) / 0xFFFFFFFF >= 0.05:
            return raw
    raise RuntimeError("no dodging page id found")


def _simplified(raw: RawPage) -> SimplifiedPage:
    step = simplify_page(raw, PipelineSettings())
    if not isinstance(step, SimplifiedPage):
        raise RuntimeError(f"{raw.url}: {step}")
    return step


def wrong(simplified: SimplifiedPage, labeller: str, labels: list[str]) -> bool:
    """Served by the template without the story's marker in any main block."""
    return labeller == TEMPLATE_LABELLER and not any(
        label == MAIN and MARKER in block_text(block)
        for label, block in zip(labels, simplified.mapping_blocks, strict=True)
    )


def run(args: argparse.Namespace, variant: str) -> dict[str, object]:
    teacher = build_labeller(args.teacher)
    totals = {"learn_pages": 0, "learn_served": 0, "served": 0, "wrong": 0, "most_wrong": 0}
    agreement: list[float] = []
    counts: dict[str, int] = {}
    for site in range(args.sites):
        rng = random.Random(f"{args.seed}-{site}")
        settings = TemplateSettings(shadow_rate=args.shadow_rate, departure=args.departure)
        cache = TemplateCache(settings, seed=site)
        cascade = TemplateCascade(teacher, cache)
        for number in range(args.learn):
            simplified = _simplified(page(rng, site, number))
            [outcome] = cascade.label([simplified])
            totals["learn_pages"] += 1
            if outcome.labeller == TEMPLATE_LABELLER:
                totals["learn_served"] += 1
                [truth] = teacher.label([simplified])
                pairs = list(zip(outcome.labels, truth.labels or [], strict=False))
                agreement.append(sum(a == b for a, b in pairs) / max(1, len(pairs)))
        before = dict(cache.counts)
        site_wrong = 0
        for number in range(args.learn, args.learn + args.pages):
            simplified = _simplified(page(rng, site, number, variant))
            [outcome] = cascade.label([simplified])
            totals["served"] += outcome.labeller == TEMPLATE_LABELLER
            site_wrong += wrong(simplified, outcome.labeller, outcome.labels or [])
        totals["wrong"] += site_wrong
        totals["most_wrong"] = max(totals["most_wrong"], site_wrong)
        for name, value in cache.counts.items():
            counts[name] = counts.get(name, 0) + value - before.get(name, 0)
    return {
        "variant": variant,
        **totals,
        "learn_served_share": round(totals["learn_served"] / max(1, totals["learn_pages"]), 3),
        "learn_served_agreement": round(sum(agreement) / max(1, len(agreement)), 4),
        "redesign_counts": counts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="learned")
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--learn", type=int, default=30, help="pages before the redesign")
    parser.add_argument("--pages", type=int, default=100, help="pages after it")
    parser.add_argument("--shadow-rate", type=float, default=0.05)
    parser.add_argument(
        "--departure", type=float, default=TemplateSettings().departure, help="0: no content check"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    report = {"teacher": args.teacher, "sites": args.sites, "learn": args.learn}
    for variant in args.variants.split(","):
        report[variant] = run(args, variant)
        print(variant, json.dumps(report[variant]), flush=True)


if __name__ == "__main__":
    main()
