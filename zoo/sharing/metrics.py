"""The validation and test metrics a run logged, read back from its directory.

A run logs through TensorBoard by default (event files in ``runs/<model>/version_N``) or through
a ``CSVLogger`` (``metrics.csv`` there); both are read, so a model card can show what the run
measured without rerunning anything. Only ``val/`` and ``test/`` metrics count: they are what a
run's closing lines report, and what a card states the model reaches.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EVALUATION_PREFIXES", "LoggedMetric", "logged_metrics"]

EVALUATION_PREFIXES = ("val/", "test/")


@dataclass(frozen=True)
class LoggedMetric:
    """The last value a metric was logged with, and the training step it was logged at."""

    value: float
    step: int


def logged_metrics(directory: Path) -> dict[str, LoggedMetric]:
    """The last logged value of each validation and test metric in run ``directory``, by name
    (none when the run logged none, or logged them elsewhere, to W&B for one)."""
    return _tensorboard_metrics(directory) | _csv_metrics(directory / "metrics.csv")


def _tensorboard_metrics(directory: Path) -> dict[str, LoggedMetric]:
    """From the TensorBoard event files directly in ``directory``: the latest event of each tag."""
    if not any(directory.glob("events.out.tfevents.*")):
        return {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # slow to import

    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})  # 0: keep every value
    events.Reload()
    metrics = {}
    for tag in events.Tags()["scalars"]:
        if tag.startswith(EVALUATION_PREFIXES):
            last = max(events.Scalars(tag), key=lambda event: event.wall_time)
            metrics[tag] = LoggedMetric(float(last.value), int(last.step))
    return metrics


def _csv_metrics(path: Path) -> dict[str, LoggedMetric]:
    """From a ``CSVLogger``'s ``metrics.csv``, whose rows are in logging order."""
    if not path.is_file():
        return {}
    metrics = {}
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            step = int(float(row.get("step") or 0))
            for name, value in row.items():
                if name.startswith(EVALUATION_PREFIXES) and value not in ("", None):
                    metrics[name] = LoggedMetric(float(value), step)
    return metrics
