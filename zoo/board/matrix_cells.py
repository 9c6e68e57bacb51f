"""The matrix's cells as the board shows them: for every row of ``zoo matrix`` (every causal
registered attention and every recipe, :func:`zoo.matrix.rows.select_rows`) and every yardstick of
``matrix.yaml``, the score at the best rate with its interval over seeds, or nothing ("not run"; or
"n/a" where the yardstick's protocol has no cell for the row: a benchmark times one registered
layer, not a recipe or an entry with arguments, unless its protocol takes recipes).

``zoo matrix`` writes a yardstick's records to ``SIZE/YARDSTICK/GROUP/`` (a comparison folder) or
``SIZE/YARDSTICK/GROUP.json`` (a bench), and the board finds them by those last parts of the
path, wherever the folder was copied (``benchmarks/results/matrix/quick/`` holds the committed
ones). A compare cell takes the rate ``zoo compare --sweep`` keeps (:func:`zoo.compare.sweep.choose`:
the best mean of the protocol's ``select`` metric over the sweep's first seed), and reports the
protocol's ``metric`` over every seed at that rate (:func:`zoo.compare.stats.summarize`: mean and
Student-t 95% interval); while some of the sweep's rates have no record yet, the cell says how many
ran (its rate is the best of those, not yet the sweep's choice). A bench cell is
``state_bytes_N`` (the cache's bytes after N tokens) or ``time_ratio_N`` (the time at N tokens
over the protocol's first reference, causal SDPA), or the kind of status it failed with there
(``out of memory``, ``too slow``, ``refused``, ``failed``; also where a shorter length's failure
skipped N; the file says why). A row measured again on its own, into ``GROUP-NAME.json`` beside
its group's file (after a failure the group run could not recover from, or a change to the layer),
replaces the group file's cell.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zoo.attention import ATTENTION_REGISTRY
from zoo.board.catalog import higher_is_better, row_info
from zoo.board.inputs import BenchResult, Comparison, Inputs
from zoo.board.measurements import measurements
from zoo.compare.stats import Summary, summarize
from zoo.compare.sweep import Sweep, choose, grouped, parse_select
from zoo.matrix.plan import measures
from zoo.matrix.protocol import SIZES, Yardstick, load_yardsticks
from zoo.matrix.rows import Row, select_rows

__all__ = ["CHANCE", "Cell", "Coverage", "Matrix", "MatrixRow", "matrix_cells", "row_names"]

#: A yardstick's chance score where it is not about zero: parity's two answers, S3's six elements.
#: A column's colour runs from chance (or its worst value, for a lower-is-better metric) to its best.
CHANCE = {"parity": 0.5, "word_problem": 1 / 6}
_BENCH_METRIC = re.compile(r"^(state_bytes|time_ratio)_(\d+)$")


@dataclass(frozen=True)
class Cell:
    """One yardstick's score of one row: ``summary`` None where no record holds it."""

    summary: Summary | None = None
    rate: str | None = None
    source: Path | None = None
    parameters: int | None = None
    measured: bool = False  # a benchmark's measurement, not a score over seeds
    applies: bool = True  # False: the yardstick's protocol has no cell for the row (zoo.matrix.plan.measures)
    failure: str | None = None  # why a benchmark recorded no number for the row ("out of memory")
    rates: tuple[int, int] | None = None  # (rates run, rates swept) where the sweep is not finished

    @property
    def value(self) -> float | None:
        return None if self.summary is None else self.summary.mean

    @property
    def run(self) -> bool:
        """Whether the protocol ran for the row: a score, or a benchmark's measurement or failure."""
        return self.summary is not None or self.measured


@dataclass(frozen=True)
class MatrixRow:
    """A row of the matrix, its family (``hybrid`` for a recipe) and a cell per yardstick."""

    row: Row
    family: str
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def parameters(self) -> int | None:
        """The parameter count the row's first recorded compare cell counted (that yardstick's model)."""
        return next((cell.parameters for cell in self.cells.values() if cell.parameters), None)


