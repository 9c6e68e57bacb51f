"""Interrupted training that resumes exactly: ``fit --ckpt_path last``.

What an interrupted run needs to continue the loss trajectory it would have followed:

* **A checkpoint taken between two steps.** SIGTERM (a scheduler's time limit, ``kill``) and
  Ctrl-C would otherwise interrupt wherever they land, in the middle of an optimizer step too.
  While training runs, :class:`Resumable` turns the first of them into a request: the running
  step finishes, every process stops after the same step (the request is reduced across
  processes), and ``last.ckpt`` is saved where ``--ckpt_path last`` looks. After an epoch's
  last step, and during the validation that follows it, the stop comes once that validation
  has run. A second Ctrl-C stops at once, without a checkpoint.
* **The position in the epoch.** The zoo's training loaders record it in the checkpoint and
  skip what was already trained (:class:`zoo.datamodules.loaders.ResumableDataLoader`);
  :class:`Resumable` hands them the recorded position where Lightning drops it (a task that
  reads ``estimated_stepping_batches`` in an epoch-limited fit, Lightning issue #20550).
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
    """Stops a fit cleanly on SIGTERM or Ctrl-C and saves ``last.ckpt``; makes resuming exact.

    See the module docstring. While training runs, SIGTERM and the first Ctrl-C only request a
    stop: after each training step the processes agree (one small all-reduce) whether any was
    asked, and all raise together, ``SIGTERMException`` or ``KeyboardInterrupt`` as Lightning
    would. The checkpoint goes to the first ``ModelCheckpoint``'s directory under its "last"
    name, where ``--ckpt_path last`` finds it.

    This replaces Lightning's own SIGTERM handler during training. That one broadcasts from
    inside the handler, once per signal a process receives, and forwards SIGTERM to the other
    local processes; a process signalled twice (by the scheduler and by the forwarding), or
    signalled while the others wait in another collective, leaves the collectives unpaired,
    which hangs a multi-process run. Here the handler only records the request.

    A stop after the last step of an epoch waits for the epoch's validation, which a resumed
    run would not repeat.
    """

    def __init__(self) -> None:
        self._requested: int | None = None  # the signal this process received
        self._stopping = False  # some process received one: all stop after this step
        self._forced = False  # a second Ctrl-C: stopped at once
        self._previous_handlers: dict[int, Any] = {}
        self._pending_states: dict[str, Any] | None = None

    # -- signals: stop between two steps ------------------------------------------------------------

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After Lightning has installed its handlers (it does so once the fit is set up).
        self._requested, self._stopping, self._forced = None, False, False
        if threading.current_thread() is threading.main_thread():
            self._previous_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        _load_pending_loader_states(trainer)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._requested is None:
            self._requested = signum
            second = " (Ctrl-C again stops at once, unsaved)" if signum == signal.SIGINT else ""
            print(
                f"\n{signal.Signals(signum).name}: stopping after this training step and saving last.ckpt{second}.",
                flush=True,
            )
        elif signum == signal.SIGINT:
            self._forced = True
            self._restore_handlers()
            raise KeyboardInterrupt

    def _restore_handlers(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler)
        self._previous_handlers = {}

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # After an epoch's last step, stop once its validation has run (on_train_epoch_end).
        if self._agree_to_stop(trainer) and batch_idx + 1 < trainer.num_training_batches:
            self._stop()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._agree_to_stop(trainer):  # also a request made during the validation
            self._stop()

    def _agree_to_stop(self, trainer: L.Trainer) -> bool:
        """Whether any process was asked to stop; every process takes part, so all decide alike."""
        self._stopping = trainer.strategy.reduce_boolean_decision(self._requested is not None, all=False)
        return self._stopping

    def _stop(self) -> None:
        raise KeyboardInterrupt if self._requested == signal.SIGINT else SIGTERMException

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore_handlers()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_handlers()
        if not self._stopping or self._forced or trainer.state.fn != "fit":
            return  # not a stop between two steps: the state may be half updated
        checkpoint = trainer.checkpoint_callback
        if not isinstance(checkpoint, ModelCheckpoint) or checkpoint.dirpath is None:
            return
        path = Path(checkpoint.dirpath) / f"{checkpoint.CHECKPOINT_NAME_LAST}{checkpoint.FILE_EXTENSION}"
        # The callback's own record of its last checkpoint, saved with it: the resumed fit then
        # overwrites this file at its end, where it would otherwise keep it and write last-v1.ckpt
        # beside it (Lightning's version counter), leaving last.ckpt at the stop's step.
        checkpoint.last_model_path = str(path)
        trainer.save_checkpoint(path)  # every process: it synchronises them
        rank_zero_info(f"Saved {path} at step {trainer.global_step}; continue with: fit ... --ckpt_path last")

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

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Restored only now: loading the checkpoint and starting up may draw random numbers.
        if self._pending_states is not None:
            _set_random_states(self._pending_states)
            self._pending_states = None


def _load_pending_loader_states(trainer: L.Trainer) -> None:
    """Hand the training loaders the positions the checkpoint holds, if Lightning has not.

    Lightning loads them when it builds the training loader after restoring a checkpoint. A task
    whose ``configure_optimizers`` reads ``trainer.estimated_stepping_batches`` in a fit limited
    by epochs has it built before the restore, and the positions are never loaded (Lightning
    issue #20550): the resumed epoch would start again at its first batch. At the start of
    training no batch has been drawn yet, so loading them now is what Lightning would have done.
    """
    fit_loop = trainer.fit_loop
    load = getattr(fit_loop, "_load_combined_loader_states", None)  # private: absent in another version
    if load is not None and getattr(fit_loop, "_combined_loader_states_to_load", None):
        load()


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
