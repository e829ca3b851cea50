"""The command line as a newcomer meets it: standard input, --version, help that shows an
example for every command, and one ``error:`` line with a documented exit code (never a
traceback) for every input or broker failure."""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dripstream.streams.cli import main, make_parser
from dripstream.streams.cli.common import EXIT_BROKER, EXIT_INPUT

ROOT = Path(__file__).resolve().parents[2]
PAGE = "<html><body><article><h1>Tide tables</h1><p>High water is at noon today.</p></article>"


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture
def stdin(monkeypatch: pytest.MonkeyPatch):
    def feed(data: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))

    return feed


# -- input -------------------------------------------------------------------------------


def test_extract_without_a_source_reads_the_page_from_standard_input(stdin, capsys) -> None:
    stdin(PAGE.encode())
    assert main(["extract", "--no-sandbox"]) == 0
    assert "High water is at noon today." in capsys.readouterr().out


def test_jsonl_dash_reads_json_lines_from_standard_input(stdin, tmp_path: Path) -> None:
    rows = [{"id": "a", "url": "https://tide.example/a", "html": PAGE}, {"id": "b", "html": ""}]
    stdin("".join(json.dumps(row) + "\n" for row in rows).encode())
    out = tmp_path / "records.jsonl"
    command = ["extract", "--jsonl", "-", "-o", str(out), "--quiet", "--no-sandbox"]
    assert main([*command, "--labeller", "heuristic"]) == 0  # the labeller serves "a" itself
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["input_id"], r["status"]) for r in records] == [("a", "ok"), ("b", "error")]
    assert "High water is at noon today." in records[0]["markdown"]


def test_jsonl_dash_without_out_prints_records_not_markdown(stdin, capsys) -> None:
    stdin((json.dumps({"id": "a", "html": PAGE}) + "\n").encode())
    assert main(["extract", "--jsonl", "-", "--quiet", "--no-sandbox"]) == 0
    assert json.loads(capsys.readouterr().out)["input_id"] == "a"


def test_version_names_the_package(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("dripstream 0.")


# -- help --------------------------------------------------------------------------------


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = make_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def test_every_option_of_every_command_has_help_text() -> None:
    for name, command in _commands().items():
        for action in command._actions:
            assert action.help and action.help.strip(), (name, action.dest)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_command_s_help_ends_with_an_example(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    lines = capsys.readouterr().out.rstrip().splitlines()
    headers = [n for n, line in enumerate(lines) if line in ("example:", "examples:")]
    assert headers, lines
    examples = lines[headers[-1] + 1 :]
    assert examples, lines
    for line in examples:
        assert line.startswith("  "), lines
        assert line.split()[0] in ("dripstream", "make", "DRIPSTREAM_BROKERS=kafka:9092"), line


def test_top_level_help_is_plain_text_with_exit_codes_and_an_example(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for markup in ("``", ":class:", ":func:", ":meth:", ".. ", "**"):
        assert markup not in out, markup
    assert "exit codes:" in out and "  3  the broker" in out
    assert out.rstrip().splitlines()[-2] == "example:"


# -- input errors: exit 2, one line ------------------------------------------------------


@pytest.fixture
def places(tmp_path: Path) -> Path:
    (tmp_path / "empty").mkdir()
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "a.html").write_text(PAGE)
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    (tmp_path / "page.html").write_text(PAGE)
    return tmp_path


INPUT_ERRORS = {
    "missing file": (["extract", "{d}/missing.html"], "missing.html"),
    "missing jsonl": (["extract", "{d}/missing.jsonl", "-o", "{d}/o.jsonl"], "missing.jsonl"),
    "missing dataset": (["eval", "{d}/missing.jsonl"], "missing.jsonl"),
    "simplify missing file": (["simplify", "{d}/missing.html"], "missing.html"),
    "folder without pages": (["extract", "{d}/empty"], "without HTML files"),
    "folder to simplify": (["simplify", "{d}/pages"], "a folder"),
    "folder as --jsonl": (["extract", "--jsonl", "{d}/pages"], "a folder"),
    "folder as dataset": (["eval", "{d}/pages"], "Is a directory"),
    "folder as output": (["extract", "{d}/page.html", "-o", "{d}/empty"], "Is a directory"),
    "not UTF-8 JSONL": (["extract", "{d}/binary.jsonl", "-o", "{d}/o.jsonl"], "unreadable"),
    "unknown profile": (["extract", "{d}/page.html", "--profile", "nope"], "no model profile"),
    "bad setting": (["config"], "DRIPSTREAM_PAGE_TIMEOUT_S"),
}


@pytest.mark.parametrize("case", sorted(INPUT_ERRORS))
def test_input_errors_are_one_line_with_exit_2(
    case: str, places: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, expected = INPUT_ERRORS[case]
    monkeypatch.setenv("DRIPSTREAM_PAGE_TIMEOUT_S", "0" if case == "bad setting" else "15")
    assert main([part.format(d=places) for part in argv] + ["--quiet"] * (argv[0] == "eval")) == (
        EXIT_INPUT
    )
    assert expected in one_error_line(capsys.readouterr().err)


def test_an_unreadable_file_is_one_line_with_exit_2(
    places: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests may run as root, whom file modes do not stop: the read fails as the OS fails it.
    read_bytes = Path.read_bytes

    def refuse(self: Path) -> bytes:
        if self.name == "page.html":
            raise PermissionError(13, "Permission denied", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert main(["extract", str(places / "page.html"), "--no-sandbox"]) == EXIT_INPUT
    line = one_error_line(capsys.readouterr().err)
    assert line == f"error: Permission denied: {places / 'page.html'}"


def test_an_unknown_choice_is_argparse_s_usage_error_with_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["tail", "nosuchtopic"])
    assert stop.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# -- broker errors: exit 3, one line (in a process of its own: nothing else on stderr) ---


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


BROKER_COMMANDS = {
    "topics create": ["topics", "create"],
    "topics describe": ["topics", "describe"],
    "produce": ["produce", "{page}", "--quiet"],
    "tail": ["tail", "records"],
    "dlq list": ["dlq", "list"],
    "dlq replay": ["dlq", "replay"],
    "worker": ["worker"],
}


@pytest.mark.parametrize("case", sorted(BROKER_COMMANDS))
def test_an_unreachable_broker_is_one_line_with_exit_3(case: str, places: Path) -> None:
    port = _closed_port()
    argv = [part.format(page=places / "page.html") for part in BROKER_COMMANDS[case]]
    result = subprocess.run(
        [sys.executable, "-m", "dripstream.streams.cli", *argv],
        env={**os.environ, "DRIPSTREAM_BROKERS": f"127.0.0.1:{port}"},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == EXIT_BROKER, result.stderr
    line = one_error_line(result.stderr)
    assert line == f"error: broker unreachable at 127.0.0.1:{port} (DRIPSTREAM_BROKERS)"


# -- demo output -------------------------------------------------------------------------


def test_demo_prints_records_whole_by_default_or_says_how_much_was_cut() -> None:
    from dripstream.streams.demo import clip

    text = "First paragraph of the record.\n\nSecond paragraph, " + "long " * 300
    assert clip(text, 0) == text
    assert clip("short", 500) == "short"
    cut = clip(text, 400)
    head, marker = cut.rsplit("\n", 1)
    assert text.startswith(head) and not head.endswith(" ")
    assert marker == f"... ({len(text) - len(head):,} more characters)"
    assert "," in marker  # thousands separator: "... (1,234 more characters)"
