"""The package's layering: no import cycle, and no import against the layer order.

Every ``import`` and ``from ... import`` of an rltrain module counts, wherever it is written:
at module level, inside a function, or under ``if TYPE_CHECKING:``. A module may import its own
layer and the layers below; the order is the one docs/architecture.md draws.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rltrain"

#: The folders of ``rltrain/``, lowest first, one layer each. Below them all, the records: the
#: package's own modules (``types``, ``errors``, ``_version``); above them all, the package's
#: ``__init__`` (the public names).
LAYERS: list[str] = [
    "runtime", "settings", "observe", "buffers", "envs", "optim", "agents", "checkpoint",
    "strategies", "config", "trainer", "inference", "cli",
]
#: The modules directly in ``rltrain/``: the records every layer may import.
RECORDS = ("types", "errors", "_version")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> int:
    """``module``'s layer: 0 for a record, ``len(LAYERS) + 1`` for the package's ``__init__``,
    else one more than its folder's index in :data:`LAYERS`."""
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS) + 1
    if parts[1] in RECORDS and len(parts) == 2:
        return 0
    assert parts[1] in LAYERS, f"{module} is in no layer: add its folder to LAYERS (and " \
        "docs/architecture.md)"
    return LAYERS.index(parts[1]) + 1


def target(name: str) -> str | None:
    """The rltrain module an import names (a package's ``__init__`` for a package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, source: str | None = None) -> set[str]:
    """Every rltrain module ``module`` imports (in ``source``, default its file), at any level
    of its code."""
    found = set()
    text = MODULES[module].read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from rltrain.x import y`` runs rltrain/x (a package's __init__), and y too
            # when y is a module of its own.
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found |= {t for t in map(target, names) if t is not None}
        elif isinstance(node, ast.Import):
            found |= {t for t in (target(a.name) for a in node.names) if t is not None}
    return {t for t in found if t.startswith("rltrain") and t != module}


GRAPH = {module: imports(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(GRAPH) == []


def upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports of a higher layer's module, one line each."""
    return sorted(f"{module} (layer {layer_of(module)}) imports {other} (layer "
                  f"{layer_of(other)})" for module, others in graph.items()
                  for other in others if layer_of(other) > layer_of(module))


def test_no_module_imports_a_higher_layer() -> None:
    found = upward(GRAPH)
    assert found == [], "\n".join(found)


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between folders (a record counts as its module's name)."""
    def folder(module: str) -> str:
        return module.split(".")[1] if "." in module else module

    found: dict[str, set[str]] = {}
    for module, others in graph.items():
        found.setdefault(folder(module), set()).update(
            folder(o) for o in others if folder(o) != folder(module))
    return found


def test_no_import_cycle_between_folders() -> None:
    assert cycles(folder_graph(GRAPH)) == []


def test_every_folder_has_its_layer_and_only_records_sit_beside_them() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(LAYERS)
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == set(RECORDS)


def test_the_records_import_nothing_from_rltrain() -> None:
    assert GRAPH["rltrain.types"] == set()


def test_importing_a_name_from_a_package_counts_as_importing_the_package() -> None:
    """``from rltrain import checkpoint`` runs rltrain/__init__, which imports every layer: a
    cycle if the runner wrote it."""
    assert imports("rltrain.envs.runner", "from rltrain import checkpoint") == {
        "rltrain", "rltrain.checkpoint"}
    assert imports("rltrain.envs.runner", "from rltrain.envs import pickling") == {
        "rltrain.envs", "rltrain.envs.pickling"}
    assert imports("rltrain.envs.runner", "from rltrain.envs.pickling import loads") == {
        "rltrain.envs.pickling"}
    assert "rltrain" not in GRAPH["rltrain.envs.runner"]


@pytest.mark.parametrize("edge", [("rltrain.types", "rltrain.envs.runner"),
                                  ("rltrain.agents.base", "rltrain.trainer")])
def test_a_back_edge_is_caught(edge: tuple[str, str]) -> None:
    """The checks fail on a cycle or an upward import written by hand."""
    module, other = edge
    graph = {name: set(others) for name, others in GRAPH.items()}
    graph[module].add(other)
    assert any(line.startswith(f"{module} ") and f"imports {other} " in line
               for line in upward(graph))
    assert any(module in cycle and other in cycle for cycle in cycles(graph))
