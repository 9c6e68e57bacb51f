"""Interrupted training that resumes exactly: ``fit --ckpt_path last``.

What an interrupted run needs to continue the loss trajectory it would have followed:

* **A checkpoint taken between two steps.** On SIGTERM (a scheduler's time limit, ``kill``)
  Lightning finishes the running step and raises ``SIGTERMException`` in every process.
  Ctrl-C would raise ``KeyboardInterrupt`` wherever it lands, in the middle of an optimizer
  step too; during ``fit`` :class:`Resumable` therefore only notes the first Ctrl-C and stops
  after the running step, in every process at the same step (the request is reduced across
  processes after each step). Either way it then saves ``last.ckpt`` where
  ``--ckpt_path last`` looks. A second Ctrl-C stops at once, without a checkpoint.
* **The position in the epoch.** The zoo's training loaders record it in the checkpoint and
  skip what was already trained (:class:`zoo.datamodules.loaders.ResumableDataLoader`).
* **The random state** of every process (dropout masks): :class:`Resumable` stores them in the
  checkpoint and restores them before the first step after resuming.

:func:`continue_last_run` makes ``fit --ckpt_path last`` resume the most recent run of the
model in its own directory (``runs/<model>/version_N``), so the continued run's checkpoints,
metrics and images join the interrupted one's; without such a run it trains from scratch, as
Lightning does, so a job script can always pass ``--ckpt_path last``.
"""

from __future__ import annotations

import random
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import numpy as np
import torch
from jsonargparse import Namespace
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from zoo.distributed import gather_objects

__all__ = ["Resumable", "continue_last_run"]

_RANDOM_STATES = "zoo_random_states"


def _random_states() -> dict[str, Any]:
    """This process's generators, as tensors and plain Python values (``torch.load(weights_only=True)`` reads them)."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, keys.tolist(), position, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["torch.cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_random_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    kind, keys, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(states["torch"])
    if "torch.cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch.cuda"])


class Resumable(L.Callback):
    """Saves ``last.ckpt`` when a fit is interrupted, and makes resuming from a checkpoint exact.

    See the module docstring. The checkpoint goes to the first ``ModelCheckpoint``'s directory
    under its "last" name, where ``--ckpt_path last`` finds it.
    """

    def __init__(self) -> None:
        self._interrupt_requested = False  # this process saw a Ctrl-C
        self._stopping = False  # some process did, and all stop after this step
        self._forced = False  # a second Ctrl-C: stopped at once
        self._previous_handler: Any = None
        self._pending_states: dict[str, Any] | None = None

    # -- Ctrl-C: stop between two steps ------------------------------------------------------------

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._interrupt_requested = self._stopping = self._forced = False
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._interrupt_requested:
            self._forced = True
            self._restore_handler()
            raise KeyboardInterrupt
        self._interrupt_requested = True
        print("\nInterrupted: stopping after this step and saving last.ckpt (Ctrl-C again stops at once, unsaved).", flush=True)

    def _restore_handler(self) -> None:
        if self._previous_handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Every process takes part (one small all-reduce), so that all stop after the same step.
        if trainer.strategy.reduce_boolean_decision(self._interrupt_requested, all=False):
            self._stopping = True
            raise KeyboardInterrupt

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_handler()
        # Only stops between two steps leave a consistent state: SIGTERM's (Lightning raises it
        # there) and the Ctrl-C this callback turned into one; not a Ctrl-C that landed anywhere.
        between_steps = isinstance(exception, SIGTERMException) or (
            isinstance(exception, KeyboardInterrupt) and self._stopping and not self._forced
        )
        if not between_steps or trainer.state.fn != "fit":
            return
        checkpoint = trainer.checkpoint_callback
        if not isinstance(checkpoint, ModelCheckpoint) or checkpoint.dirpath is None:
            return
        path = Path(checkpoint.dirpath) / f"{checkpoint.CHECKPOINT_NAME_LAST}{checkpoint.FILE_EXTENSION}"
        trainer.save_checkpoint(path)  # every process: it synchronises them
        rank_zero_info(f"Saved {path} at step {trainer.global_step}; continue with: fit ... --ckpt_path last")

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_handler()

    # -- random state -----------------------------------------------------------------------------

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint[_RANDOM_STATES] = gather_objects(_random_states())  # every process saves checkpoints

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        states = checkpoint.get(_RANDOM_STATES)
        if states is None:
            return
        if len(states) != trainer.world_size:
            rank_zero_warn(
                f"The checkpoint holds the random states of {len(states)} processes and this run has "
                f"{trainer.world_size}: they are not restored, so dropout draws differ from the interrupted run."
            )
            return
        self._pending_states = states[trainer.global_rank]

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        # Restored only now: loading the checkpoint and starting up may draw random numbers.
        if self._pending_states is not None:
            _set_random_states(self._pending_states)
            self._pending_states = None


def continue_last_run(config: Namespace) -> None:
    """For ``fit --ckpt_path last``: point the logger at the newest run with a ``last.ckpt``.

    ``config`` is the parsed ``fit`` configuration. The runs of the configured logger live in
    ``<save_dir>/<name>`` (``<save_dir>/<project>`` for W&B), one directory per version with
    ``checkpoints/last.ckpt``; the newest becomes the logger's version (the same TensorBoard
    directory, the same W&B run id) and ``ckpt_path`` its file. Without one, or with several
    loggers, nothing changes and Lightning looks for "last" itself.
    """
    logger = config.get("trainer", {}).get("logger") if config.get("ckpt_path") == "last" else None
    if not isinstance(logger, Namespace) or not isinstance(logger.get("init_args"), Namespace):
        return
    init = logger.init_args
    group = init.get("project") if "project" in init else init.get("name")
    root = Path(init.get("save_dir") or ".") / str(group or "lightning_logs")
    checkpoints = sorted(root.glob("*/checkpoints/last.ckpt"), key=lambda path: path.stat().st_mtime)
    if checkpoints:
        init.version = checkpoints[-1].parent.parent.name
        config.ckpt_path = str(checkpoints[-1])
