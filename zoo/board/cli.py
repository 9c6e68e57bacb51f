"""``python -m zoo board``: the leaderboard site of ``zoo compare`` records and ``zoo bench`` results.

    python -m zoo board --records benchmarks/results --out runs/board

Opens from disk (``OUT/index.html``) or through any static server (``python -m http.server``
in OUT). Needs the ``board`` extra: ``pip install 'attention-zoo[board]'``.
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
    root.add_argument("--out", type=Path, required=True, help="the site's folder (index.html and its pages)")
    root.add_argument(
        "--screenshot", type=Path, default=None, metavar="PNG",
        help="also write a PNG of the page's top, taken by headless Chromium (chromium, chromium-driver, selenium)",
    )  # fmt: skip
    return root


def main(args: list[str]) -> None:
    """Build the site; print where its index is."""
    options = parser().parse_args(args)
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
