"""SIGTERM or Ctrl-C saves last.ckpt; ``fit --ckpt_path last`` continues the same loss trajectory.

The signals are real: a callback (:class:`tests.helpers.steplog.StepLosses`) sends one to its own process
after a given training step, the way a scheduler's SIGTERM or a user's Ctrl-C arrives, and the
run stops and saves. The two-process case is in test_distributed.py.
"""

from __future__ import annotations

import io
import random
import signal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.helpers.steplog import read_losses, read_validated
from zoo.commands import main
from zoo.resume import Resumable


def _fit(log: Path, *extra: str) -> list[str]:
    """Kernel regression in mini-batches of 10: five shuffled steps an epoch, four epochs."""
    return [
        "fit",
        "--model",
        "nadaraya_watson",
        "--data.batch_size",
        "10",
        "--trainer.max_epochs",
        "4",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--trainer.callbacks+=tests.helpers.steplog.StepLosses",
        "--trainer.callbacks.path",
        str(log),
        *extra,
    ]


@pytest.mark.parametrize(
    ("signal_name", "after_step"),
    [("SIGTERM", 3), ("SIGTERM", 7), ("SIGINT", 7), ("SIGTERM", 10), ("SIGINT", 10)],
    ids=[
        "sigterm-before-any-checkpoint",
        "sigterm-mid-epoch",
        "ctrl-c-mid-epoch",
        "sigterm-at-epoch-end",
        "ctrl-c-at-epoch-end",
    ],
)
def test_interrupted_run_resumes_on_the_same_trajectory(in_tmp, signal_name, after_step) -> None:
    main(_fit(in_tmp / "reference.jsonl", "--trainer.logger.name", "reference"))
    reference = read_losses(in_tmp / "reference.jsonl")
    assert sorted(reference) == list(range(1, 21))

    previous_sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):
            main(
                _fit(
                    in_tmp / "interrupted.jsonl",
                    "--trainer.callbacks.signal_after_step",
                    str(after_step),
                    "--trainer.callbacks.signal_name",
                    signal_name,
                )
            )
    finally:
        signal.signal(signal.SIGINT, previous_sigint)  # Lightning ignores Ctrl-C after handling one
    interrupted = read_losses(in_tmp / "interrupted.jsonl")
    assert max(interrupted) == after_step  # stopped right after the step it was signalled in
    run = in_tmp / "runs" / "nadaraya_watson" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").is_file()

    main(_fit(in_tmp / "resumed.jsonl", "--ckpt_path", "last"))
    resumed = read_losses(in_tmp / "resumed.jsonl")
    assert min(resumed) == after_step + 1 and max(resumed) == 20
    assert not (in_tmp / "runs" / "nadaraya_watson" / "version_1").exists()  # continued in the same run directory
    # the run's last.ckpt is its last step's (what `zoo compare` evaluates), not a versioned copy beside the stop's
    assert sorted(p.name for p in (run / "checkpoints").glob("last*")) == ["last.ckpt"]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 20
    for step, loss in (interrupted | resumed).items():
        assert loss == pytest.approx(reference[step], rel=1e-6, abs=1e-9), f"step {step}"
    validated = read_validated(in_tmp / "interrupted.jsonl") + read_validated(in_tmp / "resumed.jsonl")
    assert validated == read_validated(in_tmp / "reference.jsonl") == [0, 1, 2, 3]  # none skipped, none repeated


def test_checkpoints_carry_the_random_state_to_the_first_step_after_resuming() -> None:
    """Dropout draws continue as in the uninterrupted run; the state survives a weights-only load."""
    checkpoint: dict = {}
    Resumable().on_save_checkpoint(None, None, checkpoint)
    expected = (torch.rand(3), np.random.rand(3), random.random())

    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=True)
    torch.manual_seed(123), np.random.seed(123), random.seed(123)  # what starting up a resumed run does
    resumable = Resumable()
    resumable.on_load_checkpoint(SimpleNamespace(world_size=1, global_rank=0), None, restored)
    resumable.on_train_batch_start(None, None, None, 0)
    assert torch.equal(torch.rand(3), expected[0]) and np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]
