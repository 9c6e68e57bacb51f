"""``python -m zoo board``: the leaderboard site of ``zoo compare`` records and ``zoo bench`` results.

    python -m zoo board --records benchmarks/results --out runs/board
    python -m zoo board --records benchmarks/results --markdown docs/results/matrix.md

Opens from disk (``OUT/index.html``) or through any static server (``python -m http.server``
in OUT). Needs the ``board`` extra: ``pip install 'attention-zoo[board]'``. ``--markdown``
rewrites the matrix's table in a results page between its markers
(:mod:`zoo.board.matrix_markdown`), and needs no extra.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from zoo.errors import ConfigurationError

__all__ = ["main", "parser"]

#: The modules of the ``board`` extra.
EXTRA = ("plotly", "itables", "jinja2", "pandas")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="python -m zoo board",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    root.add_argument(
        "--records", type=Path, nargs="+", required=True, metavar="DIR",
        help="folders searched for zoo compare output (records.jsonl) and zoo bench JSON files",
    )  # fmt: skip
    root.add_argument("--out", type=Path, default=None, help="the site's folder (index.html and its pages)")
    root.add_argument(
        "--markdown", type=Path, default=None, metavar="PAGE",
        help="also rewrite the matrix's table between the markers of this Markdown page",
    )  # fmt: skip
    root.add_argument(
        "--screenshot", type=Path, default=None, metavar="PNG",
        help="also write a PNG of the page's top, taken by headless Chromium (chromium, chromium-driver, selenium)",
    )  # fmt: skip
    return root


def main(args: list[str]) -> None:
    """Rewrite the matrix table of ``--markdown``, build the site of ``--out``; print what each wrote."""
    options = parser().parse_args(args)
    if options.out is None and options.markdown is None:
        raise ConfigurationError("zoo board: nothing to write; give --out DIR (the site), --markdown PAGE, or both.")
    if options.markdown is not None:
        from zoo.board.inputs import read_inputs
        from zoo.board.matrix_cells import matrix_cells
        from zoo.board.matrix_markdown import write_matrix_markdown
        from zoo.matrix.cli import PROTOCOLS

        changed = write_matrix_markdown(matrix_cells(read_inputs(options.records), PROTOCOLS), options.markdown)
        print(f"matrix table: {options.markdown} ({'rewritten' if changed else 'unchanged'})")
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
    if options.screenshot is not None:
        from zoo.board.browser import screenshot

        print(f"screenshot: {screenshot(site.index, options.screenshot)}")
