"""Write the board as static files: ``index.html`` (the leaderboard), a page per result
(``runs/``) and per benchmark file (``bench/``), the plots' pages, the matrix page
(``matrix.html``, :mod:`zoo.board.matrix_page`) with a page per family (``families/``,
:mod:`zoo.board.family_pages`) and their PNG figures (``figures/``), and ``assets/`` (plotly.js
once, the style sheet).

The table is a DataTables table through itables, offline (:mod:`zoo.board.table`), so the pages
work from disk with no server and no network. The figures share
``assets/plotly.min.js`` (plotly's own copy, from the installed package). Pages are written from
Jinja2 templates with HTML escaping; nothing carries a date or a random id, so building twice
from the same records writes the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from zoo.board.chronology import commit_times
from zoo.board.family_pages import write_family_pages
from zoo.board.inputs import BenchResult, Inputs, read_inputs
from zoo.board.leaderboard import Board, Column, build_board, three_digits
from zoo.board.matrix_cells import matrix_cells
from zoo.board.matrix_page import MATRIX_PAGE, write_matrix_page
from zoo.board.measurements import Chosen, latest_measurements, measurements
from zoo.board.plots import curve_figures, fragment, speed_figures, width_figures
from zoo.board.published import code_spans, read_findings
from zoo.board.recipes import RecipeReader
from zoo.board.results import Result, group_results, slug
from zoo.board.table import datatables_head, leaderboard_table, shared_datatables
from zoo.compare.records import fit_seconds
from zoo.compare.report import format_summary
from zoo.matrix.cli import PROTOCOLS

__all__ = ["SiteFiles", "build_site"]

PLOT_PAGES = (("speed.html", "Speed"), ("width.html", "Accuracy against width"), ("curves.html", "Curves"))


@dataclass(frozen=True)
class SiteFiles:
    """What a build wrote: the index and every other file, relative to the output folder."""

    index: Path
    files: tuple[str, ...]


def _environment() -> Any:
    import jinja2
    import markupsafe

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("zoo.board", "templates"), autoescape=True, keep_trailing_newline=True
    )
    environment.filters["board_slug"] = slug
    environment.filters["code_spans"] = lambda text: markupsafe.Markup(code_spans(text))
    return environment


def build_site(folders: Sequence[Path], out: Path, protocols: Path = PROTOCOLS) -> SiteFiles:
    """Read the records and benchmarks under ``folders`` and write the board into ``out``; the
    matrix page's rows and columns are those of ``protocols`` (``matrix.yaml`` and ``yardsticks/``)."""
    inputs = read_inputs(folders)
    results = group_results(inputs, RecipeReader(inputs.roots))
    chosen = latest_measurements(inputs.benches, commit_times(inputs.roots))
    board = build_board(results, chosen)
    return _Writer(out.resolve(), inputs, results, chosen, board, protocols).write()


class _Writer:
    def __init__(
        self, out: Path, inputs: Inputs, results: list[Result], chosen: Chosen, board: Board, protocols: Path
    ) -> None:
        self.out, self.inputs, self.results, self.chosen, self.board = out, inputs, results, chosen, board
        self.matrix = matrix_cells(inputs, protocols)
        self.findings = read_findings(protocols)
        self.templates = _environment()
        self.written: list[str] = []
        self.figures = {
            "speed.html": [fragment(f, name) for name, f in speed_figures(chosen)],
            "width.html": [fragment(f, name) for name, f in width_figures(results)],
            "curves.html": [fragment(f, name) for name, f in curve_figures(results)],
        }
        self.pages = [(MATRIX_PAGE, "Matrix")] + [(href, label) for href, label in PLOT_PAGES if self.figures[href]]
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
        self.written += write_matrix_page(self._render, self.matrix, self.results, self.out)
        self.written += write_family_pages(self._render, self.matrix, self.results, self.findings, self.out)
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
        shared = shared_datatables()
        for relative, text in (shared or {}).items():
            self._write(relative, text)
        self.shared_datatables = shared is not None

    def _table(self, columns: list[Column], root: str) -> str:
        """The leaderboard's table of ``columns`` on a page ``root`` below the site, with what loads
        DataTables before it."""
        table = leaderboard_table(self.board, columns, root)
        return datatables_head(table, root, shared=self.shared_datatables) + table

    def _remove_stale(self) -> None:
        """Pages of an earlier build into the same folder that this one did not write."""
        kept = set(self.written)
        for folder in ("runs", "bench", "tables", "families"):
            for page in sorted((self.out / folder).glob("*.html")):
                if f"{folder}/{page.name}" not in kept:
                    page.unlink()

    # -- the leaderboard -------------------------------------------------------------------

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
                    "fit_seconds": _number(fit_seconds(record)),
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
