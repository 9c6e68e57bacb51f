"""The step timer: a resumed fit's training time counts the attempts before it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel

from zoo.compare.timing import TIMING_FILE, StepTimer


class _SlowSteps(L.Callback):
    """Makes every step take at least 0.1 s."""

    def on_train_batch_end(self, *args: Any) -> None:
        time.sleep(0.1)


def _trainer(root: Path, max_steps: int, *callbacks: L.Callback) -> L.Trainer:
    return L.Trainer(
        default_root_dir=root,
        max_steps=max_steps,
        callbacks=[StepTimer(), *callbacks],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_a_resumed_fit_counts_the_training_time_of_the_attempt_it_continues(tmp_path: Path) -> None:
    first = _trainer(tmp_path, 4, _SlowSteps())
    first.fit(BoringModel())
    earlier = json.loads((tmp_path / TIMING_FILE).read_text())["train_seconds"]
    first.save_checkpoint(tmp_path / "last.ckpt")  # as SIGTERM saves one

    _trainer(tmp_path, 5).fit(BoringModel(), ckpt_path=tmp_path / "last.ckpt")
    timing = json.loads((tmp_path / TIMING_FILE).read_text())
    assert earlier >= 0.4 and timing["steps"] == 5
    assert timing["seconds_per_step"] < 0.05  # the step times are this attempt's alone
    assert timing["train_seconds"] >= earlier  # the total carries the earlier attempt's
    assert timing["earlier_train_seconds"] >= earlier  # and says how much of it is the earlier's
