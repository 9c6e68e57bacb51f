"""What a matrix group has cost and what the rest of it will: CPU minutes from its own records.

A training group's ``records.jsonl`` (:mod:`zoo.compare.records`) holds one record per finished
run: its row (``overrides["model.attention"]``, the attention as the grid wrote it), its ``run``,
the seconds it took (``fit_seconds`` + ``eval_seconds``) and its ``threads``: core-minutes are
their product (a resumed fit's seconds as :func:`zoo.compare.records.fit_seconds` reads them).
Families differ by an order of
magnitude on one protocol (MQAR's quick cell took 6 to 57 minutes a run here), so a protocol's
single ``minutes`` misstates a matrix that is partly run: a row's remaining runs are costed at the
median of its own recorded runs, and a row with none at the protocol's ``minutes``. A bench group
(one command, one results file) is all recorded or all to run, at ``minutes`` a row.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from zoo.compare.records import fit_seconds, load_records
from zoo.matrix.plan import Group

__all__ = ["GroupCost", "group_cost"]


@dataclass(frozen=True)
class GroupCost:
    """A group's runs and CPU minutes, recorded and still to run."""

    recorded_runs: int
    recorded_minutes: float
    remaining_runs: int
    remaining_minutes: float


def group_cost(group: Group) -> GroupCost:
    """The group's cost from the records under ``group.out`` and its protocol's ``minutes``."""
    minutes = group.yardstick.sizes[group.size].minutes or 0.0
    if group.yardstick.kind == "bench":
        if group.done:
            return GroupCost(group.runs, group.runs * minutes, 0, 0.0)
        return GroupCost(0, 0.0, group.runs, group.runs * minutes)
    taken = _minutes_by_row(group)
    per_row = group.runs // len(group.rows)
    recorded_runs = remaining_runs = 0
    recorded_minutes = remaining_minutes = 0.0
    for row in group.rows:
        spent = taken.get(row.attention, [])
        left = max(per_row - len(spent), 0)
        recorded_runs += len(spent)
        recorded_minutes += sum(spent)
        remaining_runs += left
        remaining_minutes += left * (statistics.median(spent) if spent else minutes)
    return GroupCost(recorded_runs, recorded_minutes, remaining_runs, remaining_minutes)


def _minutes_by_row(group: Group) -> dict[str, list[float]]:
    """Each row's recorded runs' core-minutes (one entry a run, whatever launcher wrote it)."""
    runs: dict[str, dict[str, float]] = defaultdict(dict)
    for record in load_records(group.out / "records.jsonl"):
        attention = (record.get("overrides") or {}).get("model.attention")
        if attention is None or record.get("run") is None:
            continue
        seconds = (fit_seconds(record) or 0.0) + (record.get("eval_seconds") or 0.0)
        runs[attention][record["run"]] = seconds * (record.get("threads") or 1) / 60
    return {attention: list(by_run.values()) for attention, by_run in runs.items()}
