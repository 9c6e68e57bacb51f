"""Helpers for code that runs in every process of a multi-process (DDP) run.

Two rules keep such runs from hanging: a collective operation must be called by every process,
the same number of times and in the same order; and code that runs on one process only
(writing files, drawing figures) must call none. :func:`gather_objects` is a collective for
every process; :func:`run_directory` is safe on one process, where Lightning's
``Trainer.log_dir``, which broadcasts, is not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import lightning as L
import torch.distributed as dist

__all__ = ["gather_objects", "run_directory"]

T = TypeVar("T")


def gather_objects(obj: T) -> list[T]:
    """Every process's ``obj``, in rank order (``[obj]`` without a process group).

    A collective: every process must call it. Objects are pickled, so they may differ in size
    across processes (unlike ``LightningModule.all_gather``, which needs equal shapes).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def run_directory(trainer: L.Trainer) -> Path:
    """The directory of the run: config, checkpoints, images. No collective: safe on one process.

    TensorBoard and CSV loggers have one (``runs/<model>/version_N``). For other loggers
    (Weights & Biases) it is ``<save_dir>/<name>/<version>``, where Lightning also puts the
    checkpoints (``<save_dir>/<project>/<run id>`` for W&B); without a logger, the trainer's
    ``default_root_dir``.
    """
    if not trainer.loggers:
        return Path(trainer.default_root_dir)
    logger = trainer.loggers[0]
    log_dir = getattr(logger, "log_dir", None)
    if log_dir is not None:
        return Path(log_dir)
    version = logger.version
    return Path(
        logger.save_dir or trainer.default_root_dir,
        str(logger.name),
        version if isinstance(version, str) else f"version_{version}",
    )
