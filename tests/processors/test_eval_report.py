"""eval reports WCXB's word F1 and snippet rates per page type beside ROUGE-5, and the
template cache's share and agreement when it runs in front of the labeller."""

from __future__ import annotations

from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.label.templates import TemplateCache, TemplateSettings
from dripstream.processors.pipeline import PipelineSettings
from dripstream.processors.training.evaluation import evaluate
from dripstream.processors.training.template_audit import AuditedCascade


def row(number: int, page_type: str) -> dict:
    paragraphs = "".join(
        f"<p>Paragraph {i} of report {number} holds enough ordinary words to be read.</p>"
        for i in range(4)
    )
    html = (
        '<html><body><div class="menu"><a href="/">Home</a></div>'
        f'<article class="report"><h1>Report {number}</h1>{paragraphs}</article>'
        '<div class="extras"><p>Contact the newsroom at the address below.</p></div>'
    )
    gold = f"Report {number}\n\n" + "\n\n".join(
        f"Paragraph {i} of report {number} holds enough ordinary words to be read."
        for i in range(4)
    )
    return {
        "id": f"r{number}",
        "url": f"https://www.reports.example/{number}",
        "html": html,
        "gold_markdown_or_text": gold,
        "meta": {
            "page_type": page_type,
            "with": [f"paragraph 0 of report {number}"],
            "without": ["contact the newsroom"],
        },
    }


def test_eval_reports_word_f1_and_snippets_per_page_type() -> None:
    rows = [row(1, "article"), row(2, "article"), row(3, "forum")]
    report = evaluate(rows, HeuristicLabeller(), PipelineSettings()).to_json()
    assert report["mean_word_f1"] > 0.9 and report["with_found"] == 1.0
    assert report["without_leaked"] == 0.0
    assert set(report["by_page_type"]) == {"article", "forum"}
    assert report["page_count"] == 3 and report["by_page_type"]["article"]["page_count"] == 2
    forum = report["by_page_type"]["forum"]
    assert forum["page_count"] == 1 and forum["mean_word_f1"] == report["pages"][2]["word_f1"]


def test_eval_reports_the_same_keys_for_the_file_and_each_page_type() -> None:
    report = evaluate([row(1, "article")], HeuristicLabeller(), PipelineSettings()).to_json()
    whole = {key for key in report if key not in ("labeller", "by_page_type", "pages")}
    assert set(report["by_page_type"]["article"]) == whole


def test_eval_with_the_template_cache_reports_its_share_and_agreement() -> None:
    cascade = AuditedCascade(
        HeuristicLabeller(), TemplateCache(TemplateSettings(verify_pages=2, shadow_rate=0))
    )
    rows = [row(n, "article") for n in range(10)]
    report = evaluate(rows, cascade, PipelineSettings()).to_json()
    templates = report["templates"]
    assert templates["served_pages"] >= 4
    assert templates["served_block_agreement"] == 1.0
    served = [p for p in report["pages"] if p["extractor"] == "dripper:template"]
    assert len(served) == templates["served_pages"]
    assert all(p["f1"] > 0.9 for p in served)
