"""The matrix as a Markdown table inside a results page, so a page states no number of its own.

``python -m zoo board --markdown docs/results/matrix.md`` rewrites the part of the page between
:data:`BEGIN` and :data:`END` with the cells the board's matrix page shows
(:func:`zoo.board.matrix_cells.matrix_cells`: the score at the best rate, its 95% interval over
seeds or ``1 seed``), from the same records; the prose around the markers is the page's own. A
row appears once one of its cells is measured; the rows not run yet are named in one line under
the table, so the table grows as ``zoo matrix`` fills it and never shows a column of blanks.
Under it, :func:`coverage` counts each column's cells: how many rows it has run, and how many
first-priority rows hold the protocol's seeds (what the matrix's targets ask of a column).
``tests/board/test_matrix_markdown.py`` rebuilds the committed page's table from the committed
records and fails when the two differ: a measurement changes the records, and the page follows.
"""

from __future__ import annotations

from pathlib import Path

from zoo.board.matrix_cells import Cell, Matrix
from zoo.board.matrix_page import cell_text
from zoo.errors import ConfigurationError
from zoo.text.files import atomic_write_text

__all__ = ["BEGIN", "END", "coverage", "matrix_markdown", "write_matrix_markdown"]

BEGIN = "<!-- matrix:begin: written by `python -m zoo board --markdown`; change the records, not this table -->"
END = "<!-- matrix:end -->"


def _cell(cell: Cell) -> str:
    text, note = cell_text(cell)
    if cell.summary is None:
        return "·" if cell.applies and not cell.failure else text
    rate = f", lr {cell.rate}" if cell.rate else ""
    return f"{text} ({note}{rate})" if note or rate else text


def coverage(matrix: Matrix) -> list[str]:
    """A Markdown table of each column's cells (:meth:`Matrix.coverage`): the rows run of those the
    column applies to, and the first-priority rows that hold the protocol's seeds."""
    lines = [
        "| column | rows run | first-priority rows at the protocol's seeds |",
        "|---|---|---|",
    ]
    for stick in matrix.yardsticks:
        c = matrix.coverage(stick)
        seeds = "one measurement each" if c.seeds is None else f"at {c.seeds} seeds"
        lines.append(f"| {stick.title} | {c.run} of {c.rows} | {c.held} of {c.first} {seeds} |")
    return lines


def matrix_markdown(matrix: Matrix) -> str:
    """The table of every row with a measured cell (``·`` where a cell is not run, ``n/a`` where
    the yardstick has none for the row), then the rows not run yet, then :func:`coverage`."""
    sticks = matrix.yardsticks
    measured = [row for row in matrix.rows if any(cell.summary is not None for cell in row.cells.values())]
    waiting = [row.row.label for row in matrix.rows if row not in measured]
    lines = [
        "| row | family | " + " | ".join(stick.title for stick in sticks) + " |",
        "|---|---|" + "---|" * len(sticks),
    ]
    for row in measured:
        cells = " | ".join(_cell(row.cells[stick.name]) for stick in sticks)
        label = f"recipe `{row.row.label}`" if row.row.recipe else f"`{row.row.label}`"
        lines.append(f"| {label} | {row.family} | {cells} |")
    if not measured:
        lines.append("| no cell measured yet |  |" + " |" * len(sticks))
    lines.append("")
    size = f"the {matrix.size} size"
    lines.append(
        f"{len(measured)} of {len(matrix.rows)} rows measured at {size}; not run yet: "
        + (", ".join(f"`{label}`" for label in waiting) if waiting else "none")
        + "."
    )
    if any(cell.failure for row in measured for cell in row.cells.values()):
        lines.append(
            "`out of memory`, `too slow`, `refused`, `failed`: the benchmark ran the row and it did not finish at "
            "the column's length or a shorter one (under the protocol's memory and time limits; `refused`: the "
            "layer declines that length by design, as a log-linear layer past its levels' reach); its file says why."
        )
    if any(not cell.applies for row in measured for cell in row.cells.values()):
        lines.append(
            "`n/a`: the column's benchmark has no cell for the row (it times one registered layer; a recipe "
            "only where its protocol decodes whole stacks)."
        )
    return "\n".join([*lines, "", *coverage(matrix)])


def write_matrix_markdown(matrix: Matrix, page: Path) -> bool:
    """Replace the table between the markers of ``page`` with :func:`matrix_markdown`'s; whether
    the page changed. A page without both markers, in that order, is refused: nothing of it is
    overwritten."""
    text = page.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ConfigurationError(
            f"{page}: no matrix markers; put a line {BEGIN!r} and, below it, a line {END!r} where the table goes."
        )
    new = text[: start + len(BEGIN)] + "\n" + matrix_markdown(matrix) + "\n" + text[end:]
    if new == text:
        return False
    atomic_write_text(page, new)
    return True
