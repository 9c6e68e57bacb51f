"""``model.safetensors`` of an exported folder: the weights alone, read without unpickling.

``safetensors`` stores named tensors and nothing else, so reading a stranger's file runs no code.
:func:`safetensors.torch.save_model` writes a tensor that several parameters share (tied
embeddings) once. Reading gives the tensors by name; :func:`zoo.tasks.rebuild.rebuild_task` loads
them into the model strictly, as it loads a checkpoint's (a tensor held once loads into every
parameter tied to it).
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub.constants import SAFETENSORS_SINGLE_FILE
from safetensors import SafetensorError
from safetensors.torch import load_file, save_model
from torch import Tensor, nn

from zoo.errors import CheckpointError

__all__ = ["WEIGHTS_NAME", "read_weights", "save_weights"]

WEIGHTS_NAME = SAFETENSORS_SINGLE_FILE


def save_weights(module: nn.Module, folder: Path) -> None:
    """Write ``module``'s state dict to ``folder/model.safetensors`` (PyTorch layout, as the Hub marks it)."""
    save_model(module, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})


def read_weights(folder: Path) -> dict[str, Tensor]:
    """The tensors of ``folder/model.safetensors``, by name, on the CPU.

    Raises:
        CheckpointError: the file is missing or unreadable.
    """
    path = folder / WEIGHTS_NAME
    if not path.is_file():
        raise CheckpointError(f"{folder} has no {WEIGHTS_NAME}: the weights are not there.")
    try:
        return load_file(path)
    except SafetensorError as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc}).") from exc
