"""The import graph of the ``zoo`` package, read from its source, at two levels: which module
imports which (:func:`import_edges`), and which package or top-level module imports which
(:func:`package_edges`).

Every import statement counts: at the top of a module, inside a function, and under
``if TYPE_CHECKING:``. A type checker follows the last kind, so a cycle through it is a cycle
in the design even though it never runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Edges", "import_cycles", "import_edges", "package_edges"]

Edges = dict[tuple[str, str], list[str]]
"""``(importer, imported) -> [file:line, ...]``."""


def _unit(module: str) -> str:
    """The package or top-level module of ``zoo`` that a module belongs to (``zoo`` for the root)."""
    parts = module.split(".")
    return "zoo" if len(parts) == 1 else f"zoo.{parts[1]}"


def _is_module(name: str, root: Path) -> bool:
    """Whether ``name`` (``zoo.tasks.hub``) is a module or package of the zoo at ``root``."""
    path = root.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported(node: ast.AST, module: str, is_package: bool, root: Path) -> Iterator[str]:
    """The modules an import statement names: ``from x import y`` names ``x.y`` where that is a
    module, and ``x`` otherwise. A package's own ``__init__`` is not counted for its submodules:
    Python runs it first, but a package importing its parts is no cycle with them."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = module.split(".")
            base = parts[: len(parts) - node.level + int(is_package)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        for alias in node.names:
            submodule = f"{target}.{alias.name}"
            yield submodule if _is_module(submodule, root) else target


def import_edges(root: Path) -> Edges:
    """The imports between the modules of the package at ``root`` (a package is named by its
    ``__init__``: ``zoo.tasks``)."""
    edges: Edges = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).with_suffix("")
        is_package = path.name == "__init__.py"
        module = ".".join(relative.parts[:-1] if is_package else relative.parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in dict.fromkeys(_imported(node, module, is_package, root)):  # each module once a statement
                if target.split(".")[0] == root.name and target != module:
                    edges.setdefault((module, target), []).append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return edges


def package_edges(edges: Edges) -> Edges:
    """Module edges collapsed onto the zoo's packages and top-level modules (``zoo.tasks``,
    ``zoo.registry``), leaving out the imports inside one of them."""
    collapsed: Edges = {}
    for (source, target), places in edges.items():
        if _unit(source) != _unit(target):
            collapsed.setdefault((_unit(source), _unit(target)), []).extend(places)
    return collapsed


def import_cycles(edges: Edges) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles
