"""The settings spine: every ``DRIPSTREAM_*`` variable declared once, every bad value
refused with the variable named, no environment read below the entry points."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.processors.sinks import open_sink
from dripstream.processors.sinks.search import SearchOptions
from dripstream.streams.cli import main
from dripstream.streams.settings import (
    BUILD_VARIABLES,
    BY_NAME,
    COMPONENTS,
    FALSE,
    SETTINGS,
    TRUE,
    Setting,
    SettingsError,
    StreamSettings,
)

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("topics", "processors", "gpu_worker", "streams")
SPINE = Path("streams/settings.py")
NAME = re.compile(r"\bDRIPSTREAM_[A-Z0-9_]+\b(?!\*)")  # DRIPSTREAM_SEARCH_* names a family

# Reading or passing the process environment is allowed only here, each for a reason:
ENVIRONMENT_READERS = {
    # the spine: StreamSettings.from_env reads the environment once, for the entry points
    # (the CLI's main parses it before every command; the worker gets it from there)
    Path("streams/settings.py"),
    # the sandbox child inherits its parent's environment (plus PYTHONPATH): pass-through
    Path("processors/extract/sandbox.py"),
    # vLLM's CPU build reads VLLM_CPU_* from the environment; the engine sets them
    Path("gpu_worker/engine.py"),
    # the demo starts worker processes with a copy of the caller's environment
    Path("streams/demo.py"),
}


def product_files() -> list[Path]:
    files = [path for folder in PRODUCT for path in sorted((ROOT / folder).rglob("*.py"))]
    return [path.relative_to(ROOT) for path in files]


def docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def names_in(node: ast.AST, skip: set[int] = frozenset()) -> set[str]:  # type: ignore[assignment]
    """DRIPSTREAM_* names in the string literals under ``node`` (docstrings left out)."""
    names = set()
    for child in ast.walk(node):
        if (
            isinstance(child, ast.Constant)
            and isinstance(child.value, str)
            and id(child) not in skip
        ):
            names.update(NAME.findall(child.value))
    return names


# -- one declaration ---------------------------------------------------------------------


def test_the_spine_declares_each_variable_once_with_a_known_component() -> None:
    names = [setting.env for setting in SETTINGS]
    assert len(names) == len(set(names)), "a variable declared twice"
    assert all(NAME.fullmatch(name) for name in names)
    assert {setting.component for setting in SETTINGS} <= set(COMPONENTS)
    assert all(setting.doc and "\n" not in setting.doc for setting in SETTINGS)
    assert not set(BUILD_VARIABLES) & set(names)


def test_every_variable_the_product_names_is_declared_in_the_spine() -> None:
    used: dict[str, set[Path]] = {}
    for path in product_files():
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        for name in names_in(tree, docstring_nodes(tree)):
            used.setdefault(name, set()).add(path)
    undeclared = {
        name: sorted(map(str, paths))
        for name, paths in used.items()
        if name not in BY_NAME and name not in BUILD_VARIABLES
    }
    assert not undeclared
    assert len(used) > 40  # the scan sees the product's names


def top_level_assignments(tree: ast.Module) -> list[ast.Assign | ast.AnnAssign]:
    """Assignments in a module's or a class's body: where a declaration table would live."""
    bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    return [
        node for body in bodies for node in body if isinstance(node, (ast.Assign, ast.AnnAssign))
    ]


def test_no_other_module_holds_a_table_of_variables() -> None:
    tables = []
    for path in product_files():
        if path == SPINE:
            continue
        for node in top_level_assignments(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
            value = node.value
            # several variables in one literal: a second declaration table
            collection = isinstance(value, (ast.Tuple, ast.List, ast.Dict, ast.Set))
            if collection and len(names_in(value)) >= 2:
                tables.append(f"{path}:{node.lineno}")
            # a prefix to build names from (DRIPSTREAM_VLLM_ + suffix) hides them from grep
            text = value.value if isinstance(value, ast.Constant) else None
            if isinstance(text, str) and text.startswith("DRIPSTREAM_") and text.endswith("_"):
                tables.append(f"{path}:{node.lineno}")
    assert not tables
    import dripstream.processors.sinks.search as search

    assert not hasattr(search, "SEARCH_SETTINGS")
    assert not (ROOT / "gpu_worker" / "settings.py").exists()


def test_the_build_variable_is_read_by_setup_py_only() -> None:
    assert "DRIPSTREAM_PURE_PYTHON" in (ROOT / "setup.py").read_text()
    assert set(BUILD_VARIABLES) == {"DRIPSTREAM_PURE_PYTHON"}


# -- no environment below the entry points ------------------------------------------------


ENVIRONMENT = {"environ", "environb", "getenv", "putenv", "unsetenv"}


def environment_uses(tree: ast.AST) -> list[int]:
    """Lines that touch ``os.environ`` / ``os.getenv`` (or import them from os)."""
    lines = []
    for node in ast.walk(tree):
        attribute = (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in ENVIRONMENT
        )
        imported = (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and bool({alias.name for alias in node.names} & ENVIRONMENT)
        )
        if attribute or imported:
            lines.append(node.lineno)
    return lines


def test_nothing_below_the_entry_points_reads_the_environment() -> None:
    readers = {}
    for path in product_files():
        lines = environment_uses(ast.parse((ROOT / path).read_text(encoding="utf-8")))
        if lines and path not in ENVIRONMENT_READERS:
            readers[str(path)] = lines
    assert not readers
    assert all((ROOT / path).exists() for path in ENVIRONMENT_READERS)


# -- every bad value refused --------------------------------------------------------------

FREE_TEXT = [setting for setting in SETTINGS if setting.free_text]


def bad_values(setting: Setting) -> list[str]:
    """Values the setting must refuse. Free text (paths, user names, addresses, prefixes,
    a sink spec, a profile name: any text is a value) has none: ``FREE_TEXT``."""
    if setting.kind is bool:
        return ["abc", "maybe", "2"]
    if setting.kind is tuple:  # the stage names are the stage registry's to check (below)
        if not setting.options():
            return [",", " , "]
        return ["no-such-item", f"{setting.options()[0]},no-such-item", ","]
    if setting.kind is str:
        return ["no-such-choice"]
    values = ["abc", "1e999" if setting.kind is float else "1.5"]
    if setting.low is not None:
        values.append(str(setting.low if setting.above else setting.low - 1))
    if setting.high is not None:
        values.append(str(setting.high + 1))
    return values


CASES = [
    pytest.param(setting.env, value, id=f"{setting.env}={value}")
    for setting in SETTINGS
    if not setting.free_text
    for value in bad_values(setting)
]


@pytest.mark.parametrize(("name", "value"), CASES)
def test_every_bad_value_is_refused_with_the_variable_and_the_form(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as refused:
        StreamSettings.from_env({name: value})
    message = str(refused.value)
    assert message.startswith(f"{name}={value!r}: expected "), message
    assert "\n" not in message


def test_only_free_text_goes_without_a_bad_value() -> None:
    assert all(setting.kind is str and not setting.options() for setting in FREE_TEXT)
    exempt = {setting.env for setting in FREE_TEXT}
    assert "DRIPSTREAM_SECOND_OPINION" not in exempt and "DRIPSTREAM_LOG_LEVEL" not in exempt
    assert len(CASES) > 2 * (len(SETTINGS) - len(FREE_TEXT))


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.kind is bool], ids=lambda s: s.env)
def test_every_boolean_takes_one_rule(setting: Setting) -> None:
    for spelling in TRUE + tuple(word.upper() for word in TRUE) + (" On ",):
        assert StreamSettings.from_env({setting.env: spelling}).value(setting) is True
    for spelling in FALSE + tuple(word.upper() for word in FALSE):
        assert StreamSettings.from_env({setting.env: spelling}).value(setting) is False


def test_unset_and_empty_take_the_default_and_options_keep_their_own() -> None:
    defaults = StreamSettings.from_env({})
    assert defaults.search == SearchOptions()
    assert StreamSettings.from_env({"DRIPSTREAM_SEARCH_RETRIES": ""}).search == SearchOptions()
    assert defaults.learned.min_confidence is None  # the learned labeller: no floor
    assert defaults.limits().timeout_s == 15 and defaults.limits().memory_mib == 160
    options = StreamSettings.from_env(
        {"DRIPSTREAM_SEARCH_RETRIES": "2", "DRIPSTREAM_SEARCH_VERIFY_TLS": "off"}
    ).search
    assert (options.retries, options.verify_tls) == (2, False)


def test_the_search_password_file_fills_the_password(tmp_path: Path) -> None:
    secret = tmp_path / "search.password"
    secret.write_text("hunter2\n")
    settings = StreamSettings.from_env({"DRIPSTREAM_SEARCH_PASSWORD_FILE": str(secret)})
    assert settings.search.password == "hunter2"
    with pytest.raises(SettingsError, match="DRIPSTREAM_SEARCH_PASSWORD_FILE"):
        StreamSettings.from_env({"DRIPSTREAM_SEARCH_PASSWORD_FILE": str(tmp_path / "none")})


def test_the_search_sink_gets_the_settings_options() -> None:
    options = StreamSettings.from_env({"DRIPSTREAM_SEARCH_RETRIES": "2"}).search
    sink = open_sink("opensearch:http://127.0.0.1:1/probe", options)
    try:
        assert sink.options.retries == 2  # type: ignore[attr-defined]
    finally:
        sink.close()


def test_the_learned_vllm_chain_applies_its_own_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    from dripstream.gpu_worker import labeller as module

    monkeypatch.setattr(
        module.VllmLabeller, "from_options", classmethod(lambda cls, options: HeuristicLabeller())
    )
    unset = module.learned_then_vllm(StreamSettings.from_env({}).labeller_options())
    assert unset.first.min_confidence == module.CHAIN_MIN_CONFIDENCE == 0.5
    env = {"DRIPSTREAM_LEARNED_MIN_CONFIDENCE": "0.3"}
    chosen = module.learned_then_vllm(StreamSettings.from_env(env).labeller_options())
    assert chosen.first.min_confidence == 0.3


# -- the command line ---------------------------------------------------------------------

COMMANDS = [
    ["extract", "page.html"],
    ["eval", "dataset.jsonl"],
    ["simplify", "page.html"],
    ["worker"],
    ["produce", "page.html"],
    ["topics", "describe"],
    ["tail", "records"],
    ["dlq", "list"],
    ["search", "tides"],
    ["templates", "list"],
    ["config"],
    ["demo"],
    ["soak"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_every_command_checks_the_settings_before_any_work(
    argv: list[str], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRIPSTREAM_LEARNED_MIN_CONFIDENCE", "abc")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: DRIPSTREAM_LEARNED_MIN_CONFIDENCE='abc': expected a number >= 0 and <= 1"
    )


@pytest.mark.parametrize(
    ("variable", "value", "argv"),
    [
        ("DRIPSTREAM_LEARNED_MIN_CONFIDENCE", "abc", ["extract", "{page}"]),
        ("DRIPSTREAM_SECOND_OPINION", "maybe", ["extract", "{page}"]),
        ("DRIPSTREAM_PAGE_MEMORY_MIB", "12", ["eval", "{page}"]),
    ],
)
def test_a_bad_setting_exits_2_with_one_line_and_no_traceback(
    variable: str, value: str, argv: list[str], tmp_path: Path
) -> None:
    page = tmp_path / "page.html"
    page.write_text("<html><body><p>A page.</p></body></html>")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIPSTREAM_")}
    run = subprocess.run(
        [sys.executable, "-m", "dripstream.streams.cli", *(a.format(page=page) for a in argv)],
        env={**env, variable: value},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {variable}={value!r}: expected ")


def test_config_lists_every_variable_by_component_with_secrets_masked(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "search.password"
    secret.write_text("file-secret\n")
    monkeypatch.setenv("DRIPSTREAM_SASL_PASSWORD", "env-secret")
    monkeypatch.setenv("DRIPSTREAM_SEARCH_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("DRIPSTREAM_VLLM_DTYPE", "bfloat16")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "env-secret" not in out and "file-secret" not in out
    lines = out.splitlines()
    settings = [line.partition("=") for line in lines if not line.startswith("#")]
    shown = {name: value for name, _, value in settings}
    assert [name for name, _, _ in settings] == [
        setting.env
        for component in COMPONENTS
        for setting in SETTINGS
        if setting.component == component
    ]
    assert shown["DRIPSTREAM_SASL_PASSWORD"] == "***"
    assert shown["DRIPSTREAM_SEARCH_PASSWORD"] == "***"
    assert shown["DRIPSTREAM_SEARCH_PASSWORD_FILE"] == str(secret)
    assert shown["DRIPSTREAM_VLLM_DTYPE"] == "bfloat16"
    assert [line for line in lines if line.startswith("#")] == [f"# {c}" for c in COMPONENTS]


@pytest.mark.parametrize("value", ["no-such-stage", "simplify,no-such-stage"])
def test_an_unknown_stage_is_refused_by_the_registry_as_a_bad_setting(value: str) -> None:
    from dripstream.streams.stages import StageSetupError, chosen

    stages = StreamSettings.from_env({"DRIPSTREAM_STAGES": value}).stages
    with pytest.raises(StageSetupError) as refused:
        chosen(stages)
    assert isinstance(refused.value, SettingsError)
    assert str(refused.value).startswith(f"DRIPSTREAM_STAGES={value!r}: expected ")
    assert "no-such-stage" in str(refused.value)


def test_a_worker_with_an_unknown_stage_exits_2_before_asking_the_broker() -> None:
    env = {**os.environ, "DRIPSTREAM_BROKERS": "127.0.0.1:1"}  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "dripstream.streams.cli", "worker", "--stages", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: DRIPSTREAM_STAGES='nope': expected ")
    assert "Traceback" not in result.stderr and "broker" not in result.stderr


def test_an_offline_command_checks_a_set_stage_list_and_loads_no_stage_for_the_default(
    tmp_path: Path,
) -> None:
    from dripstream.streams.stages import DEFAULT_STAGES, chosen

    assert [stage.name for stage in chosen(DEFAULT_STAGES)] == list(DEFAULT_STAGES)
    page = tmp_path / "page.html"
    page.write_text("<html><body><article><p>" + "Some words here. " * 20 + "</p></article>")
    script = (
        "import sys\n"
        "from dripstream.streams.cli import main\n"
        f"code = main(['extract', {str(page)!r}, '--url', 'https://a.example', '--no-sandbox'])\n"
        "print('stages loaded:', 'dripstream.streams.stages' in sys.modules, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    default = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert default.returncode == 0, default.stderr
    assert "stages loaded: False" in default.stderr
    env = {**os.environ, "DRIPSTREAM_STAGES": "simplify,nope"}
    refused = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: DRIPSTREAM_STAGES='simplify,nope': expected ")
