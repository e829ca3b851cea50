"""The shape of the code: no import cycle among dripstream's modules, and the layers.

The graph is read from the sources (``ast``): every import a module runs, at its top or
inside a function, counts; imports under ``if TYPE_CHECKING:`` run never and do not. An
``from package import name`` is an edge to ``package.name`` when that is a module, else
to ``package``. Layers, lowest first: ``topics`` (records, codecs, catalog), then
``processors``, then ``gpu_worker``, then ``streams``; a layer imports nothing from a
layer above it (the label registry names GPU labellers by ``"module:attribute"``
strings, which are not imports).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("topics", "processors", "gpu_worker", "streams")
LAYERS = {part: rank for rank, part in enumerate(PARTS)}


def modules() -> dict[str, Path]:
    """dripstream module name -> source file."""
    found = {"dripstream": ROOT / "dripstream" / "__init__.py"}
    for part in PARTS:
        for path in sorted((ROOT / part).rglob("*.py")):
            relative = path.relative_to(ROOT / part).with_suffix("")
            names = [name for name in relative.parts if name != "__init__"]
            found[".".join(("dripstream", part, *names))] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` that can run (not TYPE_CHECKING-only)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _imports_of(other)
            continue
        yield from _imports_of(child)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def graph() -> dict[str, set[str]]:
    """Module -> the dripstream modules it imports."""
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_the_graph_sees_function_level_imports_and_skips_type_checking_ones() -> None:
    edges = graph()
    assert "dripstream.streams.settings" in edges["dripstream.streams.kafka"]
    assert "dripstream.streams.stages" in edges["dripstream.streams.app"]
    source = ast.parse("def f():\n    import dripstream.topics\nif TYPE_CHECKING:\n    import x\n")
    assert [alias.name for node in _imports(source) for alias in node.names] == [
        "dripstream.topics"
    ]


def test_no_import_cycle_among_dripstream_modules() -> None:
    assert cycles(graph()) == []


def test_no_layer_imports_from_a_layer_above_it() -> None:
    upward = sorted(
        (module, target)
        for module, targets in graph().items()
        for target in targets
        if (_layer(module) is not None and _layer(target) is not None)
        and _layer(target) > _layer(module)  # type: ignore[operator]
    )
    assert upward == []
