"""Pivoted records tables: one row per combination of the other settings, one column per value of
a swept setting (a width, a learning rate, a task's source), as Zoology's Figure 2 and MAD's table
are laid out.

A records block's ``pivot`` names the setting and how its columns read::

    pivot:
      key: d_model                  # a --grid/--sweep axis as the combination names spell it
      values: ["16", "32", "64"]    # its values as written on the command line
      headers: [width 16, width 32, width 64]
      cell: test/accuracy (steps)   # a column spelling of zoo.board.record_cells
      seeds: 1                      # optional: the cells read seeds 0 .. seeds-1 alone
      best: kept                    # optional: a column naming the value whose cell is best
      select: val/accuracy          # optional: the metric ``best`` chooses by, when not ``cell``'s
      mode: max                     # optional: max (default) or min, for ``best``

A record's row is its combination without ``key``: the name ``zoo compare`` gives the remaining
settings (``attention=gla`` of ``d_model=32,attention=gla``; ``base`` when none is left), so
``rows`` are spelt as in an ordinary block; a bare row holds the runs of every source that has
it, ``SOURCE:row`` one source's. A value written ``SOURCE:VALUE`` takes its runs from that source
alone (a column of another study beside this one's). A cell is the ``cell`` of the row's runs at
that value; two runs of one seed in a cell (a rerun appended, or two sources at one value) are
refused in one line, since nothing says which of them the page shows. ``best`` is chosen as ``zoo compare
--sweep`` chooses (:mod:`zoo.compare.sweep`): the value whose mean main metric over the cell's runs
(with ``seeds: 1``, seed 0's) is highest (``mode: min``: lowest); its cell is bold, and the
block's ``columns`` then read every seed of the row at that value (the sweep's seeds at its kept
value).

``select`` chooses by another metric than the one the cells show, as ``zoo matrix`` keeps a
rate chosen on ``val/accuracy`` and reports ``test/accuracy`` there: the value is the one
:func:`zoo.compare.sweep.choose` keeps with one sweep seed (the best ``select`` of seed 0, the
first in ``values``' order on a tie), the function :mod:`zoo.board.matrix_cells` calls, so a page
and the matrix keep the same rate when ``values`` are listed in the yardstick's sweep order.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo.board.record_cells import CellStyle, cell_text, main_metric, one_run_a_seed
from zoo.compare.grid import axis_label, combinations
from zoo.compare.sweep import Sweep, choose, grouped
from zoo.errors import ConfigurationError, DataError

__all__ = ["SOURCE", "Pivot", "check_values", "pivot_cells", "pivot_value", "row_name"]

#: The key under which a pivoted table's records carry the name of their source.
SOURCE = "_source"

_FIELDS = {"key", "values", "headers", "cell", "seeds", "best", "select", "mode"}


@dataclass(frozen=True)
class Pivot:
    """The swept setting a block spreads over its columns, and how each column's cell reads."""

    key: str
    values: tuple[str, ...]
    headers: tuple[str, ...]
    cell: str
    seeds: int | None = None
    best: str | None = None
    mode: str = "max"
    select: str | None = None

    @classmethod
    def parse(cls, spec: object, where: str) -> Pivot:
        """The block's ``pivot:`` mapping, checked: one line naming the field at fault."""
        if not isinstance(spec, dict) or not all(spec.get(name) for name in ("key", "values", "cell")):
            raise ConfigurationError(f"{where}: a pivot needs `key:`, `values:` and `cell:`.")
        if unknown := sorted(set(spec) - _FIELDS):
            raise ConfigurationError(f"{where}: unknown pivot field {unknown[0]!r}; fields: {sorted(_FIELDS)}.")
        values = tuple(str(value) for value in spec["values"])
        headers = tuple(str(header) for header in spec.get("headers", values))
        if len(headers) != len(values):
            raise ConfigurationError(f"{where}: the pivot has {len(values)} values and {len(headers)} headers.")
        if spec.get("mode", "max") not in ("max", "min"):
            raise ConfigurationError(f"{where}: pivot `mode:` is max or min, not {spec['mode']!r}.")
        if spec.get("select") is not None and spec.get("best") is None:
            raise ConfigurationError(f"{where}: pivot `select:` chooses the `best:` value; give the pivot `best:`.")
        seeds = spec.get("seeds")
        return cls(
            str(spec["key"]),
            values,
            headers,
            str(spec["cell"]),
            None if seeds is None else int(seeds),
            None if spec.get("best") is None else str(spec["best"]),
            str(spec.get("mode", "max")),
            None if spec.get("select") is None else str(spec["select"]),
        )

    def all_headers(self) -> list[str]:
        """The columns the pivot adds: one per value, then ``best``'s."""
        return [*self.headers, *([self.best] if self.best else [])]


