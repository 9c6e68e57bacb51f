"""The protocol of Zoology and MAD in ``zoo compare``: sweep settings, keep the best, then seeds.

Zoology reports each cell of its MQAR figure at the best of a learning-rate sweep, and MAD scores
a mixer by its best run over a grid of learning rates and weight decays; only then are results
compared, and seeds give the interval. ``--sweep model.lr=1e-4,3e-4,1e-3 --select val/accuracy``
does that for any task, and ``--sweep`` given again sweeps several settings together, every
combination of their values (MAD's ``--sweep model.lr=1e-4,5e-4,1e-3 --sweep
model.weight_decay=0,0.1``):

1. every combination of the grid runs at every swept value, with ``sweep_seeds`` seeds (seeds
   ``0 ..``), as ordinary runs of the comparison (resumable, one record each);
2. for each combination the value whose mean ``metric`` over those seeds is best (``max`` or
   ``min``; a value none of whose runs reported the metric is never chosen) is kept;
3. each combination then runs ``--seeds`` seeds at its kept value (the sweep's runs at that value
   are reused: the same command is the same record), and the report compares those, each under
   the name of the combination with its kept value, after a table of the sweep.

A setting swept this way is chosen on the metric it is judged by, as the papers do: their
numbers are best-of numbers. Select on a validation metric and report the test one to keep the
choice off the test set (``--evaluate validate`` makes the selected metric a validation one).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zoo.bench.report import markdown_table
from zoo.compare.grid import Combination, combinations, parse_grid
from zoo.errors import ConfigurationError

__all__ = ["Sweep", "SweepChoice", "choose", "parse_select", "parse_sweep", "sweep_table"]


@dataclass(frozen=True)
class Sweep:
    """The swept settings (``fit`` flags and their values, every combination of them a value of
    the sweep), the metric and direction that choose, and the seeds each value runs with before
    the choice."""

    axes: dict[str, list[str]]
    metric: str
    mode: str = "max"
    seeds: int = 1

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ConfigurationError(f"--select's direction must be max or min, got {self.mode!r}.")
        if self.seeds < 1:
            raise ConfigurationError(f"--sweep_seeds must be at least 1, got {self.seeds}.")

    @property
    def values(self) -> list[Combination]:
        """The sweep's values, every combination of the swept settings' values, the first slowest."""
        return combinations(self.axes)

    def label(self, value: Combination) -> str:
        """A value as the tables name it: the setting's value alone when one setting is swept."""
        return next(iter(value.overrides.values())) if len(self.axes) == 1 else value.name

    def headers(self) -> list[str]:
        """The sweep table's columns for the values."""
        if len(self.axes) == 1:
            ((key, values),) = self.axes.items()
            return [f"{key}={value}" for value in values]
        return [value.name for value in self.values]

    def expand(self, axes: dict[str, list[str]]) -> dict[str, list[str]]:
        """The grid's axes with the swept settings as the last, fastest ones."""
        for key in self.axes:
            if key in axes:
                raise ConfigurationError(f"--sweep {key} is also a --grid axis: sweep it or vary it, not both.")
        return {**axes, **self.axes}


@dataclass(frozen=True)
class SweepChoice:
    """What the sweep kept for one combination of the grid."""

    combination: str  # the grid's combination, without the swept settings
    kept: Combination  # the combination with its best value
    value: str  # the kept value's label
    means: dict[str, float | None]  # value's label -> mean metric over the sweep's seeds (None: none reported)


def parse_sweep(specs: Sequence[str], metric: str, mode: str, seeds: int) -> Sweep:
    """``KEY=V1,V2,...`` each (as ``--grid`` writes an axis) and the choosing metric."""
    axes = parse_grid(list(specs))
    for spec, values in zip(specs, axes.values()):
        if len(values) < 2:
            raise ConfigurationError(f"--sweep {spec!r} has one value: a sweep chooses between two or more.")
    return Sweep(axes, metric, mode, seeds)


def parse_select(text: str | None, monitor: tuple[str, str] | None, prefix: str) -> tuple[str, str]:
    """``METRIC`` or ``METRIC:max|min``; by default the metric the model's checkpoints monitor,
    under the evaluation's ``prefix`` (``test/``, ``val/``), in its direction."""
    if text is None:
        if monitor is None:
            raise ConfigurationError("--sweep needs --select METRIC[:max|min] for a model that is not registered.")
        return prefix + monitor[0].split("/", 1)[-1], monitor[1]
    metric, _, mode = text.partition(":")
    return metric, mode or "max"


def grouped(sweep: Sweep, axes: dict[str, list[str]]) -> list[tuple[Combination, list[Combination]]]:
    """Each combination of the grid with its runs at every swept value, in the grid's order."""
    expanded = combinations(sweep.expand(axes))
    per_value = len(sweep.values)
    return [(base, expanded[i * per_value : (i + 1) * per_value]) for i, base in enumerate(combinations(axes))]


def choose(
    records: Sequence[dict[str, Any]], sweep: Sweep, groups: list[tuple[Combination, list[Combination]]]
) -> list[SweepChoice]:
    """The best value of each combination, from the sweep's records (seeds below ``sweep.seeds``)."""
    choices = []
    labels = [sweep.label(value) for value in sweep.values]
    for base, candidates in groups:
        means: dict[str, float | None] = {}
        for label, candidate in zip(labels, candidates):
            scores = [
                float(r["metrics"][sweep.metric])
                for r in records
                if r["combination"] == candidate.name and r["seed"] < sweep.seeds and sweep.metric in r["metrics"]
            ]
            means[label] = statistics.fmean(scores) if scores else None
        scored = [(mean, label) for label, mean in means.items() if mean is not None]
        if not scored:
            raise ConfigurationError(
                f"No run of {base.name} reported {sweep.metric} in the sweep of {', '.join(sweep.axes)}: choose a "
                "metric the runs log (--select), or see their logs."
            )
        best = (max if sweep.mode == "max" else min)(scored, key=lambda pair: pair[0])[1]
        choices.append(SweepChoice(base.name, candidates[labels.index(best)], best, means))
    return choices


def sweep_table(sweep: Sweep, choices: list[SweepChoice]) -> str:
    """Markdown: each combination's mean metric at every swept value, the kept one in bold."""
    rows = []
    for choice in choices:
        cells = [
            "-" if mean is None else (f"**{mean:.4f}**" if label == choice.value else f"{mean:.4f}")
            for label, mean in choice.means.items()
        ]
        rows.append([f"`{choice.combination}`", *cells, choice.value])
    seeds = f"{sweep.seeds} seed{'s' if sweep.seeds > 1 else ''}"
    swept = " and ".join(f"`{key}`" for key in sweep.axes)
    return (
        f"Sweep of {swept}: {sweep.metric} ({sweep.mode}), mean over {seeds} per value; the kept value in bold.\n\n"
        + markdown_table(["combination", *sweep.headers(), "kept"], rows)
    )
