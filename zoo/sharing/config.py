"""``config.json`` of an exported folder: which registered model it is, and every hyperparameter.

The hyperparameters sit at the top level, one key per constructor argument of the task (the
architecture's included), each as JSON exactly as the checkpoint holds it: a hybrid stack's
per-layer ``attention`` list stays a list of names and ``{name: ..., ...}`` objects. That is the
layout of huggingface_hub's ``ModelHubMixin``, whose ``from_pretrained`` passes the keys on as
keyword arguments. The zoo's own fields sit under one key, ``"zoo"``: the registered model name
(the model is rebuilt through the model registry by that name; nothing is imported from the
file), its task, its architecture's class (for readers), the codec's kind, the folder format
and the zoo version that wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub.constants import CONFIG_NAME

from zoo.errors import CheckpointError
from zoo.version import __version__

__all__ = ["CONFIG_NAME", "FOLDER_FORMAT", "ZOO_KEY", "ModelConfig"]

#: The key of the zoo's own fields in ``config.json``.
ZOO_KEY = "zoo"
#: Bump when the folder's layout, or its weights' layout, changes; a folder of a newer format is
#: refused, not misread (2: the recurrent families are attention layers; format 1 migrates through
#: :mod:`zoo.attention.compat.legacy`).
FOLDER_FORMAT = 2


@dataclass(frozen=True)
class ModelConfig:
    """What ``config.json`` holds.

    Attributes:
        model: The registered model name that rebuilds it (``sentiment``, ``transformer``).
        task: What the model does (``regression``, ``classification``, ``translation``,
            ``language_model``), or None for a task that does not say.
        architecture: The class path of the architecture (``zoo.models.transformer.Transformer``).
        codec: The kind of the codec in ``codec.json``, or None for a model that reads no text.
        hyperparameters: Every constructor argument of the task, by name.
        format: The folder format.
        version: The version of the zoo that wrote the folder (None where it is not recorded).
    """

    model: str
    task: str | None
    architecture: str
    codec: str | None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    format: int = FOLDER_FORMAT
    version: str | None = __version__

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``config.json``.

        Raises:
            CheckpointError: a hyperparameter is not plain JSON data (nor is the model then
                plain data in its checkpoint).
        """
        for name, value in self.hyperparameters.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise CheckpointError(
                    f"Hyperparameter {name!r} ({type(value).__name__}) cannot be written to {CONFIG_NAME}: {exc}."
                ) from exc
        if ZOO_KEY in self.hyperparameters:
            raise CheckpointError(f"A hyperparameter named {ZOO_KEY!r} would hide the zoo's fields in {CONFIG_NAME}.")
        fields = {
            "format": self.format,
            "model": self.model,
            "task": self.task,
            "architecture": self.architecture,
            "codec": self.codec,
            "version": self.version,
        }
        return {ZOO_KEY: fields, **self.hyperparameters}

    def write(self, folder: Path) -> None:
        """Write ``folder/config.json``."""
        (folder / CONFIG_NAME).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: Any, where: str) -> ModelConfig:
        """Read what :meth:`to_json` wrote; ``where`` names the file in errors.

        Raises:
            CheckpointError: not a JSON object, no ``"zoo"`` fields, a newer format, or a field
                the model needs missing or of the wrong type.
        """
        if not isinstance(data, Mapping):
            raise CheckpointError(f"{where} is not a JSON object.")
        fields = data.get(ZOO_KEY)
        if not isinstance(fields, Mapping):
            raise CheckpointError(
                f"{where} has no {ZOO_KEY!r} fields: it was not written by the zoo (python -m zoo export, or a "
                f"zoo model's save_pretrained)."
            )
        folder_format = fields.get("format")
        if not isinstance(folder_format, int) or folder_format > FOLDER_FORMAT:
            raise CheckpointError(
                f"{where} is in folder format {folder_format!r}, which this zoo ({__version__}, format "
                f"{FOLDER_FORMAT}) does not read: upgrade attention-zoo."
            )
        expected = {"model": (str,), "task": (str, type(None)), "architecture": (str,), "codec": (str, type(None))}
        for name, types in expected.items():
            if name not in fields or not isinstance(fields[name], types):
                kinds = " or ".join("null" if t is type(None) else t.__name__ for t in types)
                raise CheckpointError(f"{where} lacks {ZOO_KEY}.{name} ({kinds}), which loading the model needs.")
        return cls(
            model=fields["model"],
            task=fields["task"],
            architecture=fields["architecture"],
            codec=fields["codec"],
            hyperparameters={k: v for k, v in data.items() if k != ZOO_KEY},
            format=folder_format,
            version=fields["version"] if isinstance(fields.get("version"), str) else None,
        )
