"""The compiled CPU modules (setup.py: mypyc) give exactly the output of their Python source."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hostile_corpus import hostile_cases
from selectolax.lexbor import LexborHTMLParser

from dripstream.processors import native
from dripstream.processors.errors import PageError
from dripstream.processors.extract import markdown, page_hints, simplify
from dripstream.processors.ingest.sources import raw_page_from_row
from dripstream.processors.label import features
from dripstream.processors.label.templates import signatures
from dripstream.processors.pipeline import decoded_page
from dripstream.processors.training.train import load_rows

PURE = os.environ.get("DRIPSTREAM_PURE_PYTHON") == "1"
pytestmark = pytest.mark.skipif(PURE, reason="DRIPSTREAM_PURE_PYTHON=1: nothing compiled")


def from_source(module: str) -> ModuleType:
    """``module`` run from its Python source, beside the compiled one Python imports."""
    name = f"{module}__from_source"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, native.source_path(module))
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # dataclasses look their module up while it loads
    spec.loader.exec_module(loaded)
    return loaded


@pytest.fixture(scope="module")
def pages(data_dir: Path) -> list[str]:
    """Decoded dev pages of every kind: news, every 15th WCXB page, WebMainBench."""
    rows = (
        load_rows(data_dir / "articles_dev.jsonl")[::4]
        + load_rows(data_dir / "publishers_dev.jsonl")[::6]
        + load_rows(data_dir / "wcxb_dev.jsonl.xz")[::15]
        + load_rows(data_dir / "webmainbench_sample.jsonl")[::10]
    )
    return [decoded_page(raw_page_from_row(row)) for row in rows]


def simplified(module: ModuleType, html: str, mark_attr: str | None = None) -> object:
    """What ``simplify`` returns, or the class of the error it raises."""
    try:
        document = module.simplify(html, module.SimplifyConfig(mark_attr=mark_attr))
    except PageError as error:
        return type(error).__name__
    return (
        document.title,
        document.simplified_html,
        document.simplified_blocks,
        document.mapping_blocks,
        document.marked,
        document.hints,
    )


def test_the_build_compiles_every_hot_module() -> None:
    assert native.compiled_modules() == dict.fromkeys(native.COMPILED_MODULES, True)
    assert native.stale_extensions() == []
    for module in native.COMPILED_MODULES:  # what the tests below compare with: the source
        assert (from_source(module).__file__ or "").endswith(".py")


def test_compiled_simplify_gives_the_source_output_on_dev_and_hostile_pages(
    pages: list[str],
) -> None:
    source = from_source("dripstream.processors.extract.simplify")
    hostile = [
        case.data.decode("utf-8", "replace")
        for case in hostile_cases(include_slow=False)
        if len(case.data) < 2**20
    ]
    for html in pages + hostile:
        assert simplified(simplify, html) == simplified(source, html)
    for html in pages[-12:]:  # WebMainBench pages carry cc-select marks
        assert simplified(simplify, html, "cc-select") == simplified(source, html, "cc-select")


def test_compiled_features_and_hints_give_the_source_output(pages: list[str]) -> None:
    source_features = from_source("dripstream.processors.label.features")
    source_hints = from_source("dripstream.processors.extract.page_hints")
    for html in pages:
        assert page_hints.page_hints(LexborHTMLParser(html)) == source_hints.page_hints(
            LexborHTMLParser(html)
        )
        document = simplify.simplify(html)
        args = (document.simplified_html, document.mapping_blocks, document.title, document.hints)
        ours, theirs = features.block_features(*args), source_features.block_features(*args)
        assert ours.matrix.tobytes() == theirs.matrix.tobytes()
        assert (ours.parent, ours.grandparent, ours.signature) == (
            theirs.parent,
            theirs.grandparent,
            theirs.signature,
        )
        p = [(i % 7) / 6 for i in range(len(ours.parent))]
        context = features.context_features(p, ours).tobytes()
        assert context == source_features.context_features(p, theirs).tobytes()


def test_compiled_markdown_gives_the_source_output(pages: list[str]) -> None:
    source = from_source("dripstream.processors.extract.markdown")
    for html in pages:
        blocks = simplify.simplify(html).mapping_blocks
        for fragment in ("".join(blocks), *blocks[:40]):
            assert markdown.html_to_markdown(fragment, "https://example.org/a/") == (
                source.html_to_markdown(fragment, "https://example.org/a/")
            )


def test_compiled_block_keys_give_the_source_keys(pages: list[str]) -> None:
    source = from_source("dripstream.processors.label.templates.signatures")
    for html in pages:
        simplified_html = simplify.simplify(html).simplified_html
        assert signatures.block_keys(simplified_html) == source.block_keys(simplified_html)


def test_an_extension_older_than_its_source_is_reported_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "walk.py"
    source.write_text("x = 1\n")
    extension = source.with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0])
    extension.write_bytes(b"")
    monkeypatch.setattr(native, "COMPILED_MODULES", ("processors.walk",))
    monkeypatch.setattr(native, "source_path", lambda module: source)
    os.utime(extension, (1_000, 1_000))
    os.utime(source, (2_000, 2_000))
    assert native.stale_extensions() == [f"{extension} is older than walk.py"]
    os.utime(extension, (3_000, 3_000))
    assert native.stale_extensions() == []