@dataclass(frozen=True)
class Coverage:
    """How much of a column has run: ``run`` of its ``rows`` (those it applies to), and ``held`` of
    its ``first`` first-priority rows at the protocol's ``seeds`` (None: a benchmark's column,
    whose cell is one measurement, so ``held`` counts the first-priority rows run)."""

    run: int
    rows: int
    held: int
    first: int
    seeds: int | None


@dataclass(frozen=True)
class Matrix:
    """The yardsticks in ``matrix.yaml``'s order and every row, at one size."""

    size: str
    yardsticks: tuple[Yardstick, ...]
    rows: tuple[MatrixRow, ...]

    def better_high(self, stick: Yardstick) -> bool:
        """Whether a larger score is better in the column of ``stick``."""
        if stick.kind == "bench":
            return False
        return higher_is_better(stick.metric, (stick.select or "").partition(":")[2] or None)

    def coverage(self, stick: Yardstick) -> Coverage:
        """How much of the column of ``stick`` has run (what the matrix's targets ask of a column)."""
        cells = [(row.row, row.cells[stick.name]) for row in self.rows if row.cells[stick.name].applies]
        first = [cell for row, cell in cells if row.first]
        run = sum(cell.run for _, cell in cells)
        if stick.kind == "bench":
            return Coverage(run, len(cells), sum(cell.run for cell in first), len(first), None)
        seeds = stick.sizes[self.size].seeds
        held = sum(cell.summary is not None and cell.summary.n >= seeds for cell in first)
        return Coverage(run, len(cells), held, len(first), seeds)

    def fraction(self, stick: Yardstick, value: float) -> float:
        """How far ``value`` lies from the column's worst (chance, or its worst value) to its best,
        in 0..1; on a log scale for a benchmark's column, whose values span orders of magnitude."""
        values = [v for r in self.rows if (v := r.cells[stick.name].value) is not None]
        if self.better_high(stick):
            worst, best = CHANCE.get(stick.name, 0.0), max(values)
        else:
            worst, best = max(values), min(values)
        if stick.kind == "bench" and min(values) > 0:
            worst, best, value = math.log(worst), math.log(best), math.log(value)
        return 1.0 if best == worst else min(1.0, max(0.0, (value - worst) / (best - worst)))


def row_names(row: Row) -> list[str]:
    """The registered names a row's attention text holds (a name, a mapping, or a pattern of them)."""
    value = yaml.safe_load(row.attention)
    entries = value if isinstance(value, list) else [value]
    return [str(e.get("name") if isinstance(e, dict) else e) for e in entries]


def _where(path: Path, sizes: Sequence[str], sticks: dict[str, Yardstick]) -> tuple[str, str] | None:
    """``(size, yardstick)`` of a matrix folder or file ``.../SIZE/YARDSTICK/GROUP``, else None."""
    parts = path.parts
    if len(parts) >= 3 and parts[-3] in sizes and parts[-2] in sticks:
        return parts[-3], parts[-2]
    return None


def _holds(folder: Comparison, row: Row) -> bool:
    """Whether the comparison ``folder`` is one of the groups ``row`` runs in (a recipe has its own)."""
    name = folder.directory.name
    return name == f"recipe-{row.label}" if row.recipe else not name.startswith("recipe-")


def _compare_cells(stick: Yardstick, rows: Sequence[Row], folders: Sequence[Comparison]) -> dict[str, Cell]:
    cells = {}
    metric, mode = parse_select(stick.select, None, "") if stick.select else (stick.metric, "max")
    sweep = Sweep({key: list(values) for key, values in stick.sweep.items()}, metric, mode)
    for row in rows:
        records = [
            r
            for c in folders
            if _holds(c, row)
            for r in c.records
            if (r.get("overrides") or {}).get("model.attention") == row.attention and metric in r.get("metrics", {})
        ]
        if not records:
            continue
        (choice,) = choose(records, sweep, grouped(sweep, {"model.attention": [row.attention]}))
        kept = [r for r in records if r["combination"] == choice.kept.name and stick.metric in r["metrics"]]
        if not kept:
            continue
        by_seed = {int(r["seed"]): float(r["metrics"][stick.metric]) for r in kept}
        source = next(c.directory for c in folders for r in c.records if r is kept[0])
        parameters = next((int(r["parameters"]) for r in kept if r.get("parameters")), None)
        summary = summarize([by_seed[seed] for seed in sorted(by_seed)])
        run = sum(mean is not None for mean in choice.means.values())
        rates = None if run == len(choice.means) else (run, len(choice.means))
        cells[row.label] = Cell(summary, choice.value, source, parameters, rates=rates)
    return cells


