"""A page per registered attention of the matrix: its docstring's summary and text, its options,
capabilities, its matrix row (the same cells as the matrix page), the command of each cell, and
its figures where records exist."""

from __future__ import annotations

import html
import inspect
import sys
from pathlib import Path

import yaml

from tests.board.matrix_records import matrix_site, read_table  # noqa: F401 (matrix_site is a fixture)
from zoo.attention import ATTENTION_REGISTRY
from zoo.matrix.cli import PROTOCOLS
from zoo.matrix.rows import causal_names


def _page(site: Path, name: str) -> str:
    return html.unescape((site / "families" / f"{name}.html").read_text(encoding="utf-8"))


def test_every_causal_name_has_a_page(matrix_site: Path) -> None:  # noqa: F811
    assert sorted(p.stem for p in (matrix_site / "families").glob("*.html")) == sorted(causal_names())


def test_a_page_shows_the_docstring_options_and_capabilities(matrix_site: Path) -> None:  # noqa: F811
    page = _page(matrix_site, "gla")
    cls = ATTENTION_REGISTRY.get("gla")
    text = inspect.cleandoc(sys.modules[cls.__module__].__doc__)
    assert text.split("\n\n", 1)[0] in page
    assert "S_t = Diag(a_t) S_{t-1} + k_t^T v_t" in page, "the equations of the docstring"
    assert "gate_rank: int = 16" in page, "the constructor's options"
    assert "supports_decoding</th><td>yes" in page
    assert "gated_linear_attention" in page, "its alias"


def test_its_rows_are_the_matrix_rows_and_each_cell_has_its_command(matrix_site: Path) -> None:  # noqa: F811
    """``mamba2``'s page holds its row and its entry with options the matrix runs (negative
    eigenvalues), each the matrix page's cells, each cell's command; the matrix page links both
    rows to it."""
    variant = "{name: mamba2, negative_eigenvalues: true}"
    matrix = read_table(matrix_site / "matrix.html", "matrix").rows
    cells = {r["attrs"]["data-row"]: r["cells"] for r in matrix}
    rows = read_table(matrix_site / "families" / "mamba2.html", "family-row").rows
    assert [row["attrs"]["data-row"] for row in rows] == ["mamba2", variant]
    sticks = yaml.safe_load((PROTOCOLS / "matrix.yaml").read_text(encoding="utf-8"))["yardsticks"]
    for row in rows:
        label = row["attrs"]["data-row"]
        for stick in sticks:
            assert row["cells"][stick]["data-value"] == cells[label][stick]["data-value"]
            assert row["cells"][stick]["text"] == cells[label][stick]["text"]
    page = _page(matrix_site, "mamba2")
    for stick in sticks:
        assert f"python -m zoo matrix --size quick --names mamba2 --yardsticks {stick}" in page
        assert f"python -m zoo matrix --size quick --names '{variant}' --yardsticks {stick}" in page
    assert cells["mamba2"]["row"]["href"] == cells[variant]["row"]["href"] == "families/mamba2.html"


def test_figures_only_where_records_exist(matrix_site: Path) -> None:  # noqa: F811
    deltanet = _page(matrix_site, "deltanet")
    assert "../figures/family-deltanet-length.png" in deltanet and "../figures/family-deltanet-needle.png" in deltanet
    assert (matrix_site / "figures" / "family-deltanet-needle.png").is_file()
    assert "family-gla-" not in _page(matrix_site, "gla")


def test_a_family_draws_its_entries_with_options_beside_it() -> None:
    """``deltanet``'s curves: its own and those of ``deltanet`` with options or by an alias, each
    row read from its records as the board reads it, not a stack that holds it nor another name."""
    from zoo.board.family_pages import family_lines
    from zoo.board.recipes import recipe_label
    from zoo.board.results import Result

    attentions = ["deltanet", "{name: deltanet, negative_eigenvalues: true}", "[{name: delta_net, conv_size: 0}]",
                  "[{name: deltanet, conv_size: 0}, softmax]", "gated_deltanet", "[softmax, deltanet]"]  # fmt: skip
    results = [Result("parity", (), *recipe_label(attention)) for attention in attentions]
    assert family_lines(results, "deltanet") == [
        "deltanet",
        "delta_net(conv_size=0)",
        "deltanet(negative_eigenvalues=True)",
    ]
