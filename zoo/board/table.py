"""The leaderboard's table: a DataTables table through itables, offline.

itables' bundle of DataTables and its extensions (SearchPanes for the filters, Buttons for the
columns' visibility) is written once as a shared asset (:func:`shared_datatables`) that every
page loads from disk, with no server and no network; where the bundle has a shape that cannot be
shared, each page inlines itables' own offline initialisation instead (:func:`datatables_head`).
:func:`leaderboard_table` renders the rows of a :class:`~zoo.board.leaderboard.Board` that hold a
cell of the given columns, each cell a link to its page.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from zoo.board.leaderboard import Board, Cell, Column

__all__ = ["DATATABLES_GLOBAL", "datatables_head", "leaderboard_table", "shared_datatables"]

TABLE_ID = "board"
FILTERS = ("family", "causal", "cost")
#: DataTables' sort and type value of a cell: the first number of its text (a mean, a time); an
#: empty cell sorts after the worst value when the column is sorted best first.
SORT_VALUE = """function (data, type) {
    if (type !== "sort" && type !== "type") { return data; }
    const text = String(data).replace(/<[^>]*>/g, "").replace(/,/g, "");
    const match = text.match(/-?\\d+(\\.\\d+)?(e[-+]?\\d+)?/i);
    return match ? parseFloat(match[0]) : EMPTY;
}"""
#: The global the shared DataTables asset sets (itables' bundle, its one ``export`` made a global).
DATATABLES_GLOBAL = "zooDataTables"


def shared_datatables() -> dict[str, str] | None:
    """itables' DataTables bundle as ``assets/datatables.js``, a classic script that sets
    :data:`DATATABLES_GLOBAL`, and its style sheet, as ``{relative path: text}``: loaded from disk
    once and shared by the pages, where itables' offline mode inlines it into each page as base64
    and imports it as a module (1.1 MB a page to decode). The bundle is an ES module whose one
    ``export {...}`` is rewritten; for a bundle of another shape, None (itables' own offline mode)."""
    bundle = _itables_bundle()
    source = bundle.read_text(encoding="utf-8")
    exports = re.findall(r"export\{([^}]*)\}", source)
    if len(exports) != 1 or re.search(r"(?:^|[;\n])import[\s{*\"']", source):
        return None  # a module with imports cannot run as a classic script
    names = [item.strip().split(" as ") for item in exports[0].split(",")]
    if not all(len(pair) == 2 for pair in names):
        return None
    table = ",".join(f"{json.dumps(public)}:{local}" for local, public in names)
    return {
        "assets/datatables.js": source.replace(f"export{{{exports[0]}}}", f"window.{DATATABLES_GLOBAL}={{{table}}};"),
        "assets/datatables.css": bundle.with_suffix(".css").read_text(encoding="utf-8"),
    }


def leaderboard_table(board: Board, columns: list[Column], root: str) -> str:
    """The DataTables table of the rows of ``board`` that hold a cell of ``columns``, on a page
    ``root`` below the site's folder: filters, sorting, and the columns' visibility; the first
    column of a task sorts it at first, best first."""
    import pandas as pd
    from itables.javascript import JavascriptFunction, to_html_datatable

    labels = _unique([c.label for c in columns])
    data: dict[str, list[str]] = {"attention": [], "family": [], "causal": [], "cost": []}
    data |= {label: [] for label in labels}
    for row, info in board.rows.items():
        if not any((row, c.key) in board.cells for c in columns):
            continue
        data["attention"].append(html.escape(row))
        data["family"].append(info.family)
        data["causal"].append(info.causal)
        data["cost"].append(info.cost)
        for column, label in zip(columns, labels):
            cell = board.cells.get((row, column.key))
            data[label].append("" if cell is None else _cell_html(cell, root))
    fixed = len(FILTERS) + 1
    first = _first_sorted(board, columns)
    order = [[fixed + columns.index(first), "desc" if first.higher_is_better else "asc"]] if first else [[0, "asc"]]
    return to_html_datatable(
        pd.DataFrame(data, dtype=object),
        table_id=TABLE_ID,
        connected=False,
        allow_html=True,
        showIndex=False,
        maxBytes=0,
        paging=False,
        order=order,
        classes="display compact cell-border nowrap",
        layout={"top1": "searchPanes", "topStart": {"buttons": ["colvis"]}, "topEnd": "search"},
        searchPanes={
            "columns": [1, 2, 3],
            "layout": "columns-3",
            "viewTotal": True,
            "dtOpts": {"scrollY": "7.5em", "scrollCollapse": True},
        },
        columnDefs=[
            {
                "targets": [fixed + i for i, c in enumerate(columns) if c.higher_is_better == higher],
                "render": JavascriptFunction(SORT_VALUE.replace("EMPTY", "-Infinity" if higher else "Infinity")),
            }
            for higher in (True, False)
        ]
        + [{"targets": [1, 2, 3], "searchPanes": {"show": True}}],
    )


def datatables_head(table: str, root: str, *, shared: bool) -> str:
    """What loads DataTables before ``table``'s script: the shared asset where it was written
    (``shared``, :func:`shared_datatables`), else itables' own offline initialisation inlined in
    the page."""
    from itables.javascript import generate_init_offline_itables_html

    ready = re.search(r"await window\.(_itables_\w+)", table)
    if shared and ready:
        return (
            f'<link rel="stylesheet" href="{root}assets/datatables.css">\n'
            f'<script src="{root}assets/datatables.js"></script>\n'
            f"<script>window.{ready.group(1)} = Promise.resolve(window.{DATATABLES_GLOBAL});</script>\n"
        )
    return generate_init_offline_itables_html(_itables_bundle())


def _itables_bundle() -> Path:
    import itables

    return Path(itables.__file__).parent / "html" / "dt_bundle.js"


def _first_sorted(board: Board, columns: list[Column]) -> Column | None:
    """The column a table sorts by at first: the task column with the most rows."""
    tasks = [c for c in columns if c.group not in ("speed", "decoding")] or columns
    return max(tasks, key=board.count, default=None)


def _cell_html(cell: Cell, root: str) -> str:
    """A cell as a link to its page, marked ``older`` when it ends with ``*``."""
    css = "cell older" if cell.text.endswith("*") else "cell"
    href = html.escape(root + (cell.href or ""))
    return f'<a class="{css}" href="{href}" title="{html.escape(cell.title)}">{html.escape(cell.text)}</a>'


def _unique(labels: list[str]) -> list[str]:
    """``labels`` made unique by a count after a repeated one."""
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if seen[label] == 1 else f"{label} [{seen[label]}]")
    return unique