def _pivot_key(record: Mapping[str, Any], key: str) -> str | None:
    """The override of ``record`` that the pivot's ``key`` names (its full key or its axis label)."""
    keys = list(record.get("overrides", {}))
    return next((k for k in keys if key in (k, axis_label(k, keys))), None)


def pivot_value(record: Mapping[str, Any], key: str, where: str) -> str:
    """The value ``record`` has for the pivot's setting."""
    found = _pivot_key(record, key)
    if found is None:
        raise DataError(
            f"{where}: the run {record['combination']!r} has no setting {key!r} to pivot on; "
            f"its settings: {sorted(record.get('overrides', {}))}."
        )
    return str(record["overrides"][found])


def row_name(record: Mapping[str, Any], key: str) -> str:
    """The combination's name without the pivot's setting, as ``zoo compare`` names combinations."""
    found = _pivot_key(record, key)
    rest = {k: [v] for k, v in record.get("overrides", {}).items() if k != found}
    return combinations(rest)[0].name


def _matches(record: Mapping[str, Any], value: str, pivot: Pivot, where: str) -> bool:
    """Whether ``record`` is at ``value`` (``SOURCE:VALUE``: and comes from that source)."""
    own = pivot_value(record, pivot.key, where)
    return value in (own, f"{record[SOURCE]}:{own}")


def check_values(pivot: Pivot, records: Sequence[dict[str, Any]], where: str) -> None:
    """Refuse a pivot value that no run has (a typo, or a value spelt otherwise than on the command line)."""
    have = {pivot_value(r, pivot.key, where) for r in records}
    have |= {f"{r[SOURCE]}:{pivot_value(r, pivot.key, where)}" for r in records}
    if unknown := [value for value in pivot.values if value not in have]:
        raise ConfigurationError(
            f"{where}: no run has {pivot.key}={unknown[0]}; the runs have {sorted(v for v in have if ':' not in v)} "
            "(written as on the command line, SOURCE:VALUE for one source's)."
        )


def _at(runs: Sequence[dict[str, Any]], value: str, pivot: Pivot, where: str) -> list[dict[str, Any]]:
    """The runs of one row at one value (the first ``pivot.seeds`` seeds), each seed once."""
    chosen = [r for r in runs if _matches(r, value, pivot, where) and (pivot.seeds is None or r["seed"] < pivot.seeds)]
    one_run_a_seed(chosen, f"the column {pivot.key}={value}", where)
    return chosen


def _score(runs: Sequence[dict[str, Any]], metric: str) -> float | None:
    values = [float(v) for r in runs if (v := r["metrics"].get(metric, r.get(metric))) is not None]
    return statistics.fmean(values) if values else None


def _best(cells: Mapping[str, Sequence[dict[str, Any]]], pivot: Pivot) -> str | None:
    """The value ``best`` keeps (None when no run has the metric): by the mean of ``cell``'s main
    metric over each cell's runs, or with ``select`` as the matrix keeps a rate."""
    if pivot.select is None:
        metric = main_metric(pivot.cell)
        scored = [(score, value) for value, group in cells.items() if (score := _score(group, metric)) is not None]
        return (max if pivot.mode == "max" else min)(scored, key=lambda pair: pair[0])[1] if scored else None
    if not any(r["seed"] == 0 and pivot.select in r["metrics"] for group in cells.values() for r in group):
        return None
    # choose() matches runs to candidates by combination name; each value is renamed by its index
    # (one axis, values "0", "1", ...) so that values no name can spell, such as SOURCE:VALUE, stay apart.
    sweep = Sweep({pivot.key: [str(i) for i in range(len(cells))]}, pivot.select, pivot.mode)
    runs = [{**r, "combination": c.name} for c, group in zip(sweep.values, cells.values()) for r in group]
    (choice,) = choose(runs, sweep, grouped(sweep, {}))
    return list(cells)[int(choice.value)]


def pivot_cells(
    runs: Sequence[dict[str, Any]], pivot: Pivot, style: CellStyle, where: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """One row's pivot cells (and ``best``'s), and every run of the row at the best value (none
    without ``best``)."""
    cells = {value: _at(runs, value, pivot, where) for value in pivot.values}
    texts = {value: cell_text(group, pivot.cell, style) if group else "-" for value, group in cells.items()}
    if not pivot.best:
        return list(texts.values()), []
    best = _best(cells, pivot)
    if best is None:
        return [*texts.values(), "-"], []
    if not texts[best].startswith("**"):
        texts[best] = f"**{texts[best]}**"
    kept = [r for r in runs if _matches(r, best, pivot, where)]
    return [*texts.values(), best], kept
