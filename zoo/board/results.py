"""The records grouped as the board shows them: one result per task, setting and attention recipe,
over its seeds.

Records of the same run reach the board more than once when a comparison's records were copied
into another (``docs/results/language_modelling.md``: the recurrent layers' rows copied the first
causal variants' ``dot_product`` runs): a record of the same task, setting and row with the seed and
metrics of one already read is that run again, and counts once. Two different runs of one seed (a
grid
run twice into two folders) are both listed on the run page, and the later (by its ``finished``
time) counts, as a resumed comparison's report counts the last record of a run.

A grid axis that changes the attention recipe along with its values (``--grid config=a.yaml,b.yaml``
where each file names another attention) belongs to the row, not to the setting: within one
comparison, an axis with at least two values that maps one to one onto the rows is left out of
the setting.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zoo.board.inputs import Comparison, Inputs
from zoo.board.recipes import Recipe, RecipeReader, flag_key
from zoo.compare.stats import Summary, summarize

__all__ = ["Result", "Run", "group_results", "slug"]


def slug(*parts: str) -> str:
    """A file name for ``parts``: readable, and unique by a short hash of them all."""
    text = "-".join(re.sub(r"[^A-Za-z0-9_.=+-]+", "_", part) for part in parts)[:80].strip("_-")
    digest = hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:8]
    return f"{text}-{digest}"


@dataclass(frozen=True)
class Run:
    """One record, where it came from, and its run directory where it is on this machine."""

    comparison: Comparison
    record: dict[str, Any]
    recipe: Recipe

    @property
    def seed(self) -> int:
        return int(self.record["seed"])

    @property
    def directory(self) -> Path | None:
        """The run directory: under the comparison folder (``runs/<combination>/seed<N>``, wherever
        the folder was moved), else where the record says, if it exists here."""
        record = self.record
        for candidate in (
            self.comparison.directory / "runs" / str(record["combination"]) / f"seed{record['seed']}",
            Path(str(record.get("run_dir", ""))),
        ):
            if str(candidate) and candidate.is_dir():
                return candidate
        return None


@dataclass
class Result:
    """The runs of one attention recipe on one task in one setting: one run page."""

    task: str
    setting: tuple[str, ...]
    row: str
    #: The attention names the row stacks, as written (one for a single attention, with or without options).
    parts: tuple[str, ...] = ()
    runs: list[Run] = field(default_factory=list)
    replaced: list[Run] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return slug(self.task, self.row, *self.setting)

    @property
    def model(self) -> str | None:
        return self.runs[0].recipe.model if self.runs else None

    @property
    def metrics(self) -> list[str]:
        return sorted({name for run in self.runs for name in run.record["metrics"]})

    @property
    def parameters(self) -> int | None:
        """The model's parameter count, as the first run that recorded one counted it."""
        return next((run.record["parameters"] for run in self.runs if run.record.get("parameters")), None)

    def values(self, metric: str) -> dict[int, float]:
        """Seed -> value of ``metric`` over the counted runs."""
        return {run.seed: float(run.record["metrics"][metric]) for run in self.runs if metric in run.record["metrics"]}

    def summary(self, metric: str) -> Summary | None:
        values = self.values(metric)
        return summarize([values[seed] for seed in sorted(values)]) if values else None


def _row_axes(recipes: Sequence[tuple[dict[str, Any], Recipe]]) -> set[str]:
    """``key=value`` items of the grid axes that map one to one onto rows, in one comparison."""
    axes: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for record, recipe in recipes:
        for key, value in (record.get("overrides") or {}).items():
            axes[key].add((str(value), recipe.row))
    items = set()
    for key, pairs in axes.items():
        values = {value for value, _ in pairs}
        rows = {row for _, row in pairs}
        if len(values) >= 2 and len(pairs) == len(values) == len(rows):
            items |= {f"{flag_key(key)}={value}" for value, _ in pairs}
    return items


def group_results(inputs: Inputs, reader: RecipeReader) -> list[Result]:
    """Every result, sorted by task, setting and row."""
    results: dict[tuple[str, tuple[str, ...], str], Result] = {}
    seen: set[tuple[Any, ...]] = set()
    for comparison in inputs.comparisons:
        recipes = [(record, reader.read(record)) for record in comparison.records]
        row_items = _row_axes(recipes)
        for record, recipe in recipes:
            if row_items:
                recipe = replace(recipe, grid=tuple(item for item in recipe.grid if item not in row_items))
            key = (recipe.task, recipe.setting, recipe.row)
            identity = (*key, int(record["seed"]), json.dumps(record["metrics"], sort_keys=True))
            if identity in seen and record["metrics"]:
                continue
            seen.add(identity)
            result = results.setdefault(key, Result(recipe.task, recipe.setting, recipe.row, recipe.parts))
            result.runs.append(Run(comparison, record, recipe))
    for result in results.values():
        by_seed: dict[int, list[Run]] = defaultdict(list)
        for run in result.runs:
            by_seed[run.seed].append(run)
        counted, replaced = [], []
        for seed in sorted(by_seed):
            runs = sorted(by_seed[seed], key=lambda r: (str(r.record.get("finished", "")), r.comparison.name))
            counted.append(runs[-1])
            replaced += runs[:-1]
        result.runs, result.replaced = counted, replaced
    return [results[key] for key in sorted(results)]
