"""Where an exported model comes from: its checkpoint, the run that wrote it, and what both record.

A checkpoint carries the zoo's record (seed, package versions), the data module's class and
arguments, its epoch and step, and the checkpoint callback's state (the metric it tracks and
the best checkpoint so far). The run directory it sits in (``runs/<model>/version_N``, the
checkpoint being in its ``checkpoints/``) adds the resolved ``config.yaml`` (the recipe), the
commands that ran there (``commands.jsonl``) and the logged metrics. :func:`describe_run` reads
them all into a :class:`TrainingRun`, the plain data a model card is written from; what a file
lacks stays empty, and the card says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.loggers import read_commands
from zoo.provenance import RECORD_KEY
from zoo.sharing.metrics import LoggedMetric, logged_metrics

__all__ = ["TrainingData", "TrainingRun", "best_checkpoint_name", "describe_run", "run_directory_of"]


@dataclass(frozen=True)
class TrainingData:
    """The data module a model was trained on: its registered name (None for a class the
    registry does not know), its class path and its arguments."""

    name: str | None
    class_path: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TrainingRun:
    """What a model card states about training.

    Attributes:
        checkpoint: The checkpoint exported.
        epoch: Its epoch, as Lightning counts them (from 0).
        step: Its optimizer step.
        seed: The run's global seed (``seed_everything``).
        versions: The package versions the checkpoint was written with.
        data: The data module, with its arguments.
        monitor: The metric the run's checkpoints tracked, and its best value.
        is_best: Whether the checkpoint is the best by that metric.
        directory: The run directory, where there is one.
        commands: The command lines run there, oldest first.
        metrics: The last validation and test metrics logged there.
        config: The run's resolved configuration (``config.yaml``), as text.
    """

    checkpoint: Path
    epoch: int | None = None
    step: int | None = None
    seed: int | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    data: TrainingData | None = None
    monitor: tuple[str, float | None] | None = None
    is_best: bool = False
    directory: Path | None = None
    commands: list[str] = field(default_factory=list)
    metrics: dict[str, LoggedMetric] = field(default_factory=dict)
    config: str | None = None


def run_directory_of(checkpoint: Path) -> Path | None:
    """The run directory of a checkpoint in its ``checkpoints/`` folder, if that directory holds
    the run's ``config.yaml``."""
    directory = checkpoint.parent.parent
    if checkpoint.parent.name == "checkpoints" and (directory / "config.yaml").is_file():
        return directory
    return None


def best_checkpoint_name(checkpoint: Mapping[str, Any]) -> str | None:
    """The file name of the best checkpoint the checkpoint callback knew of when ``checkpoint``
    was saved (its directory may have moved since), or None."""
    state = _checkpoint_callback(checkpoint)
    path = state.get("best_model_path")
    return os.path.basename(path) if isinstance(path, str) and path else None


def describe_run(path: Path, checkpoint: Mapping[str, Any]) -> TrainingRun:
    """Everything known about how the checkpoint at ``path`` (read into ``checkpoint``) was trained."""
    record = checkpoint.get(RECORD_KEY) or {}
    state = _checkpoint_callback(checkpoint)
    monitor = state.get("monitor")
    score = state.get("best_model_score")
    directory = run_directory_of(path)
    return TrainingRun(
        checkpoint=path,
        epoch=checkpoint.get("epoch"),
        step=checkpoint.get("global_step"),
        seed=record.get("seed"),
        versions=dict(record.get("versions") or {}),
        data=_training_data(checkpoint.get("datamodule_hyper_parameters")),
        monitor=(monitor, None if score is None else float(score)) if isinstance(monitor, str) else None,
        is_best=best_checkpoint_name(checkpoint) == path.name,
        directory=directory,
        commands=read_commands(directory) if directory else [],
        metrics=logged_metrics(directory) if directory else {},
        config=(directory / "config.yaml").read_text(encoding="utf-8") if directory else None,
    )


def _checkpoint_callback(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The state of the first ``ModelCheckpoint`` callback the checkpoint holds, or nothing."""
    for name, state in (checkpoint.get("callbacks") or {}).items():
        if str(name).startswith("ModelCheckpoint") and isinstance(state, dict):
            return state
    return {}


def _training_data(hyperparameters: Any) -> TrainingData | None:
    """The data module of a checkpoint's ``datamodule_hyper_parameters`` (LightningCLI's ``_class_path``
    and arguments), matched against the registered data modules by class path."""
    if not isinstance(hyperparameters, dict) or not isinstance(hyperparameters.get("_class_path"), str):
        return None
    class_path = hyperparameters["_class_path"]
    name = next(
        (
            entry.name
            for entry in DATAMODULE_REGISTRY.entries()
            if f"{entry.obj.__module__}.{entry.obj.__qualname__}" == class_path
        ),
        None,
    )
    arguments = {key: value for key, value in hyperparameters.items() if not key.startswith("_")}
    return TrainingData(name, class_path, arguments)
