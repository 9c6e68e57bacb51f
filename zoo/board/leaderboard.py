"""The leaderboard: a row per attention recipe, a column per measured quantity, a cell per both.

How a column is chosen (no code names a task or a metric):

* **Tasks.** Every metric in the records of a task and setting is a column: ``(task, setting,
  metric)``. Shown at first are each task's *headline* metric in its *main* settings; the others
  are listed under "Columns" and on the run pages.
* **Headline metric** of a setting: a metric named ``accuracy`` or ``acc`` where the records hold
  one, else the one the model's checkpoints monitor (the registry's ``monitor``, under the stage
  the records were evaluated at: ``val/loss`` -> ``test/loss`` after ``--evaluate test``), else the
  first by name.
* **Main settings** of a task: those that compare the most rows, when that is at least two (a grid
  over ``d_model`` and ``seq_len`` gives one column per width and length); where every setting
  holds one row, the one with the most runs.
* **Speed** (``zoo bench attention``): milliseconds of forward and backward at 1k, 4k and 16k
  tokens, one group of columns per condition (:mod:`zoo.board.measurements`); shown are the
  condition with the most measured rows among the non-causal sweeps and among the causal ones.
* **Decoding** (``zoo bench state``): milliseconds a token after 1k, 4k and 16k tokens of context,
  and the cache's bytes per context token; shown: 16k, the condition with the most rows.

A cell's text is what the comparison's report writes (mean ± sd [95% interval] over seeds, or
one seed's value), a benchmark's median to three significant digits; it links to the page of its
runs or its benchmark.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from zoo.board.catalog import RowInfo, higher_is_better, row_info, stackable
from zoo.board.measurements import Chosen, Condition, Measurement
from zoo.board.recipes import recipe_label
from zoo.board.results import Result, slug
from zoo.compare.report import format_summary
from zoo.compare.run import STAGE_PREFIX

__all__ = [
    "ACCURACY_NAMES",
    "LENGTHS",
    "Board",
    "Cell",
    "Column",
    "build_board",
    "headline_metric",
    "natural_key",
    "three_digits",
]

#: The context lengths of the speed and decoding columns, and their labels.
LENGTHS = {1024: "1k", 4096: "4k", 16384: "16k"}
ACCURACY_NAMES = ("accuracy", "acc")


@dataclass(frozen=True)
class Column:
    """A column: its id, group (a task, ``speed``, ``decoding``), header, description, whether it
    shows at first and which way is better."""

    key: str
    group: str
    label: str
    description: str
    visible: bool
    higher_is_better: bool


@dataclass(frozen=True)
class Cell:
    """A cell's text, the number it sorts by, its link and its tooltip."""

    text: str
    value: float | None
    href: str | None
    title: str = ""


@dataclass(frozen=True)
class Board:
    """Rows (label -> filters), columns in order, and the cells that hold a value."""

    rows: dict[str, RowInfo]
    columns: list[Column]
    cells: dict[tuple[str, str], Cell]

    def count(self, column: Column) -> int:
        """How many rows hold a cell of ``column``."""
        return sum((row, column.key) in self.cells for row in self.rows)


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sorts ``seq_len=64`` before ``seq_len=128``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def three_digits(value: float) -> str:
    """Three significant digits, thousands separated, no exponent: 7.86, 277, 12,600."""
    if value == 0:
        return "0"
    rounded = float(f"{value:.3g}")
    decimals = max(0, 2 - int(f"{abs(rounded):e}".split("e")[1]))
    return f"{rounded:,.{decimals}f}"


def headline_metric(metrics: Iterable[str], model: str | None, stage: str | None) -> tuple[str, bool] | None:
    """The metric a setting's column shows first, and whether higher is better."""
    metrics = sorted(metrics)
    if not metrics:
        return None
    for name in metrics:
        if name.rsplit("/", 1)[-1] in ACCURACY_NAMES:
            return name, True
    monitor = _monitor(model)
    if monitor is not None:
        name = STAGE_PREFIX.get(stage or "", "val/") + monitor[0].split("/", 1)[-1]
        if name in metrics:
            return name, monitor[1] == "max"
    return metrics[0], higher_is_better(metrics[0])


def _monitor(model: str | None) -> tuple[str, str] | None:
    from zoo.tasks import MODEL_REGISTRY

    if model is None or model not in MODEL_REGISTRY:
        return None
    return tuple(MODEL_REGISTRY.get(model).monitor)


