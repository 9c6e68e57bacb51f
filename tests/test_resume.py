"""SIGTERM or Ctrl-C saves last.ckpt; ``fit --ckpt_path last`` continues the same loss trajectory.

The signals are real: a callback sends one to its own process after a given training step, the
way a scheduler's SIGTERM or a user's Ctrl-C arrives, and the run stops and saves.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import lightning as L
import pytest

from zoo.cli import main


class StepLosses(L.Callback):
    """Appends ``{"step", "loss"}`` per training step to ``path``; optionally signals its own process.

    Args:
        path: JSON-lines file to append to.
        signal_after_step: Global step after which to send ``signal_name`` to this process.
        signal_name: ``SIGTERM`` or ``SIGINT`` (what Ctrl-C sends).
    """

    def __init__(self, path: str, signal_after_step: int | None = None, signal_name: str = "SIGTERM") -> None:
        self.path, self.signal_after_step, self.signal_name = Path(path), signal_after_step, signal_name

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps({"step": trainer.global_step, "loss": float(outputs["loss"])}) + "\n")
        if trainer.global_step == self.signal_after_step:
            os.kill(os.getpid(), getattr(signal, self.signal_name))


def _losses(path: Path) -> dict[int, float]:
    return {row["step"]: row["loss"] for row in map(json.loads, path.read_text().splitlines())}


def _fit(log: Path, *extra: str) -> list[str]:
    """Kernel regression in mini-batches of 10: five shuffled steps an epoch, four epochs."""
    return ["fit", "--model", "nadaraya_watson", "--data.batch_size", "10", "--trainer.max_epochs", "4",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.callbacks+=test_resume.StepLosses", "--trainer.callbacks.path", str(log), *extra]


@pytest.mark.parametrize(
    ("signal_name", "after_step"),
    [("SIGTERM", 7), ("SIGINT", 7), ("SIGTERM", 10)],
    ids=["sigterm-mid-epoch", "ctrl-c-mid-epoch", "sigterm-at-epoch-end"],
)
def test_interrupted_run_resumes_on_the_same_trajectory(in_tmp, signal_name, after_step) -> None:
    main(_fit(in_tmp / "reference.jsonl", "--trainer.logger.name", "reference"))
    reference = _losses(in_tmp / "reference.jsonl")
    assert sorted(reference) == list(range(1, 21))

    previous_sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):
            main(_fit(in_tmp / "interrupted.jsonl", "--trainer.callbacks.signal_after_step", str(after_step),
                      "--trainer.callbacks.signal_name", signal_name))
    finally:
        signal.signal(signal.SIGINT, previous_sigint)  # Lightning ignores Ctrl-C after handling one
    interrupted = _losses(in_tmp / "interrupted.jsonl")
    assert max(interrupted) == after_step  # stopped right after the step it was signalled in
    run = in_tmp / "runs" / "nadaraya_watson" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").is_file()

    main(_fit(in_tmp / "resumed.jsonl", "--ckpt_path", "last"))
    resumed = _losses(in_tmp / "resumed.jsonl")
    assert min(resumed) == after_step + 1 and max(resumed) == 20
    assert not (in_tmp / "runs" / "nadaraya_watson" / "version_1").exists()  # continued in the same run directory
    for step, loss in (interrupted | resumed).items():
        assert loss == pytest.approx(reference[step], rel=1e-6, abs=1e-9), f"step {step}"
