"""The package's shape: imports point one way between its modules, and between its packages and
top-level modules, imports under ``if TYPE_CHECKING:`` included."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.imports import Edges, import_cycles, import_edges, package_edges


def _cycles_with_their_imports(edges: Edges) -> str:
    cycles = import_cycles(edges)
    return "\n".join(
        f"{a} -> {b}: {edges[a, b][0]}" for cycle in cycles for a in cycle for b in cycle if (a, b) in edges
    )


@pytest.mark.parametrize("level", ["modules", "packages"])
def test_no_import_cycle_in_the_zoo(level: str) -> None:
    edges = import_edges(PROJECT_ROOT / "zoo")
    if level == "packages":
        edges = package_edges(edges)
    assert not import_cycles(edges), f"import cycles between {level}:\n" + _cycles_with_their_imports(edges)


def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "zoo"
    for name, source in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(textwrap.dedent(source))
    return package


def test_the_graph_sees_imports_inside_functions_and_type_checking_ones(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": "def f():\n    from zoo.b import x\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zoo.c import y\nfrom . import a\n",
            "c.py": "from zoo import b\n",
        },
    )
    edges = import_edges(package)
    assert set(edges) == {("zoo.a", "zoo.b"), ("zoo.b", "zoo.c"), ("zoo.b", "zoo.a"), ("zoo.c", "zoo.b")}
    assert edges["zoo.b", "zoo.c"] == ["zoo/b.py:3"]
    assert import_cycles(edges) == [["zoo.a", "zoo.b", "zoo.c"]]


def test_a_cycle_inside_a_package_is_one_between_modules_not_packages(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a/__init__.py": "from zoo.a.low import x\nfrom zoo.a.high import y\n",
            "a/low.py": "from zoo.b import z\nfrom zoo.a import high\n",
            "a/high.py": "from .low import x\n",
            "b.py": "",
        },
    )
    edges = import_edges(package)
    assert set(edges) == {
        ("zoo.a", "zoo.a.low"),
        ("zoo.a", "zoo.a.high"),
        ("zoo.a.low", "zoo.b"),
        ("zoo.a.low", "zoo.a.high"),
        ("zoo.a.high", "zoo.a.low"),
    }, "a package's __init__ counts for the modules it imports, not for those that import its submodules"
    assert import_cycles(edges) == [["zoo.a.high", "zoo.a.low"]]
    assert set(package_edges(edges)) == {("zoo.a", "zoo.b")} and import_cycles(package_edges(edges)) == []


def test_the_kernels_import_nothing_of_the_attention_contract() -> None:
    """``zoo/attention/kernels`` is tensor machinery: it may read the masks' helpers and the zoo's
    error classes (a leaf module: a setting a kernel refuses is one line on the command line), never
    the contract (``base``, ``layer``, ``spec``), the registry or a variant."""
    edges = import_edges(PROJECT_ROOT / "zoo")
    allowed = ("zoo.attention.kernels", "zoo.attention.contract.masking", "zoo.errors")
    outside = [
        f"{source} -> {target}: {places[0]}"
        for (source, target), places in edges.items()
        if source.startswith("zoo.attention.kernels") and not target.startswith(allowed)
    ]
    assert not outside, "\n".join(outside)


def test_the_readme_names_every_entry_point_group_a_plugin_can_use() -> None:
    """The groups are read from the registries, so a new one cannot be left out of the front page."""
    from zoo.attention import ATTENTION_REGISTRY
    from zoo.datamodules import DATAMODULE_REGISTRY
    from zoo.positions import POSITION_REGISTRY
    from zoo.tasks import MODEL_REGISTRY

    groups = []
    for registry in (ATTENTION_REGISTRY, POSITION_REGISTRY, MODEL_REGISTRY, DATAMODULE_REGISTRY):
        group = registry.entry_point_group
        groups += [group] if isinstance(group, str) else list(group)
    readme = " ".join((PROJECT_ROOT / "README.md").read_text().split())
    missing = [group for group in groups if f"`{group}`" not in readme]
    assert not missing, f"README.md does not name the entry-point groups {missing}"


def test_the_attention_package_is_arranged_by_job_with_no_two_modules_of_one_name() -> None:
    """``zoo/attention``'s root holds its public names only; each file sits in the folder of its
    job, and no two share a name (``recurrence.py`` and ``kernels/recurrence.py`` once did)."""
    root = PROJECT_ROOT / "zoo" / "attention"
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py"]
    assert {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "build", "compat", "contract", "kernels", "modules", "variants"
    }  # fmt: skip
    stems = [p.stem for p in root.rglob("*.py") if p.stem != "__init__"]
    assert sorted({stem for stem in stems if stems.count(stem) > 1}) == []


def test_a_built_in_variant_is_listed_by_its_own_file_alone() -> None:
    """Adding a variant is its file (and its test): the package finds the file, the public names
    and the board's family and cost come from its registration and its class, and the tables
    that are prose (docs/attention.md's, README's list of families) are held to name it."""
    import zoo.attention
    from zoo.attention import ATTENTION_REGISTRY, variants
    from zoo.board.catalog import family_and_cost

    folder = PROJECT_ROOT / "zoo" / "attention" / "variants"
    files = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert [module.__name__.rsplit(".", 1)[1] for module in variants.MODULES] == files
    built_in = [e for e in ATTENTION_REGISTRY.entries() if e.obj.__module__.startswith(f"{variants.__name__}.")]
    assert len(built_in) >= 35
    table = (PROJECT_ROOT / "docs" / "attention.md").read_text().split("## Every variant")[1].split("\n## ")[0]
    table_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    readme = (PROJECT_ROOT / "README.md").read_text()
    for entry in built_in:
        assert getattr(zoo.attention, entry.obj.__name__) is entry.obj and entry.obj.__name__ in zoo.attention.__all__
        assert family_and_cost(entry.name) is not None, f"{entry.name} declares no family and cost"
        assert any(f"`{entry.name}`" in cell for cell in table_cells), f"docs/attention.md's table omits {entry.name}"
        assert f"`{entry.name}`" in readme, f"README's list of families omits {entry.name}"


def _layout_block() -> str:
    """The tree drawn in ``docs/layout.md``."""
    return (PROJECT_ROOT / "docs" / "layout.md").read_text(encoding="utf-8").split("```")[1]


def test_the_layout_page_names_every_top_level_module_and_attention_package() -> None:
    block = _layout_block()
    named = set(re.findall(r"[\w.]+/?", block))
    entries = [path for path in (PROJECT_ROOT / "zoo").iterdir() if path.name != "__pycache__"]
    entries += [
        path for path in (PROJECT_ROOT / "zoo" / "attention").iterdir() if path.is_dir() and path.name != "__pycache__"
    ]
    missing = [path.name for path in entries if (path.name + "/" if path.is_dir() else path.name) not in named]
    assert not missing, f"docs/layout.md does not name {missing}"


def test_every_path_the_layout_page_draws_exists() -> None:
    drawn = re.findall(r"^(  |    )(\S+)", _layout_block(), flags=re.MULTILINE)
    folders = {"  ": PROJECT_ROOT / "zoo", "    ": PROJECT_ROOT / "zoo" / "attention"}
    absent = [name for indent, name in drawn if not (folders[indent] / name.rstrip("/")).exists()]
    assert not absent, f"docs/layout.md draws {absent}, which the tree does not hold"


THROWAWAY = """
from zoo.attention.build.factory import register_attention
from zoo.attention.variants.dot_product import DotProductAttention


@register_attention("throwaway")
class ThrowawayAttention(DotProductAttention):
    \"\"\"A variant that exists for one test.\"\"\"
"""


def test_a_new_variant_file_alone_reaches_the_exports_the_listing_and_the_board(tmp_path: Path) -> None:
    """A copy of the package with one file added to ``variants/`` exports, lists and catalogues
    it, with nothing else edited."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(PROJECT_ROOT / "zoo", tmp_path / "zoo", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "zoo" / "attention" / "variants" / "throwaway.py").write_text(THROWAWAY)
    code = (
        "import zoo.attention\nfrom zoo.board.catalog import family_and_cost\nfrom zoo.commands import main\n"
        "assert 'ThrowawayAttention' in zoo.attention.__all__\nprint(family_and_cost('throwaway'))\nmain(['list', 'throw*'])"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    from zoo.board.catalog import family_and_cost

    assert run.stdout.splitlines()[0] == str(family_and_cost("dot_product"))  # the family and cost it inherits
    assert "  throwaway" in run.stdout.splitlines()
