"""``python -m zoo board``: the leaderboard site of ``zoo compare`` records and ``zoo bench`` results.

    python -m zoo board --records benchmarks/results --out runs/board
    python -m zoo board --records benchmarks/results --markdown docs/results/*.md

Opens from disk (``OUT/index.html``) or through any static server (``python -m http.server``
in OUT). Needs the ``board`` extra: ``pip install 'attention-zoo[board]'``. ``--screenshot`` and
``--matrix_screenshot`` write pictures of the leaderboard's and the matrix page's tops. ``--markdown``
rewrites the tables of results pages from the records, and needs no extra: the matrix's table
between its markers (:mod:`zoo.board.matrix_markdown`) and each table of ``zoo compare`` records
in a records block (:mod:`zoo.board.record_tables`; its paths are read from the current folder,
the repository's root).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from zoo.command_parser import command_parser
from zoo.errors import ConfigurationError

__all__ = ["main", "parser"]

#: The modules of the ``board`` extra.
EXTRA = ("plotly", "itables", "jinja2", "pandas")


def parser() -> argparse.ArgumentParser:
    root = command_parser("board", __doc__)
    root.add_argument(
        "--records", type=Path, nargs="+", required=True, metavar="DIR",
        help="folders searched for zoo compare output (records.jsonl) and zoo bench JSON files",
    )  # fmt: skip
    root.add_argument("--out", type=Path, default=None, help="the site's folder (index.html and its pages)")
    root.add_argument(
        "--markdown", type=Path, nargs="+", default=None, metavar="PAGE",
        help="also rewrite the matrix's table and the records tables of these Markdown pages",
    )  # fmt: skip
    root.add_argument(
        "--screenshot", type=Path, default=None, metavar="PNG",
        help="also write a PNG of the page's top, taken by headless Chromium (chromium, chromium-driver, selenium)",
    )  # fmt: skip
    root.add_argument(
        "--matrix_screenshot", type=Path, default=None, metavar="PNG",
        help="also write a PNG of the matrix page's top (every family on every yardstick), as --screenshot",
    )  # fmt: skip
    return root


def main(args: list[str]) -> None:
    """Rewrite the tables of the ``--markdown`` pages, build the site of ``--out``; print what each wrote."""
    options = parser().parse_args(args)
    if options.out is None and options.markdown is None:
        raise ConfigurationError("zoo board: nothing to write; give --out DIR (the site), --markdown PAGE, or both.")
    if options.markdown is not None:
        _rewrite_pages(options.records, options.markdown)
    if options.out is None:
        return
    if missing := [name for name in EXTRA if importlib.util.find_spec(name) is None]:
        raise ConfigurationError(
            f"zoo board needs {', '.join(missing)}: pip install 'attention-zoo[board]' "
            "(the versions tested are pinned in requirements/constraints.txt)."
        )
    from zoo.board.site import build_site

    site = build_site(options.records, options.out)
    print(f"board: {site.index} ({len(site.files)} files)")
    from zoo.board.browser import screenshot
    from zoo.board.matrix_page import MATRIX_PAGE

    if options.screenshot is not None:
        print(f"screenshot: {screenshot(site.index, options.screenshot)}")
    if options.matrix_screenshot is not None:
        matrix = screenshot(
            site.index.parent / MATRIX_PAGE,
            options.matrix_screenshot,
            ready="table#matrix tbody tr",
            width=1800,
            height=1000,
        )
        print(f"screenshot: {matrix}")


def _rewrite_pages(records: list[Path], pages: list[Path]) -> None:
    """Each page's matrix table (where it has the markers) and records tables; a page with neither
    is passed over with a line, and pages none of which holds a table are refused in one line."""
    from zoo.board.matrix_markdown import BEGIN as MATRIX
    from zoo.board.record_tables import BEGIN as RECORDS
    from zoo.board.record_tables import rewrite_record_tables

    if missing := [page for page in pages if not page.is_file()]:
        raise ConfigurationError(f"{missing[0]}: no such page; --markdown takes existing Markdown pages.")
    texts = {page: page.read_text(encoding="utf-8") for page in pages}
    if not any(MATRIX in text or RECORDS in text for text in texts.values()):
        raise ConfigurationError(
            f"{pages[0]}: no matrix markers and no records block; put a line {MATRIX!r} (the matrix) or "
            f"a block opening with {RECORDS!r} (zoo compare records, zoo.board.record_tables) where a table goes."
        )
    for page, text in texts.items():
        if MATRIX in text:
            from zoo.board.inputs import read_inputs
            from zoo.board.matrix_cells import matrix_cells
            from zoo.board.matrix_markdown import write_matrix_markdown
            from zoo.matrix.cli import PROTOCOLS

            changed = write_matrix_markdown(matrix_cells(read_inputs(records), PROTOCOLS), page)
            print(f"matrix table: {page} ({'rewritten' if changed else 'unchanged'})")
        if RECORDS in text:
            blocks, changed = rewrite_record_tables(page, Path.cwd())
            print(f"records tables: {page}, {blocks} ({'rewritten' if changed else 'unchanged'})")
        if MATRIX not in text and RECORDS not in text:
            print(f"no tables: {page} (passed over)")