def _short(item: str) -> str:
    """``model.lr=1e-3`` -> ``lr=1e-3``; ``config=configs/x.yaml`` -> ``x.yaml``."""
    key, sep, value = item.partition("=")
    if key == "config":
        return value.rsplit("/", 1)[-1]
    return f"{key.rsplit('.', 1)[-1]}{sep}{value}"


def _difference(setting: tuple[str, ...], reference: tuple[str, ...]) -> str:
    added = [_short(item) for item in setting if item not in reference]
    if added:
        return ", ".join(added)
    removed = [_short(item) for item in reference if item not in setting]
    return "without " + ", ".join(removed) if removed else ""


def _task_columns(results: list[Result]) -> tuple[list[Column], dict[tuple[str, str], Cell]]:
    columns: list[Column] = []
    cells: dict[tuple[str, str], Cell] = {}
    by_task: dict[str, dict[tuple[str, ...], list[Result]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        if result.metrics:
            by_task[result.task][result.setting].append(result)

    def most_rows(task: str) -> tuple[int, str]:
        return -max(len(group) for group in by_task[task].values()), task

    for task in sorted(by_task, key=most_rows):  # the task that compares the most rows first
        settings = by_task[task]
        most = max(len(group) for group in settings.values())
        if most >= 2:
            main = sorted((s for s, g in settings.items() if len(g) == most), key=lambda s: natural_key(" ".join(s)))
        else:
            main = [min(settings, key=lambda s: (-sum(len(r.runs) for r in settings[s]), natural_key(" ".join(s))))]
        shared = tuple(item for item in main[0] if all(item in s for s in settings))
        ordered = main + sorted((s for s in settings if s not in main), key=lambda s: natural_key(" ".join(s)))
        for setting in ordered:
            group = settings[setting]
            stage = group[0].runs[0].recipe.stage
            metrics = sorted({m for result in group for m in result.metrics})
            headline = headline_metric(metrics, group[0].model, stage)
            differs = _difference(setting, shared)
            for metric in [headline[0], *(m for m in metrics if m != headline[0])] if headline else metrics:
                better = headline[1] if headline and metric == headline[0] else higher_is_better(metric)
                key = slug(task, metric, *setting)
                columns.append(
                    Column(
                        key=key,
                        group=task,
                        label=f"{task} {metric}" + (f" ({differs})" if differs else ""),
                        description=f"{task}, {metric} ({'higher' if better else 'lower'} is better); "
                        f"mean ± sd [95% interval] over seeds; setting: {' '.join(setting) or 'the defaults'}",
                        visible=setting in main and headline is not None and metric == headline[0],
                        higher_is_better=better,
                    )
                )
                for result in group:
                    summary = result.summary(metric)
                    if summary is not None:
                        cells[result.row, key] = Cell(
                            text=format_summary(summary),
                            value=summary.mean,
                            href=f"runs/{result.slug}.html",
                            title=f"{summary.n} seed(s); {metric}",
                        )
            _parameter_column(task, setting, differs, setting in main, group, columns, cells)
    return columns, cells


def _parameter_column(
    task: str,
    setting: tuple[str, ...],
    differs: str,
    main: bool,
    group: list[Result],
    columns: list[Column],
    cells: dict[tuple[str, str], Cell],
) -> None:
    """The parameters of each row's model in one task setting, where its records count them
    (``zoo compare`` records from this version on; seeds build the same model, so the first run's)."""
    counts = [(result, result.parameters) for result in group if result.parameters is not None]
    if not counts:
        return
    key = slug(task, "parameters", *setting)
    label = f"{task} parameters" + (f" ({differs})" if differs else "")
    description = f"{task}: the model's parameters; setting: {' '.join(setting) or 'the defaults'}"
    columns.append(Column(key, task, label, description, visible=main, higher_is_better=False))
    for result, count in counts:
        cells[result.row, key] = Cell(three_digits(count), count, f"runs/{result.slug}.html", f"{count:,} parameters")


def _bench_columns(chosen: Chosen) -> tuple[list[Column], dict[tuple[str, str], Cell], set[str]]:
    """Speed and decoding columns from the newest measurement of each case, condition and length."""
    columns: list[Column] = []
    cells: dict[tuple[str, str], Cell] = {}
    rows: set[str] = set()
    for benchmark, group, quantities in (
        ("attention", "speed", (("ms", "forward+backward ms (median)"),)),
        ("state", "decoding", (("ms/token", "ms to decode a token (median)"), ("cache B/token", "cache bytes"))),
    ):
        found = {
            (c, case, length): m
            for (c, case, length), m in chosen.cells.items()
            if c.benchmark == benchmark and length in LENGTHS and stackable(case)
        }
        conditions = sorted({c for c, _, _ in found})
        shown = _covering(found, limit=None if benchmark == "attention" else 1)
        for condition in conditions:
            for quantity, description in quantities:
                for length, label in LENGTHS.items():
                    key = slug(group, quantity, condition.label, str(length))
                    visible = condition in shown and (benchmark == "attention" or length == max(LENGTHS))
                    present = False
                    for (c, case, at), measurement in found.items():
                        if c != condition or at != length:
                            continue
                        cell = _bench_cell(measurement, quantity, chosen.is_older(measurement))
                        if cell is not None:
                            row = recipe_label(case)[0]
                            cells[row, key] = cell
                            rows.add(row)
                            present = True
                    if present:
                        columns.append(
                            Column(
                                key=key,
                                group=group,
                                label=f"{quantity} {label} ({condition.short})",
                                description=f"{description} at {length} tokens ({'per context token, ' if 'cache' in quantity else ''}"
                                f"{condition.label}); lower is better",
                                visible=visible,
                                higher_is_better=False,
                            )
                        )
    return columns, cells, rows


def _gain(rows: dict[str, set[int]], covered: set[str], condition: Condition) -> tuple[int, int, bool, str]:
    """What showing ``condition`` adds: rows not yet shown measured at every length, at any length."""
    new = [lengths for case, lengths in rows.items() if case not in covered]
    return sum(len(lengths) == len(LENGTHS) for lengths in new), len(new), condition.device == "cpu", condition.label


def _covering(found: dict[tuple[Condition, str, int], Measurement], limit: int | None) -> list[Condition]:
    """The conditions shown at first: greedily, the one that gives the most rows not yet shown a
    time at every length (then at any length), until every measured row has one (or ``limit``)."""
    rows: dict[Condition, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for (condition, case, length), measurement in found.items():
        if measurement.time_ms is not None:
            rows[condition][case].add(length)
    shown: list[Condition] = []
    covered: set[str] = set()
    while rows and (limit is None or len(shown) < limit):
        best = max(rows, key=lambda condition: _gain(rows[condition], covered, condition))
        if _gain(rows[best], covered, best)[1] == 0:
            break
        shown.append(best)
        covered |= set(rows.pop(best))
    return shown


def _bench_cell(measurement: Measurement, quantity: str, older: bool) -> Cell | None:
    """A benchmark's cell; ``*`` after a number measured by an older result than the newest of its
    case and condition (older code)."""
    href = f"bench/{slug(measurement.source.name)}.html#{slug(measurement.case)}"
    title = f"{measurement.source.name}: {measurement.status}" + (
        "; older than the newest measurement of this case here" if older else ""
    )
    mark = " *" if older else ""
    if quantity == "cache B/token":
        if measurement.cache_bytes is None:
            return None
        per_token = measurement.cache_bytes / measurement.length
        return Cell(three_digits(per_token) + mark, per_token, href, f"{title}; {measurement.cache_bytes:,} bytes")
    if measurement.time_ms is None:
        return Cell("-", None, href, title)
    return Cell(three_digits(measurement.time_ms) + mark, measurement.time_ms, href, title)


def build_board(results: list[Result], chosen: Chosen) -> Board:
    """The leaderboard of ``results`` and the chosen benchmark measurements."""
    task_columns, cells = _task_columns(results)
    bench_columns, bench_cells, bench_rows = _bench_columns(chosen)
    cells |= bench_cells
    parts = {result.row: result.runs[0].recipe.parts for result in results if result.runs}
    parts |= {row: recipe_label(row)[1] for row in bench_rows if row not in parts}
    rows = {row: row_info(parts[row]) for row in sorted(parts, key=natural_key) if any(k[0] == row for k in cells)}
    return Board(rows=rows, columns=task_columns + bench_columns, cells=cells)
