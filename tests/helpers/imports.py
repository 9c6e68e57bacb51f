"""The import graph of the ``zoo`` package, read from its source: which package or top-level
module imports which, counting imports inside functions and leaving out those under
``if TYPE_CHECKING:`` (they never run)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

__all__ = ["import_cycles", "import_edges"]


def _unit(module: str) -> str | None:
    """The package or top-level module of ``zoo`` that a module belongs to (``zoo`` for the root)."""
    parts = module.split(".")
    if parts[0] != "zoo":
        return None
    return "zoo" if len(parts) == 1 else f"zoo.{parts[1]}"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(child) for statement in node.body for child in ast.walk(statement))
    return hidden


def _imported(node: ast.AST, module: str, is_package: bool, root: Path) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = module.split(".")
            base = parts[: len(parts) - node.level + int(is_package)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target == "zoo":  # from zoo import x: a submodule or a name of the root
            for alias in node.names:
                exists = (root / alias.name).is_dir() or (root / f"{alias.name}.py").is_file()
                yield f"zoo.{alias.name}" if exists else "zoo"
        else:
            yield target


def import_edges(root: Path) -> dict[tuple[str, str], list[str]]:
    """``(importer, imported) -> [file:line, ...]`` between the units of the package at ``root``."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).with_suffix("")
        is_package = path.name == "__init__.py"
        module = ".".join(relative.parts[:-1] if is_package else relative.parts)
        source = _unit(module)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            for target in _imported(node, module, is_package, root):
                unit = _unit(target)
                if unit is not None and unit != source:
                    edges.setdefault((source, unit), []).append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return edges


def import_cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm)."""
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