def _bench_cells(stick: Yardstick, rows: Sequence[Row], benches: Sequence[BenchResult]) -> dict[str, Cell]:
    match = _BENCH_METRIC.match(stick.metric)
    if match is None:
        return {}
    what, length = match.group(1), int(match.group(2))
    found: dict[str, Cell] = {}
    for bench in sorted(benches, key=lambda b: ("-" in b.path.stem, b.path.name)):  # a row's own file last
        at = {m.case: m for m in measurements(bench) if m.length == length}
        reference = next((at[name].time_ms for name in stick.references if name in at), None)
        for case, m in at.items():
            if m.status != "ok":  # its kind, also where a shorter length's failure skipped this one
                kind = m.status.removeprefix("skipped: ").split(":")[0].split(" at length")[0]
                found[case] = Cell(source=bench.path, measured=True, failure=kind)
            elif what == "state_bytes" and m.cache_bytes is not None:
                found[case] = Cell(summarize([float(m.cache_bytes)]), source=bench.path, measured=True)
            elif what == "time_ratio" and m.time_ms is not None and reference:
                found[case] = Cell(summarize([m.time_ms / reference]), source=bench.path, measured=True)
    return {row.label: found[row.case] for row in rows if row.case in found}


def _size(inputs: Inputs, sticks: dict[str, Yardstick]) -> str:
    """The largest size any record is of (the quick one when none is)."""
    paths = [c.directory for c in inputs.comparisons] + [b.path for b in inputs.benches]
    found = {where[0] for p in paths if (where := _where(p, SIZES, sticks))}
    return next((size for size in reversed(SIZES) if size in found), SIZES[0])


def matrix_cells(inputs: Inputs, protocols: Path, names: Sequence[str] | None = None) -> Matrix:
    """The matrix of ``protocols`` (a folder with ``matrix.yaml`` and ``yardsticks/``) from the
    records in ``inputs``; ``names`` limits the rows as ``zoo matrix --names`` does."""
    raw: dict[str, Any] = yaml.safe_load((protocols / "matrix.yaml").read_text(encoding="utf-8")) or {}
    sticks = load_yardsticks(protocols / "yardsticks", list(raw["yardsticks"]))
    recipes = {label: protocols / path for label, path in (raw.get("recipes") or {}).items()}
    rows = select_rows(raw.get("first") or [], recipes, names)
    size = _size(inputs, sticks)
    table: dict[str, dict[str, Cell]] = {row.label: {} for row in rows}
    for stick in sticks.values():
        if stick.kind == "bench":
            benches = [b for b in inputs.benches if _where(b.path.with_suffix(""), (size,), {stick.name: stick})]
            cells = _bench_cells(stick, rows, benches)
        else:
            folders = [c for c in inputs.comparisons if _where(c.directory, (size,), {stick.name: stick})]
            cells = _compare_cells(stick, rows, folders)
        for row in rows:
            table[row.label][stick.name] = cells.get(row.label, Cell(applies=measures(stick, row)))
    matrix_rows = []
    for row in rows:
        names_ = row_names(row)
        known = all(n in ATTENTION_REGISTRY for n in names_)
        family = "hybrid" if row.recipe else (row_info(names_).family if known else "?")
        matrix_rows.append(MatrixRow(row, family, table[row.label]))
    return Matrix(size, tuple(sticks.values()), tuple(matrix_rows))
