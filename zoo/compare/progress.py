"""A callback that writes each validation's metrics as they come, for a scheduler that decides
while runs train (Tune's ASHA, :mod:`zoo.compare.asha`): ``<run directory>/validation.jsonl``,
one JSON line per validation (the step and every ``val/`` metric).

It also ends the fit when the process that started it is gone (the fit's parent changed: a Tune
trial stopped by its scheduler takes its process with it), so that no orphaned run goes on
writing into a comparison's directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import lightning as L

from zoo.distributed import run_directory

__all__ = ["PROGRESS_FILE", "ValidationLog", "read_progress"]

PROGRESS_FILE = "validation.jsonl"


class ValidationLog(L.Callback):
    """Appends each validation's ``val/`` metrics to the run directory's ``validation.jsonl``
    (whole lines, flushed at once), and stops training when the parent process has gone."""

    def __init__(self) -> None:
        self._parent = os.getppid()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = {key: float(value) for key, value in trainer.callback_metrics.items() if key.startswith("val/")}
        line = json.dumps({"step": trainer.global_step, **metrics}) + "\n"
        with Path(run_directory(trainer), PROGRESS_FILE).open("a", encoding="utf-8") as handle:
            handle.write(line)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if os.getppid() != self._parent:
            trainer.should_stop = True


def read_progress(directory: Path) -> list[dict[str, float]]:
    """The validations written so far in ``directory`` (a line still being written is left out)."""
    file = directory / PROGRESS_FILE
    text = file.read_text(encoding="utf-8") if file.is_file() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]
