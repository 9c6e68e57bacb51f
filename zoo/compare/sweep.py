"""The protocol of Zoology and MAD in ``zoo compare``: sweep one setting, keep the best, then seeds.

Zoology reports each cell of its MQAR figure at the best of a learning-rate sweep, and MAD scores
a mixer by its best run over a grid of learning rates and weight decays; only then are results
compared, and seeds give the interval. ``--sweep model.lr=1e-4,3e-4,1e-3 --select val/accuracy``
does that for any task:

1. every combination of the grid runs at every value of the swept setting, with ``sweep_seeds``
   seeds (seeds ``0 ..``), as ordinary runs of the comparison (resumable, one record each);
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
    """One swept setting: a ``fit`` flag, its values, the metric and direction that choose, and
    the seeds each value runs with before the choice."""

    key: str
    values: list[str]
    metric: str
    mode: str = "max"
    seeds: int = 1

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ConfigurationError(f"--select's direction must be max or min, got {self.mode!r}.")
        if self.seeds < 1:
            raise ConfigurationError(f"--sweep_seeds must be at least 1, got {self.seeds}.")

    def expand(self, axes: dict[str, list[str]]) -> dict[str, list[str]]:
        """The grid's axes with the swept setting as the last, fastest one."""
        if self.key in axes:
            raise ConfigurationError(f"--sweep {self.key} is also a --grid axis: sweep it or vary it, not both.")
        return {**axes, self.key: self.values}


@dataclass(frozen=True)
class SweepChoice:
    """What the sweep kept for one combination of the grid."""

    combination: str  # the grid's combination, without the swept setting
    kept: Combination  # the combination with its best value
    means: dict[str, float | None]  # value -> mean metric over the sweep's seeds (None: none reported)


def parse_sweep(spec: str, metric: str, mode: str, seeds: int) -> Sweep:
    """``KEY=V1,V2,...`` (as ``--grid`` writes an axis) and the choosing metric."""
    ((key, values),) = parse_grid([spec]).items()
    if len(values) < 2:
        raise ConfigurationError(f"--sweep {spec!r} has one value: a sweep chooses between two or more.")
    return Sweep(key, values, metric, mode, seeds)


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
    for base, candidates in groups:
        means: dict[str, float | None] = {}
        for value, candidate in zip(sweep.values, candidates):
            scores = [
                float(r["metrics"][sweep.metric])
                for r in records
                if r["combination"] == candidate.name and r["seed"] < sweep.seeds and sweep.metric in r["metrics"]
            ]
            means[value] = statistics.fmean(scores) if scores else None
        scored = [(mean, value) for value, mean in means.items() if mean is not None]
        if not scored:
            raise ConfigurationError(
                f"No run of {base.name} reported {sweep.metric} in the sweep of {sweep.key}: choose a metric the "
                "runs log (--select), or see their logs."
            )
        best = (max if sweep.mode == "max" else min)(scored, key=lambda pair: pair[0])[1]
        choices.append(SweepChoice(base.name, candidates[sweep.values.index(best)], means))
    return choices


def sweep_table(sweep: Sweep, choices: list[SweepChoice]) -> str:
    """Markdown: each combination's mean metric at every swept value, the kept one in bold."""
    rows = []
    for choice in choices:
        kept = choice.kept.overrides[sweep.key]
        cells = [
            "-" if mean is None else (f"**{mean:.4f}**" if value == kept else f"{mean:.4f}")
            for value, mean in choice.means.items()
        ]
        rows.append([f"`{choice.combination}`", *cells, kept])
    seeds = f"{sweep.seeds} seed{'s' if sweep.seeds > 1 else ''}"
    return (
        f"Sweep of `{sweep.key}`: {sweep.metric} ({sweep.mode}), mean over {seeds} per value; the kept value in bold.\n\n"
        + markdown_table(["combination", *(f"{sweep.key}={v}" for v in sweep.values), "kept"], rows)
    )
