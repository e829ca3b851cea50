"""The dripstream command line, run in-process through its entry point."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest
from warc_helpers import write_warc

from dripstream.streams.cli import main

ARTICLE = """<html><head><title>Night trains</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About</a></nav>
<article><h1>Night trains are back</h1>
<p>Sleeper services returned to six routes this winter, and most of the cabins sold out within
days of going on sale, which surprised even the operators who had planned the timetable.</p>
<p>Travellers cite the comfort of boarding in the evening and waking up in another country,
without the airport queues that make short flights feel much longer than they are.</p>
<p>See the <a href="/routes">route map</a> for departures.</p></article>
<footer>© Rail Weekly</footer></body></html>"""


@pytest.fixture
def article_file(tmp_path: Path) -> Path:
    path = tmp_path / "article.html"
    path.write_text(ARTICLE, encoding="utf-8")
    return path


def test_extract_prints_markdown_of_the_main_content(article_file: Path, capsys) -> None:
    url = ["--url", "https://rail.example/n/1", "--labeller", "heuristic"]
    assert main(["extract", str(article_file), *url]) == 0
    out = capsys.readouterr().out
    assert "# Night trains are back" in out
    assert "[route map](https://rail.example/routes)" in out
    assert "Home" not in out and "Rail Weekly" not in out


def test_extract_json_gives_the_record_fields(article_file: Path, capsys) -> None:
    assert main(["extract", str(article_file), "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "ok"
    assert record["extractor"] == "dripper:learned"
    assert record["title"] == "Night trains"
    assert record["main_block_count"] >= 3
    assert len(record["id"]) == 32


def test_extract_reports_unusable_input_with_its_class(tmp_path: Path, capsys) -> None:
    path = tmp_path / "doc.pdf"
    path.write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj")
    assert main(["extract", str(path)]) == 2
    assert "error: NotHtml" in capsys.readouterr().err


def report_page(number: int) -> dict[str, str]:
    """A page of one site's report layout (a line of ``extract --jsonl`` input)."""
    paragraphs = "".join(
        f"<p>Paragraph {i} of report {number} has enough ordinary words to be the story.</p>"
        for i in range(4)
    )
    html = (
        '<html><body><div class="menu"><a href="/">Home</a> <a href="/about">About</a></div>'
        f'<article class="report"><h1>Report {number}</h1>{paragraphs}</article>'
        '<div class="extras"><p>Contact the newsroom at the address below.</p></div>'
    )
    return {"id": f"r{number}", "url": f"https://www.reports.example/r/{number}", "html": html}


def test_extract_with_the_template_cache_serves_a_sites_pages_after_it_verified(
    tmp_path: Path,
) -> None:
    source = tmp_path / "site.jsonl"
    source.write_text("".join(json.dumps(report_page(n)) + "\n" for n in range(20)))
    target = tmp_path / "out.jsonl"
    options = ["--out", str(target), "--quiet", "--labeller", "heuristic", "--no-sandbox"]
    assert main(["extract", "--jsonl", str(source), "--template-cache", *options]) == 0
    records = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    extractors = [r["extractor"] for r in records]
    # One batch: page 0 starts the template, pages 2-4 (each with two teacher pages
    # before it) verify it, and page 5 on is served, each knowing the answers before it.
    assert extractors[:5] == ["dripper:heuristic"] * 5, extractors
    assert extractors[5:] == ["dripper:template"] * 15, extractors
    assert all("to be the story" in r["markdown"] for r in records)
    assert not any("Contact the newsroom" in r["markdown"] for r in records)


def test_extract_with_the_template_cache_follows_the_template_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRIPSTREAM_TEMPLATE_VERIFY_PAGES", "6")
    source = tmp_path / "site.jsonl"
    source.write_text("".join(json.dumps(report_page(n)) + "\n" for n in range(20)))
    target = tmp_path / "out.jsonl"
    options = ["--out", str(target), "--quiet", "--labeller", "heuristic", "--no-sandbox"]
    assert main(["extract", "--jsonl", str(source), "--template-cache", *options]) == 0
    extractors = [json.loads(line)["extractor"] for line in target.read_text().splitlines()]
    # Six teacher pages verify the template (pages 2-7), so page 8 is the first served.
    assert extractors[:8] == ["dripper:heuristic"] * 8, extractors
    assert extractors[8:] == ["dripper:template"] * 12, extractors


