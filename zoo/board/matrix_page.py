"""The matrix page (``matrix.html``): every row of ``zoo matrix`` against every yardstick, the
figures read at a glance below it.

Each cell is the score at the best rate (:mod:`zoo.board.matrix_cells`) with its 95% interval over
seeds, or ``1 seed``, or ``not run`` (greyed), or the kind of failure a benchmark recorded in place
of a number (``out of memory``, ``too slow``, ``refused``, ``failed``; greyed); its background runs per column from chance (or the
worst value) to the best; it links to the records it came from. The parameters column is the
count the row's first compare cell recorded (the yardstick's model, not the layer alone). Every
row and cell carries its values as ``data-*`` attributes (``data-row``, ``data-family``,
``data-yardstick``, ``data-value``), which the page's own script sorts and filters by; the script
is inline, so the page works from ``file://`` with no network.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.attention import ATTENTION_REGISTRY
from zoo.board.figures import length_figure, mqar_width_figure, needle_figure
from zoo.board.matrix_cells import Cell, Matrix, MatrixRow
from zoo.board.recipes import recipe_label
from zoo.board.results import Result
from zoo.compare.report import pyplot
from zoo.matrix.protocol import Yardstick

__all__ = [
    "MATRIX_PAGE",
    "canonical_name",
    "cell_text",
    "family_href",
    "family_of",
    "has_family_page",
    "matrix_row_cells",
    "save_figure",
    "write_matrix_page",
]

MATRIX_PAGE = "matrix.html"
#: Where a figure's PNG goes, relative to the site.
FIGURES = "figures"
FIGURE_DPI = 100


def family_href(name: str) -> str:
    """A family page, relative to the site."""
    return f"families/{name}.html"


def canonical_name(name: str) -> str | None:
    """``name``'s registered canonical name (an alias resolved), or none where it is not registered."""
    return ATTENTION_REGISTRY.resolve(name) if name in ATTENTION_REGISTRY else None


def family_of(row: MatrixRow) -> str | None:
    """The registered attention whose page shows ``row``: the row's name, or the ``name`` of an
    entry with options (``{name: deltanet, negative_eigenvalues: true}`` is on ``deltanet``'s
    page); none for a recipe or a stack."""
    if row.row.recipe:
        return None
    _, names = recipe_label(row.row.attention)
    return canonical_name(names[0]) if len(names) == 1 else None


def has_family_page(row: MatrixRow) -> bool:
    """Whether ``row`` is one registered attention by its name (a family page of its own), not a
    recipe or an entry with options (which its name's page shows beside it)."""
    return not row.row.recipe and row.row.label in ATTENTION_REGISTRY


def _number(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) >= 10 else f"{value:.3f}"


def cell_text(cell: Cell) -> tuple[str, str]:
    """A cell's score and its note: the interval ``[low, high]`` over seeds, or ``1 seed``, and how
    many of the sweep's rates ran where not all have; ``not run``, ``n/a`` where the yardstick's
    protocol has no cell for the row, or the failure a benchmark recorded for it."""
    summary = cell.summary
    if summary is None:
        return (cell.failure or ("not run" if cell.applies else "n/a")), ""
    if cell.measured:
        return _number(summary.mean), ""
    if summary.low is None or summary.high is None:
        note = "1 seed"
    else:
        note = f"[{_number(summary.low)}, {_number(summary.high)}] {summary.n} seeds"
    if cell.rates is not None:
        note += f", {cell.rates[0]} of {cell.rates[1]} rates"
    return _number(summary.mean), note


def _colour(matrix: Matrix, stick: Yardstick, value: float | None) -> str:
    """A green background, darker the nearer the column's best ``value`` is."""
    if value is None:
        return ""
    return f"background-color: hsl(130, 55%, {95 - 45 * matrix.fraction(stick, value):.0f}%)"


def _link(target: Path | None, out: Path) -> str | None:
    if target is None:
        return None
    for candidate in (target / "report.md", target / "records.jsonl", target):
        if candidate.is_file():
            return Path(os.path.relpath(candidate.resolve(), out)).as_posix()
    return None


def matrix_row_cells(matrix: Matrix, row: MatrixRow, page_dir: Path) -> list[dict[str, Any]]:
    """The cells of ``row`` as the templates draw them, links relative to ``page_dir``."""
    cells = []
    for stick in matrix.yardsticks:
        cell = row.cells[stick.name]
        text, note = cell_text(cell)
        cells.append(
            {
                "yardstick": stick.name,
                "value": "" if cell.value is None else repr(cell.value),
                "text": text,
                "note": note,
                "rate": cell.rate,
                "style": _colour(matrix, stick, cell.value),
                "link": _link(cell.source, page_dir),
                "command": f"python -m zoo matrix --size {matrix.size} --names {shlex.quote(row.row.label)} "
                f"--yardsticks {stick.name}",
            }
        )
    return cells


def _column(stick: Yardstick, matrix: Matrix) -> dict[str, str]:
    better = "higher" if matrix.better_high(stick) else "lower"
    c = matrix.coverage(stick)
    held = f"{c.held} of {c.first} first-priority " + ("measured" if c.seeds is None else f"at {c.seeds} seeds")
    return {
        "name": stick.name,
        "title": stick.title,
        "help": f"{stick.metric}, {better} is better",
        "run": f"{c.run} of {c.rows} rows run",
        "held": held,
    }


def save_figure(figure: Any, out: Path, name: str) -> str:
    """Write ``figure`` as ``figures/NAME.png`` under ``out``; its path relative to the site."""
    relative = f"{FIGURES}/{name}.png"
    (out / FIGURES).mkdir(parents=True, exist_ok=True)
    figure.savefig(out / relative, dpi=FIGURE_DPI, metadata={"Software": None}, bbox_inches="tight")
    pyplot().close(figure)
    return relative


def write_matrix_page(render: Callable[..., None], matrix: Matrix, results: list[Result], out: Path) -> list[str]:
    """Render ``matrix.html`` and write its figures; the figures' paths relative to ``out``."""
    figures = []
    for name, caption, figure in (
        ("mqar-width", "MQAR accuracy against model width, one panel per sequence length", mqar_width_figure(results)),
        ("test-length", "Accuracy against test length: copying and state tracking", length_figure(results)),
        ("needle", "Needle in a haystack: accuracy by test length and depth", needle_figure(results)),
    ):
        if figure is not None:
            figures.append({"src": save_figure(figure, out, name), "caption": caption})
    rows = [
        {
            "label": row.row.label,
            "family": row.family,
            "first": row.row.first,
            "recipe": row.row.recipe,
            "href": family_href(family) if (family := family_of(row)) else None,
            "parameters": row.parameters,
            "cells": matrix_row_cells(matrix, row, out),
        }
        for row in matrix.rows
    ]
    render(
        MATRIX_PAGE,
        "matrix.html.j2",
        title="The matrix",
        plots=False,
        size=matrix.size,
        columns=[_column(stick, matrix) for stick in matrix.yardsticks],
        rows=rows,
        families=sorted({row.family for row in matrix.rows}),
        figures=figures,
    )
    return [figure["src"] for figure in figures]
