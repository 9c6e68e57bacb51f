"""The few lines a run ends with: its metrics, its directory, its best checkpoint and its plots;
and, beside the model summary a fit starts with, which attention each layer holds.

Lightning's own output (progress bars, the metrics table) scrolls past; these lines say what
happened and where it is, and ``run directory:`` is what scripts read to find a run's files
(never the newest directory, which may be another run's).
"""

from __future__ import annotations

import re
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from zoo.attention.build.backends import backend_of
from zoo.attention.build.factory import ATTENTION_REGISTRY
from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.layer import AttentionLayer
from zoo.distributed import run_directory

__all__ = ["RUN_DIRECTORY_LABEL", "attention_by_layer", "run_summary"]

#: The label of the line that names the run directory (``run directory: runs/<model>/version_N``).
RUN_DIRECTORY_LABEL = "run directory:"


def _relative(path: str | Path) -> str:
    """``path`` relative to the working directory where it lies below it, else as given."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_summary(trainer: L.Trainer, subcommand: str) -> list[str]:
    """The closing lines of ``subcommand`` (``fit``, ``validate``, ``test``) for ``trainer``'s run.

    The last test and validation metrics, the run directory, after ``fit`` the best checkpoint
    with its monitored metric, and the PNGs under ``images/``.
    """
    metrics = {
        name: float(value) for name, value in trainer.callback_metrics.items() if name.startswith(("val/", "test/"))
    }
    shown = [
        f"{name} {value:.4g}"
        for name, value in sorted(metrics.items(), key=lambda item: (not item[0].startswith("test/"), item[0]))
    ]
    lines = [f"zoo {subcommand}: " + (", ".join(shown) if shown else "no metrics logged")]
    directory = run_directory(trainer)
    lines.append(f"{RUN_DIRECTORY_LABEL} {_relative(directory)}")
    checkpoint = trainer.checkpoint_callback
    if subcommand == "fit" and isinstance(checkpoint, ModelCheckpoint) and checkpoint.best_model_path:
        score = (
            ""
            if checkpoint.best_model_score is None
            else f" ({checkpoint.monitor} {float(checkpoint.best_model_score):.4g})"
        )
        lines.append(f"best checkpoint: {_relative(checkpoint.best_model_path)}{score}")
    plots = sorted((directory / "images").glob("*.png"))
    if plots:
        lines.append("plots: " + ", ".join(_relative(path) for path in plots))
    return lines


def attention_by_layer(
    model: nn.Module, device: torch.device | None = None, dtype: torch.dtype = torch.float32
) -> list[str]:
    """One line per stack of attention layers: what each layer's heads run (or, for a layer of its
    own such as a recurrent family, its registered name), in order; given the ``device`` and
    ``dtype`` a run trains on, each layer whose kernels are a fused backend's says which
    (``local [flex]``, ``gla [fla]``; :func:`zoo.attention.build.backends.backend_of`).

    ``model.blocks.0.attention`` and ``model.blocks.1.attention`` form the stack
    ``blocks.attention``; a hybrid stack reads ``blocks.attention: local, dot_product, local,
    dot_product``, a uniform one ``blocks.attention: dot_product (all 4)``.
    """
    stacks: dict[str, list[str]] = {}
    for name, module in model.named_modules():
        if isinstance(getattr(module, "spec", None), AttentionSpec):  # a headed layer, or one built by name
            described = module.spec.describe()  # the name and the arguments the layer was built with
        elif isinstance(module, AttentionLayer) and module.stack_layer:  # a layer built by hand
            described = ATTENTION_REGISTRY.name_of(type(module)) or type(module).__name__
        else:
            continue
        if device is not None and (backend := backend_of(module, device, dtype)) != "zoo":
            described += f" [{backend}]"
        stack = re.sub(r"\.\d+(?=\.|$)", "", name).removeprefix("model.")
        stacks.setdefault(stack, []).append(described)
    lines = []
    for stack, specs in stacks.items():
        shown = f"{specs[0]} (all {len(specs)})" if len(specs) > 1 and len(set(specs)) == 1 else ", ".join(specs)
        lines.append(f"{stack}: {shown}")
    return lines
