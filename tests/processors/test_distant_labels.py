"""Documentation pages labelled by their own markup: the region rule, the shipped file,
and that those pages train but are never scored."""

from __future__ import annotations

from pathlib import Path

from dripstream.processors.training.distant import (
    DISTANT_SITES,
    load_distant_rows,
    main_region_text,
)
from dripstream.processors.training.train import (
    DISTANT,
    cross_validate,
    cv_splits,
    held_out_training,
    load_rows,
    prepare_pages,
)

BODY = " ".join(f"The function returns the parsed value number {n}." for n in range(8))
SIDEBAR = "Previous topic Next topic Show source Quick search"


def _page(main: str) -> str:
    return (
        f"<html><body><div class='sphinxsidebar'>{SIDEBAR}</div>{main}"
        "<div class='footer'>Copyright the authors</div></body></html>"
    )


def test_the_region_a_page_declares_main_is_its_gold_text() -> None:
    main = f"<div class='body' role='main'><h1>parse</h1><p>{BODY}</p><script>x=1</script></div>"
    text = main_region_text(_page(main))
    assert text is not None and "parse" in text and "number 7" in text
    assert "Quick search" not in text and "Copyright" not in text and "x=1" not in text
    assert main_region_text(_page(f"<main><p>{BODY}</p></main>")) is not None


def test_a_page_declaring_no_region_or_several_or_a_short_one_gives_none() -> None:
    assert main_region_text(_page(f"<div class='body'><p>{BODY}</p></div>")) is None
    assert main_region_text(_page(f"<main><p>{BODY}</p></main><main><p>{BODY}</p></main>")) is None
    assert main_region_text(_page("<main><p>Too short to train on.</p></main>")) is None


def test_a_docbook_page_is_its_one_top_level_section() -> None:
    html = (
        "<html><body><div class='navheader'>Prev Up Next</div>"
        f"<div class='sect1'><h2>Overview</h2><p>{BODY}</p></div>"
        "<div class='navfooter'>Prev Home Next</div></body></html>"
    )
    text = main_region_text(html)
    assert text is not None and "Overview" in text and "Prev" not in text


def test_the_shipped_pages_have_gold_text_and_are_grouped_by_their_site() -> None:
    rows = load_distant_rows()
    hosts = {host for _docs, host in DISTANT_SITES.values()}
    assert len(rows) >= 500
    assert {row["meta"]["domain"] for row in rows} == hosts
    assert all(row["meta"]["page_type"] == "documentation" for row in rows)
    assert all(len(row["gold_markdown_or_text"].split()) >= 50 for row in rows)
    pages = prepare_pages(rows[::100], DISTANT)
    assert all({0.0, 1.0} <= set(page.y) for page in pages if len(page.y) > 5)


def test_distant_pages_train_but_are_never_scored(data_dir: Path) -> None:
    news = prepare_pages(load_rows(data_dir / "articles_dev.jsonl")[:8], "articles_dev")
    one_a_site = {row["meta"]["domain"]: row for row in load_distant_rows()}
    distant = prepare_pages(list(one_a_site.values()), DISTANT)
    report = cross_validate(pages=news + distant, seed=0, baselines=(), num_trees=3)
    assert {result.file for result in report.results} == {"articles_dev"}
    assert len(report.results) == len(news)


def test_a_distant_page_of_a_scored_site_is_left_out_of_its_training() -> None:
    rows = load_distant_rows()
    first = rows[0]
    other = next(row for row in rows if row["meta"]["domain"] != first["meta"]["domain"])
    same_site, other_site = prepare_pages([first, other], DISTANT)
    test = prepare_pages([{**first, "id": "scored"}], "wcxb_dev")
    assert held_out_training([same_site, other_site, *test], test) == [other_site]


def test_cv_splits_score_every_page_once_and_never_train_on_a_scored_site() -> None:
    rows = load_distant_rows()
    scored = prepare_pages(rows[::60], "wcxb_dev")
    distant = prepare_pages(rows[30::60], DISTANT)
    splits = cv_splits(scored + distant, folds=3, seed=0)
    assert sorted(id(page) for _, test, _ in splits for page in test) == sorted(map(id, scored))
    for _, test, training in splits:
        sites = {page.group for page in test}
        assert not sites & {page.group for page in training}
        assert [page for page in training if page.file == DISTANT] == [
            page for page in distant if page.group not in sites
        ]
