"""Write the board as static files: ``index.html`` (the leaderboard), a page per result
(``runs/``) and per benchmark file (``bench/``), the plots' pages, and ``assets/`` (plotly.js once,
the style sheet).

The table is a DataTables table through itables, offline: itables' bundle of DataTables and its
extensions (SearchPanes for the filters, Buttons for the columns' visibility) is inlined into
``index.html`` once, so the page works from disk with no server and no network. The figures share
``assets/plotly.min.js`` (plotly's own copy, from the installed package). Pages are written from
Jinja2 templates with HTML escaping; nothing carries a date or a random id, so building twice
from the same records writes the same bytes.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from zoo.board.chronology import commit_times
from zoo.board.inputs import BenchResult, Inputs, read_inputs
from zoo.board.leaderboard import Board, Cell, Column, build_board, three_digits
from zoo.board.measurements import Chosen, latest_measurements, measurements
from zoo.board.plots import curve_figures, fragment, speed_figures, width_figures
from zoo.board.recipes import RecipeReader
from zoo.board.results import Result, group_results, slug
from zoo.compare.report import format_summary

__all__ = ["SiteFiles", "build_site"]

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
PLOT_PAGES = (("speed.html", "Speed"), ("width.html", "Accuracy against width"), ("curves.html", "Curves"))


@dataclass(frozen=True)
class SiteFiles:
    """What a build wrote: the index and every other file, relative to the output folder."""

    index: Path
    files: tuple[str, ...]


def _environment() -> Any:
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("zoo.board", "templates"), autoescape=True, keep_trailing_newline=True
    )
    environment.filters["board_slug"] = slug
    return environment


def build_site(folders: Sequence[Path], out: Path) -> SiteFiles:
    """Read the records and benchmarks under ``folders`` and write the board into ``out``."""
    inputs = read_inputs(folders)
    results = group_results(inputs, RecipeReader(inputs.roots))
    chosen = latest_measurements(inputs.benches, commit_times(inputs.roots))
    board = build_board(results, chosen)
    return _Writer(out.resolve(), inputs, results, chosen, board).write()


class _Writer:
    def __init__(self, out: Path, inputs: Inputs, results: list[Result], chosen: Chosen, board: Board) -> None:
        self.out, self.inputs, self.results, self.chosen, self.board = out, inputs, results, chosen, board
        self.templates = _environment()
        self.written: list[str] = []
        self.figures = {
            "speed.html": [fragment(f, name) for name, f in speed_figures(chosen)],
            "width.html": [fragment(f, name) for name, f in width_figures(results)],
            "curves.html": [fragment(f, name) for name, f in curve_figures(results)],
        }
        self.pages = [(href, label) for href, label in PLOT_PAGES if self.figures[href]]
        self.groups = sorted({c.group for c in board.columns}, key=lambda g: (g in ("speed", "decoding"), g))
        self.shared_datatables = False

    def _write(self, relative: str, text: str) -> None:
        path = self.out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        self.written.append(relative)

    def _render(self, relative: str, template: str, **context: Any) -> None:
        root = "../" * relative.count("/")
        page = self.templates.get_template(template).render(root=root, pages=self.pages, **context)
        self._write(relative, page)

    def write(self) -> SiteFiles:
        self.out.mkdir(parents=True, exist_ok=True)
        self._assets()
        self._index()
        for result in self.results:
            self._run_page(result)
        for bench in self.inputs.benches:
            self._bench_page(bench)
        for href, label in PLOT_PAGES:
            if self.figures[href]:
                self._plots_page(href, label)
        for group in self.groups:
            self._group_page(group)
        self._remove_stale()
        return SiteFiles(self.out / "index.html", tuple(sorted(self.written)))

    def _assets(self) -> None:
        import plotly

        plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        target = self.out / "assets" / "plotly.min.js"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plotly_js, target)
        self.written.append("assets/plotly.min.js")
        self._write("assets/board.css", resources.files("zoo.board").joinpath("templates/board.css").read_text("utf-8"))
        self.shared_datatables = self._datatables_asset()

    def _datatables_asset(self) -> bool:
        """Write itables' DataTables bundle as ``assets/datatables.js``, a classic script that sets
        :data:`DATATABLES_GLOBAL`, and its style sheet: loaded from disk once and shared by the
        pages, where itables' offline mode inlines it into each page as base64 and imports it as a
        module (1.1 MB a page to decode). The bundle is an ES module whose one ``export {...}`` is
        rewritten; a bundle of another shape is left to itables' own offline mode (False)."""
        bundle = _itables_bundle()
        source = bundle.read_text(encoding="utf-8")
        exports = re.findall(r"export\{([^}]*)\}", source)
        if len(exports) != 1 or re.search(r"(?:^|[;\n])import[\s{*\"']", source):
            return False  # a module with imports cannot run as a classic script
        names = [item.strip().split(" as ") for item in exports[0].split(",")]
        if not all(len(pair) == 2 for pair in names):
            return False
        table = ",".join(f"{json.dumps(public)}:{local}" for local, public in names)
        self._write(
            "assets/datatables.js",
            source.replace(f"export{{{exports[0]}}}", f"window.{DATATABLES_GLOBAL}={{{table}}};"),
        )
        self._write("assets/datatables.css", bundle.with_suffix(".css").read_text(encoding="utf-8"))
        return True

    def _remove_stale(self) -> None:
        """Pages of an earlier build into the same folder that this one did not write."""
        kept = set(self.written)
        for folder in ("runs", "bench", "tables"):
            for page in sorted((self.out / folder).glob("*.html")):
                if f"{folder}/{page.name}" not in kept:
                    page.unlink()

    # -- the leaderboard -------------------------------------------------------------------

    def _table(self, columns: list[Column], root: str) -> str:
        """The DataTables table of the rows that hold a cell of ``columns``: filters, sorting,
        and the columns' visibility; the first column of a task sorts it at first, best first."""
        import pandas as pd
        from itables.javascript import JavascriptFunction, to_html_datatable

        board = self.board
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
        table = to_html_datatable(
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
        return self._datatables_head(table, root) + table

    def _datatables_head(self, table: str, root: str) -> str:
        """What loads DataTables before ``table``'s script: the shared asset where it was written
        (:meth:`_datatables_asset`), else itables' own offline initialisation inlined in the page."""
        from itables.javascript import generate_init_offline_itables_html

        ready = re.search(r"await window\.(_itables_\w+)", table)
        if self.shared_datatables and ready:
            return (
                f'<link rel="stylesheet" href="{root}assets/datatables.css">\n'
                f'<script src="{root}assets/datatables.js"></script>\n'
                f"<script>window.{ready.group(1)} = Promise.resolve(window.{DATATABLES_GLOBAL});</script>\n"
            )
        return generate_init_offline_itables_html(_itables_bundle())

    def _index(self) -> None:
        comparisons = [
            {
                "name": c.name,
                "records": c.records,
                "failures": c.failures,
                "report": _link(c.report, self.out) if c.report else None,
            }
            for c in self.inputs.comparisons
        ]
        benches = [{"name": b.name, "kind": b.kind, "slug": slug(b.name)} for b in self.inputs.benches]
        self._render(
            "index.html",
            "index.html.j2",
            title="Leaderboard",
            plots=False,
            table=self._table([c for c in self.board.columns if c.visible], ""),
            columns=[c for c in self.board.columns if c.visible],
            groups=self.groups,
            rows=len(self.board.rows),
            runs=sum(len(r.runs) for r in self.results),
            comparisons=comparisons,
            benches=benches,
        )

    def _group_page(self, group: str) -> None:
        """Every column of a task (each metric of each setting) or of the speed or decoding group."""
        columns = [c for c in self.board.columns if c.group == group]
        self._render(
            f"tables/{slug(group)}.html",
            "group.html.j2",
            title=f"{group}: every column",
            plots=False,
            group=group,
            table=self._table(columns, "../"),
            columns=columns,
        )

    # -- run and benchmark pages -------------------------------------------------------------

    def _run_page(self, result: Result) -> None:
        relative = f"runs/{result.slug}.html"
        page_dir = self.out / "runs"
        metrics = result.metrics
        summaries = [(m, format_summary(result.summary(m)), len(result.values(m))) for m in metrics]
        runs = []
        for run in result.runs:
            record = run.record
            directory = run.directory
            files, images = [], []
            if directory is not None:
                images = [
                    (_link(png, page_dir), png.stem) for png in sorted((directory / "fit" / "images").glob("*.png"))
                ]
                for name in (
                    "fit.log",
                    f"{run.recipe.stage}.log",
                    "fit/metrics.csv",
                    f"{run.recipe.stage}/metrics.csv",
                ):
                    if (directory / name).is_file():
                        files.append((_link(directory / name, page_dir), name))
                if (directory / "fit" / "checkpoints").is_dir():
                    files.append((_link(directory / "fit" / "checkpoints", page_dir), "checkpoints"))
            runs.append(
                {
                    "seed": run.seed,
                    "key": record["run"],
                    "comparison": run.comparison.name,
                    "metric_values": [_number(record["metrics"].get(m)) for m in metrics],
                    "fit_seconds": _number(record.get("fit_seconds")),
                    "steps": record.get("steps", ""),
                    "seconds_per_step": _number(record.get("seconds_per_step")),
                    "peak_rss_mib": _number(record.get("peak_rss_mib")),
                    "parameters": record.get("parameters") or "",
                    "finished": record.get("finished", ""),
                    "files": files,
                    "images": images,
                    "run_dir": record.get("run_dir", ""),
                    "command": record["command"],
                    "eval_command": record.get("eval_command"),
                    "config_digests": sorted((record.get("config_digests") or {}).items()),
                    "threads": record.get("threads"),
                    "machine": record.get("machine"),
                    "torch": record.get("torch"),
                    "budget": record.get("budget") or "from the configuration",
                }
            )
        figures = [fragment(f, f"{result.slug} {name}") for name, f in curve_figures([result])]
        notes = sorted({note for run in result.runs for note in run.recipe.notes})
        self._render(
            relative,
            "run.html.j2",
            title=f"{result.row} on {result.task}",
            plots=bool(figures),
            result=result,
            stage=result.runs[0].recipe.stage if result.runs else None,
            notes=notes,
            summaries=summaries,
            metrics=metrics,
            runs=runs,
            replaced=[
                f"{r.comparison.name}: {r.record['run']} ({r.record.get('finished', '')})" for r in result.replaced
            ],
            figures=figures,
        )

    def _bench_page(self, bench: BenchResult) -> None:
        rows = []
        seen: set[str] = set()
        for m in measurements(bench):
            current = self.chosen.cells.get((m.condition, m.case, m.length))
            shown = "yes" if current and current.source.name == bench.name else f"no: {current.source.name} is newer"
            rows.append(
                {
                    "case": m.case,
                    "anchor": slug(m.case),
                    "first": m.case not in seen,
                    "length": m.length,
                    "status": m.status,
                    "time": "" if m.time_ms is None else three_digits(m.time_ms),
                    "memory": "" if m.memory_mib is None else three_digits(float(m.memory_mib)),
                    "cache": "" if m.cache_bytes is None else f"{m.cache_bytes:,}",
                    "shown": shown,
                }
            )
            seen.add(m.case)
        data = bench.data
        rest = {k: v for k, v in data.items() if k not in ("environment", "config", "benchmark")}
        self._render(
            f"bench/{slug(bench.name)}.html",
            "bench.html.j2",
            title=bench.name,
            plots=False,
            bench=bench,
            environment=sorted((k, _plain(v)) for k, v in data["environment"].items()),
            config=sorted((k, _plain(v)) for k, v in data["config"].items()),
            measurements=rows,
            raw=json.dumps(rest, indent=2, sort_keys=True),
        )

    def _plots_page(self, relative: str, label: str) -> None:
        intros = {
            "speed.html": "Forward and backward time of every case of zoo bench attention, the newest measurement "
            "of each case, condition and length; log-log, so a line's slope is its growth exponent.",
            "width.html": "As Zoology draws MQAR: accuracy against the model's width, one line per attention "
            "recipe with its 95% interval over seeds, one panel per value of the other flags the grid varies.",
            "curves.html": "The headline metric as each run trained, from its fit's metrics.csv (runs whose "
            "directory is on this machine).",
        }
        self._render(
            relative,
            "plots.html.j2",
            title=label,
            plots=True,
            intro=intros[relative],
            figures=self.figures[relative],
            empty="no records of that kind.",
        )


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


def _link(target: Path, page_dir: Path) -> str:
    """A relative link from a page in ``page_dir`` to ``target`` (POSIX separators)."""
    return Path(os.path.relpath(target.resolve(), page_dir)).as_posix()


def _number(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
