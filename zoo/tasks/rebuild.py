"""A task rebuilt from what was stored of it: a registered model name, its hyperparameters and
its weights, as a checkpoint (:func:`zoo.load_checkpoint`) and a Hugging Face folder
(``from_pretrained``, :mod:`zoo.tasks.hub`) both hold them.

:func:`rebuild_task` is the one path from those plain dicts to a task, so that both kinds of
file are checked alike and refused with the same one-line :class:`~zoo.errors.CheckpointError`,
and so that a change in how stored hyperparameters or weights are read is made once. It imports
no task class: the hub mixin, which every task inherits, calls it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, TypeVar

from torch import Tensor, nn

from zoo.attention.compat.legacy import migrate_attention
from zoo.errors import CheckpointError
from zoo.tasks.registry import MODEL_REGISTRY

__all__ = ["rebuild_task"]

Task = TypeVar("Task")

#: How many tensor names an error lists before it counts the rest.
_SHOWN = 5


def rebuild_task(
    model: str,
    hyperparameters: Mapping[str, Any],
    state_dict: Mapping[str, Tensor],
    *,
    saved_format: int,
    task_class: type[Task],
    hyperparameters_from: str,
    weights_from: str,
) -> Task:
    """The registered ``model`` built from ``hyperparameters`` through the model registry, on
    the CPU and in training mode, with ``state_dict`` loaded into it strictly.

    Keys of ``hyperparameters`` that start with ``_`` are Lightning's records (the class path
    LightningCLI stores), not arguments, and are left out. Loading is strict, except that a
    tensor the state dict lacks is not missing when it shares its storage with one the state
    dict holds (tied weights, which a safetensors file holds once).

    Args:
        model: The registered model name.
        hyperparameters: The constructor's arguments.
        state_dict: The weights, by name.
        saved_format: The format of the checkpoint record or folder they were read from: the
            hyperparameters of an older one are migrated first (:mod:`zoo.attention.compat.legacy`).
        task_class: What the model must be (a subclass of it is).
        hyperparameters_from: The file the hyperparameters were read from, named in errors.
        weights_from: The file the weights were read from, named in errors.

    Raises:
        CheckpointError: ``model`` is not a ``task_class``, a constructor argument without a
            default is not in ``hyperparameters``, or the weights do not fit (a tensor missing,
            unexpected or of another shape); one line naming the file.
        UnknownNameError: ``model`` (or its attention) is not registered in this process.
    """
    registered = MODEL_REGISTRY.get(model)
    if not issubclass(registered, task_class):
        raise CheckpointError(f"{hyperparameters_from} holds a {model!r} model, not a {task_class.__name__}.")
    arguments = {key: value for key, value in hyperparameters.items() if not key.startswith("_")}
    arguments = migrate_attention(arguments, saved_format)
    missing = [name for name in _required_arguments(registered) if name not in arguments]
    if missing:
        raise CheckpointError(
            f"{hyperparameters_from} lacks {', '.join(repr(name) for name in missing)}, which the {model!r} model needs."
        )
    task = MODEL_REGISTRY.create(model, **arguments)
    _load_strictly(
        task, state_dict, f"The weights in {weights_from} do not fit the {model!r} model its hyperparameters describe"
    )
    return task


def _required_arguments(task_class: type) -> list[str]:
    """The constructor arguments of ``task_class`` without a default (``vocab_size``)."""
    parameters = inspect.signature(
        task_class.__init__
    ).parameters.values()  # __init__: the hub mixin's __new__ takes *args
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.name != "self" and p.kind in keyword and p.default is p.empty]


def _load_strictly(module: nn.Module, state_dict: Mapping[str, Tensor], fit: str) -> None:
    """Load ``state_dict`` into ``module``, or raise a CheckpointError of one line beginning with ``fit``."""
    try:
        missing, unexpected = module.load_state_dict(dict(state_dict), strict=False)
    except RuntimeError as exc:  # shapes: load_state_dict reports every mismatch on a line of its own
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise CheckpointError(f"{fit}: {' '.join(lines[1:3]) or lines[0]}") from exc
    tensors = module.state_dict()
    held = {_storage(tensors[name]) for name in state_dict if name in tensors} - {0}
    missing = [name for name in missing if _storage(tensors[name]) not in held]
    problems = [
        f"{label} {_names(names)}" for label, names in (("missing", missing), ("unexpected", unexpected)) if names
    ]
    if problems:
        raise CheckpointError(f"{fit}: {'; '.join(problems)}.")


def _storage(tensor: Tensor) -> int:
    """Where ``tensor``'s storage begins: tensors that share it are one (0 for an empty one)."""
    return tensor.untyped_storage().data_ptr()


def _names(names: list[str]) -> str:
    """``tensor a`` / ``tensors a, b, c and 4 more``, sorted."""
    ordered = sorted(names)
    shown = ", ".join(ordered[:_SHOWN]) + (f" and {len(ordered) - _SHOWN} more" if len(ordered) > _SHOWN else "")
    return f"tensor{'s' if len(ordered) > 1 else ''} {shown}"
