"""A callback that logs every training step's loss to a file and can signal its own process.

Used in-process and by ``python -m zoo`` subprocesses (``--trainer.callbacks+=tests.helpers.steplog.StepLosses``
with the project root on ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import lightning as L


class StepLosses(L.Callback):
    """Appends ``{"step", "loss"}`` per training step and ``{"validated": epoch}`` per validation
    to ``path``; optionally signals its own process.

    Args:
        path: JSON-lines file to append to; ``{rank}`` in it becomes the process's global rank.
        signal_after_step: Global step after which to send ``signal_name`` to this process.
        signal_name: ``SIGTERM`` or ``SIGINT`` (what Ctrl-C sends).
        signal_rank: Only the process of this global rank signals itself (None: every process).
    """

    def __init__(
        self,
        path: str,
        signal_after_step: int | None = None,
        signal_name: str = "SIGTERM",
        signal_rank: int | None = None,
    ) -> None:
        self.path, self.signal_after_step, self.signal_name, self.signal_rank = (
            path,
            signal_after_step,
            signal_name,
            signal_rank,
        )

    def _write(self, trainer, row: dict) -> None:
        with Path(self.path.format(rank=trainer.global_rank)).open("a") as handle:
            handle.write(json.dumps(row) + "\n")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._write(trainer, {"step": trainer.global_step, "loss": float(outputs["loss"])})
        if trainer.global_step == self.signal_after_step and self.signal_rank in (None, trainer.global_rank):
            os.kill(os.getpid(), getattr(signal, self.signal_name))

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._write(trainer, {"validated": trainer.current_epoch})


def read_losses(path: Path) -> dict[int, float]:
    """The loss of each global step a :class:`StepLosses` file holds."""
    return {row["step"]: row["loss"] for row in map(json.loads, path.read_text().splitlines()) if "step" in row}


def read_validated(path: Path) -> list[int]:
    """The epochs validated (sanity check excluded), in order."""
    return [row["validated"] for row in map(json.loads, path.read_text().splitlines()) if "validated" in row]
