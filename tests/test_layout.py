"""The package's shape: imports point one way between its packages and top-level modules."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.helpers import PROJECT_ROOT
from tests.helpers.imports import import_cycles, import_edges


def test_no_import_cycle_between_the_zoos_packages_and_modules() -> None:
    edges = import_edges(PROJECT_ROOT / "zoo")
    cycles = import_cycles(edges)
    where = [f"{a} -> {b}: {edges[a, b][0]}" for cycle in cycles for a in cycle for b in cycle if (a, b) in edges]
    assert not cycles, "import cycles:\n" + "\n".join(where)


def test_the_graph_sees_imports_inside_functions_and_not_type_checking_ones(tmp_path: Path) -> None:
    package = tmp_path / "zoo"
    for name, source in {
        "__init__.py": "",
        "a/__init__.py": "def f():\n    from zoo.b import x\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zoo.c import y\nfrom . import a\n",
        "c.py": "from zoo import b\n",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(textwrap.dedent(source))
    edges = import_edges(package)
    assert set(edges) == {("zoo.a", "zoo.b"), ("zoo.b", "zoo.a"), ("zoo.c", "zoo.b")}
    assert import_cycles(edges) == [["zoo.a", "zoo.b"]]