def test_extract_jsonl_writes_one_line_per_input_line(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    lines = [
        {"id": "a", "url": "https://rail.example/a", "html": ARTICLE},
        {"id": "b", "url": "https://rail.example/b", "html": ""},
        {"id": "c", "url": "https://rail.example/c", "html": '{"not": "html"}'},
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    target = tmp_path / "out.jsonl"
    options = ["--out", str(target), "--quiet", "--labeller", "heuristic"]
    assert main(["extract", "--jsonl", str(source), *options]) == 0
    results = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert [r["input_id"] for r in results] == ["a", "b", "c"]
    assert [r["status"] for r in results] == ["ok", "error", "error"]
    assert [r.get("error_class") for r in results[1:]] == ["EmptyDocument", "NotHtml"]
    assert "Night trains are back" in results[0]["markdown"]


def test_simplify_shows_blocks_and_token_counts(article_file: Path, capsys) -> None:
    assert main(["simplify", str(article_file)]) == 0
    captured = capsys.readouterr()
    assert '_item_id="1"' in captured.out
    assert "<nav" not in captured.out
    assert "blocks: " in captured.err and "estimate:utf8-bytes/4" in captured.err


def test_eval_json_has_the_documented_shape(data_dir: Path, capsys) -> None:
    dataset = data_dir / "webmainbench_sample.jsonl"
    assert main(["eval", str(dataset), "--labeller", "oracle", "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"mean_f1", "mean_precision", "mean_recall", "pages"}
    assert len(report["pages"]) == 9
    page = report["pages"][0]
    assert set(page) >= {"id", "subset", "f1", "precision", "recall", "extractor"}
    assert {p["subset"] for p in report["pages"]} == {"real", "synthetic"}
    real = [p["f1"] for p in report["pages"] if p["subset"] == "real"]
    # Simplification + reconstruction lose almost nothing on the real annotated pages.
    assert sum(real) / len(real) >= 0.95


def test_unknown_labeller_is_refused(article_file: Path) -> None:
    with pytest.raises(SystemExit):
        main(["extract", str(article_file), "--labeller", "gpt"])


def test_extract_reads_a_warc_file_into_records(tmp_path: Path) -> None:
    warc = tmp_path / "crawl.warc.gz"
    write_warc(
        warc,
        [
            ("https://rail.example/n/1", "text/html", ARTICLE.encode()),
            ("https://rail.example/n/2", "text/html; charset=utf-8", ARTICLE.encode()),
        ],
    )
    out = tmp_path / "records.jsonl"
    assert main(["extract", str(warc), "-o", str(out), "--quiet", "--labeller", "heuristic"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["url"] for r in records] == ["https://rail.example/n/1", "https://rail.example/n/2"]
    assert all("# Night trains are back" in r["markdown"] for r in records)


def test_a_missing_input_is_one_error_line_not_a_traceback(tmp_path: Path, capsys) -> None:
    assert main(["extract", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.splitlines()) == 1


def test_eval_with_an_unknown_profile_is_one_error_line(tmp_path: Path, capsys) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("")
    assert main(["eval", str(data), "--profile", "no-such-profile"]) == 2
    assert "no model profile" in capsys.readouterr().err


@pytest.mark.slow
def test_train_writes_a_model_with_every_pass_and_a_checked_rule(
    tmp_path: Path, data_dir: Path, capsys
) -> None:
    """``dripstream train`` on a small copy of the dev files: the grouped CV (with
    trafilatura in both modes on every page, which the second-opinion rule is fitted
    on), then the model file, which the learned labeller loads; it carries the rule only
    where the check on held-out sites says it pays."""
    from dripstream.processors.label.learned import LearnedLabeller, LearnedModel
    from dripstream.processors.training.train import CONTEXT_PASSES, TRAIN_FILES, load_rows

    data = tmp_path / "data"
    data.mkdir()
    for name in TRAIN_FILES:  # 12 pages spread over each file, under the files' own names
        rows = load_rows(data_dir / name)
        lines = "".join(json.dumps(row) + "\n" for row in rows[:: len(rows) // 12][:12])
        packed = lzma.compress(lines.encode()) if name.endswith(".xz") else lines.encode()
        (data / name).write_bytes(packed)
    model = tmp_path / "model.json"
    assert main(["train", "--data", str(data), "--model", str(model)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pages"] == {"wcxb_dev": 12, "articles_dev": 12, "publishers_dev": 12}
    loaded = LearnedModel.load(model)
    assert len(loaded.context_boosters) == CONTEXT_PASSES and loaded.calibration is not None
    check = loaded.meta["second_opinion_check"]
    assert (loaded.second_opinion is not None) == check["ships"]
    [outcome] = LearnedLabeller(loaded).label([_simplified(ARTICLE)])
    assert outcome.ok


def _simplified(html: str):
    from dripstream.processors.ingest.sources import raw_page_from_row
    from dripstream.processors.pipeline import PipelineSettings, simplify_page

    return simplify_page(
        raw_page_from_row({"url": "https://rail.example/n/2", "html": html}), PipelineSettings()
    )
