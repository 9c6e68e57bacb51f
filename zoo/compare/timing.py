"""A callback that measures a run's training speed and size and writes them to
``<run directory>/timing.json``.

``zoo compare`` adds it to every ``fit`` it starts (``--trainer.callbacks+=zoo.compare.timing.StepTimer``):
the time budget's calibration reads seconds per step from it, and every record its throughput and
the model's parameter count.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities.data import extract_batch_size

from zoo.distributed import run_directory

__all__ = ["TIMING_FILE", "StepTimer", "read_timing"]

TIMING_FILE = "timing.json"


class StepTimer(L.Callback):
    """Times training batches (start of one to start of the next, so the optimiser step counts).

    ``seconds_per_step`` is the median interval, the typical step: it ignores the occasional
    validation pass between two batches, and samples per second is the median batch size over
    it. ``wall_seconds_per_step`` is the mean, validation and epoch ends included: what a time
    budget spends per step. Both leave out the first intervals (warm-up). ``train_seconds`` is the
    whole training time, warm-up included, of this attempt and of the earlier ones a resumed fit
    continues (carried in the checkpoint, up to when it was saved): the intervals are this
    attempt's, and ``earlier_train_seconds`` is the earlier attempts' part of the total (what a
    record adds to this attempt's time). ``parameters`` counts the trained module's parameters (a
    tied embedding once), the size a leaderboard compares.

    Args:
        skip: Intervals at the start left out of the median (warm-up), when there are more than that.
    """

    def __init__(self, skip: int = 2) -> None:
        self.skip = skip
        self._starts: list[float] = []
        self._sizes: list[int] = []
        self._earlier_seconds = 0.0

    def _train_seconds(self) -> float:
        """Training seconds so far: the earlier attempts' and this one's."""
        now = time.perf_counter()
        return self._earlier_seconds + (now - self._starts[0] if self._starts else 0.0)

    def state_dict(self) -> dict[str, float]:
        return {"train_seconds": self._train_seconds()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._earlier_seconds = float(state_dict.get("train_seconds", 0.0))

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._starts.append(time.perf_counter())
        self._sizes.append(extract_batch_size(batch))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._starts.append(time.perf_counter())
        intervals = [b - a for a, b in zip(self._starts, self._starts[1:])]
        if len(intervals) > self.skip:
            intervals = intervals[self.skip :]
        if not trainer.is_global_zero or not intervals:
            return
        step = statistics.median(intervals)
        timing = {
            "steps": trainer.global_step,
            "seconds_per_step": step,
            "wall_seconds_per_step": sum(intervals) / len(intervals),
            "samples_per_second": statistics.median(self._sizes) / step * trainer.world_size,
            "train_seconds": self._train_seconds(),
            "earlier_train_seconds": self._earlier_seconds,
            "parameters": sum(parameter.numel() for parameter in pl_module.parameters()),
        }
        Path(run_directory(trainer), TIMING_FILE).write_text(json.dumps(timing) + "\n", encoding="utf-8")


def read_timing(directory: Path) -> dict[str, float]:
    """The timing a :class:`StepTimer` wrote in ``directory`` (empty when it wrote none)."""
    file = directory / TIMING_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
