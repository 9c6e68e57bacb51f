"""Reading checkpoints safely and rebuilding their models: :func:`load_checkpoint`.

A zoo checkpoint is a Lightning checkpoint whose model is a registered zoo model. It holds only
plain data (tensors, numbers, strings, lists and dicts: the weights, the hyperparameters and
the zoo's record of model name, seed, versions and codec), so it is read with
``torch.load(weights_only=True)``: a file that would need to run code to load (a pickled object
with ``__reduce__``) is refused, not executed. The model is rebuilt through the model registry,
by its registered name, never by importing a class path found in the file.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

from zoo.errors import CheckpointError
from zoo.provenance import RECORD_KEY
from zoo.tasks import ZooTask
from zoo.tasks.rebuild import rebuild_task
from zoo.tasks.registry import MODEL_REGISTRY

__all__ = ["checkpoint_model_name", "load_checkpoint", "read_checkpoint", "task_from_checkpoint", "verify_checkpoint"]


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The contents of a Lightning checkpoint, on the CPU, read with ``weights_only=True``.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        CheckpointError: the file is unreadable (truncated, not a PyTorch file), would run code
            to load, or is not a Lightning checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No checkpoint file at {str(path)!r}.")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        unsafe = [line.strip() for line in str(exc).splitlines() if "GLOBAL" in line]
        if not unsafe:
            raise _unreadable(path, exc) from exc
        raise CheckpointError(
            f"Refusing to load {str(path)!r}: it holds objects that would run code when loaded "
            f"({unsafe[0]}). Zoo checkpoints hold only tensors and plain data; load a file like "
            f"this only if you trust its source, with torch.load(weights_only=False)."
        ) from None
    except Exception as exc:  # truncated zip, a text file, an empty file: torch raises many kinds
        raise _unreadable(path, exc) from exc
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{str(path)!r} is a PyTorch file but not a Lightning checkpoint (it has no 'state_dict')."
        )
    return checkpoint


def _unreadable(path: Path, exc: Exception) -> CheckpointError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
    return CheckpointError(
        f"{str(path)!r} is not a readable checkpoint: it is truncated, damaged or another kind of "
        f"file ({type(exc).__name__}: {detail})."
    )


def checkpoint_model_name(checkpoint: dict[str, Any], path: str | os.PathLike[str]) -> str:
    """The registered model name a checkpoint was saved by.

    Read from the zoo's record, or, for checkpoints without one, matched from the class path
    that LightningCLI stores in the hyperparameters against the registered models.

    Raises:
        CheckpointError: the checkpoint is not from a registered zoo model.
    """
    record = checkpoint.get(RECORD_KEY)
    if isinstance(record, dict) and isinstance(record.get("model"), str):
        return record["model"]
    class_path = (checkpoint.get("hyper_parameters") or {}).get("_class_path")
    for entry in MODEL_REGISTRY.entries():
        if class_path == f"{entry.obj.__module__}.{entry.obj.__qualname__}":
            return entry.name
    saved_by = f" (saved by {class_path})" if class_path else ""
    raise CheckpointError(
        f"{str(path)!r} was not saved by a registered zoo model{saved_by}. "
        f"Registered models: {', '.join(MODEL_REGISTRY.list())}."
    )


def verify_checkpoint(path: str | os.PathLike[str], model: str | None) -> None:
    """Check, before anything runs, that ``path`` is a safe, readable checkpoint of ``model``
    (a registered name; None checks only that the file is a safe, readable checkpoint).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        CheckpointError: the file is unreadable or unsafe, or holds another model.
    """
    checkpoint = read_checkpoint(path)
    if model is None:
        return
    found = checkpoint_model_name(checkpoint, path)
    if found != model:
        raise CheckpointError(
            f"{str(path)!r} holds a {found!r} model, not {model!r}: pass --model {found} "
            f"(predict needs no --model: the checkpoint names its model)."
        )


def load_checkpoint(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> ZooTask:
    """Rebuild a model from a checkpoint alone, ready to predict.

    The registered model is built from the checkpoint's hyperparameters, its weights are loaded
    strictly, and its codec (vocabulary or tokenizer) is restored, so that::

        model = zoo.load_checkpoint("runs/sentiment/version_0/checkpoints/last.ckpt")
        model.predict(["a gripping, beautiful film"])     # [{'text': ..., 'label': 'positive', ...}]

    works without the training data. A plugin model or attention must be installed (or imported)
    as it was for training.

    Args:
        path: A checkpoint written while training a registered zoo model.
        device: Where the returned model lives.

    Returns:
        The task (a LightningModule) in evaluation mode.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        CheckpointError: the file is unreadable, unsafe, not from a zoo model, or its weights do
            not fit the model its hyperparameters describe.
        UnknownNameError: the model (or its attention) is not registered in this process.
    """
    return task_from_checkpoint(read_checkpoint(path), path).to(device).eval()


def task_from_checkpoint(checkpoint: dict[str, Any], path: str | os.PathLike[str]) -> ZooTask:
    """The task of a checkpoint :func:`read_checkpoint` read from ``path`` (named in errors),
    on the CPU, in the mode it is built in: rebuilt from its hyperparameters through the model
    registry, its weights loaded strictly (:func:`~zoo.tasks.rebuild.rebuild_task`, as
    ``from_pretrained`` rebuilds a folder's) and its codec restored.

    Raises:
        CheckpointError: the checkpoint is not from a zoo model, lacks a hyperparameter the model
            needs, or its weights do not fit the model its hyperparameters describe.
        UnknownNameError: the model (or its attention) is not registered in this process.
    """
    where, record = str(path), checkpoint.get(RECORD_KEY)
    model = rebuild_task(
        checkpoint_model_name(checkpoint, path),
        checkpoint.get("hyper_parameters") or {},
        checkpoint["state_dict"],
        saved_format=record.get("format", 1) if isinstance(record, dict) else 1,
        task_class=ZooTask,
        hyperparameters_from=where,
        weights_from=where,
    )
    model.on_load_checkpoint(checkpoint)
    return model
