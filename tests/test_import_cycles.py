"""No import circle in ``tlp.model``: every ``import`` of a tlp module, at module level or inside a function (or
under ``TYPE_CHECKING``), read from the source with ``ast``.

Why: a cycle held apart by function-level imports works until someone moves an import to the top, and it makes the
modules impossible to read (or test) one at a time. Checkpoint formats are resolved by name
(:mod:`tlp.model.checkpoint`) instead of by importing each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# Every module imports these (errors, TVM, the platform); they import nothing of the pipeline's, so edges into them
# cannot close a circle worth reporting.
IGNORED_TARGETS = {"tlp", "tlp._tvm", "tlp.platform"}


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module under src/tlp (a package is its ``__init__``)."""
    found = {}
    for path in sorted((SRC / "tlp").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` names: itself, else its nearest enclosing module (``tlp.x.f`` of a function ``f``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the tlp modules it imports anywhere in its source (edges into IGNORED_TARGETS left out)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # ``from tlp.x import y``: the submodule tlp.x.y when there is one, else tlp.x itself.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                if not target.startswith("tlp"):
                    continue
                module = _target(target, modules)
                if module and module != name and module not in IGNORED_TARGETS:
                    graph[name].add(module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each sorted): every import circle is in one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph is small enough for recursion
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _within(graph: dict[str, set[str]], prefix: str) -> dict[str, set[str]]:
    return {m: {t for t in targets if t.startswith(prefix)} for m, targets in graph.items() if m.startswith(prefix)}


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "tlp.model.estimator" in graph["tlp.model.composite"]  # a module-level import
    assert "tlp.model.checkpoint" in graph["tlp.model.estimator"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_model_modules():
    graph = import_graph()
    assert cycles(_within(graph, "tlp.model.")) == []
    # Nor a circle through another package that comes back into tlp.model.
    assert [c for c in cycles(graph) if any(m.startswith("tlp.model.") for m in c)] == []


def test_no_import_cycle_anywhere_in_tlp():
    assert cycles(import_graph()) == []


def test_checkpoint_formats_name_loaders_that_exist():
    import importlib

    from tlp.model.checkpoint import FORMATS

    for kind, where in FORMATS.items():
        module, _, name = where.partition(":")
        assert hasattr(importlib.import_module(module), name), kind
        assert module in import_graph()  # a module of tlp, so the graph above covers it
