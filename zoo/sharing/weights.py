"""``model.safetensors`` of an exported folder: the weights alone, read without unpickling.

``safetensors`` stores named tensors and nothing else, so reading a stranger's file runs no code.
:func:`safetensors.torch.save_model` writes a tensor that several parameters share (tied
embeddings) once, and :func:`~safetensors.torch.load_model` ties it back. Loading is strict: a
tensor the model lacks, one the file lacks, or one of another shape is a
:class:`~zoo.errors.CheckpointError` of one line naming it.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub.constants import SAFETENSORS_SINGLE_FILE
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from zoo.errors import CheckpointError

__all__ = ["WEIGHTS_NAME", "load_weights", "save_weights"]

WEIGHTS_NAME = SAFETENSORS_SINGLE_FILE
#: How many tensor names an error lists before it counts the rest.
_SHOWN = 5


def save_weights(module: nn.Module, folder: Path) -> None:
    """Write ``module``'s state dict to ``folder/model.safetensors`` (PyTorch layout, as the Hub marks it)."""
    save_model(module, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})


def load_weights(module: nn.Module, folder: Path, model: str) -> None:
    """Load ``folder/model.safetensors`` into ``module`` (the registered ``model``, named in errors).

    Raises:
        CheckpointError: the file is missing or unreadable, or its tensors are not exactly the
            module's (one missing, unexpected or of another shape).
    """
    path = folder / WEIGHTS_NAME
    if not path.is_file():
        raise CheckpointError(f"{folder} has no {WEIGHTS_NAME}: the weights are not there.")
    fit = f"{path} does not fit the {model!r} model its config.json describes"
    try:
        missing, unexpected = load_model(module, str(path), strict=False)
    except SafetensorError as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc}).") from exc
    except RuntimeError as exc:  # shapes: load_state_dict reports every mismatch on lines of its own
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise CheckpointError(f"{fit}: {' '.join(lines[1:3]) or lines[0]}") from exc
    problems = [
        f"{label} {_names(names)}" for label, names in (("missing", missing), ("unexpected", unexpected)) if names
    ]
    if problems:
        raise CheckpointError(f"{fit}: {'; '.join(problems)}.")


def _names(names: list[str] | set[str]) -> str:
    """``tensor a`` / ``tensors a, b, c and 4 more``, sorted."""
    ordered = sorted(names)
    shown = ", ".join(ordered[:_SHOWN]) + (f" and {len(ordered) - _SHOWN} more" if len(ordered) > _SHOWN else "")
    return f"tensor{'s' if len(ordered) > 1 else ''} {shown}"
