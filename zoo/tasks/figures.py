"""Figures the tasks produce: attention heatmaps and the regression fit.

Each figure is saved as a PNG in the run directory and logged to the trainer's loggers that
take images (TensorBoard, Weights & Biases). Only the global-zero process writes, and nothing
here communicates with other processes, so a task may call these from global zero alone.

Figures are built as :class:`matplotlib.figure.Figure` objects, not through ``pyplot``: they need
no display and no backend, so importing this (``zoo.load_checkpoint`` does) leaves a notebook's
plotting backend as it was, and no figure stays open in ``pyplot``'s list.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import lightning as L
from matplotlib.figure import Figure
from torch import Tensor

from zoo.distributed import run_directory

__all__ = ["attention_heatmaps", "publish_figure", "regression_plot"]


def attention_heatmaps(
    weights: Tensor,
    *,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    x_title: str = "Keys",
    y_title: str = "Queries",
    titles: Sequence[str] | None = None,
) -> Figure:
    """One heatmap per ``(Lq, Lk)`` slice of ``weights`` (``(H, Lq, Lk)`` or ``(Lq, Lk)``)."""
    weights = weights.detach().float().cpu()
    if weights.dim() == 2:
        weights = weights.unsqueeze(0)
    count = weights.shape[0]
    cols = min(count, 4)
    rows = math.ceil(count / cols)
    size = min(8.0, max(2.5, 0.2 * max(weights.shape[1:])))
    fig = Figure(figsize=(size * cols + 1, size * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= count:
            ax.axis("off")
            continue
        image = ax.imshow(weights[i].numpy(), cmap="Reds", vmin=0.0, aspect="auto")
        ax.set_title(titles[i] if titles else f"head {i}", fontsize=9)
        ax.set_xlabel(x_title)
        ax.set_ylabel(y_title)
        for labels, set_ticks, set_labels, rotation in (
            (x_labels, ax.set_xticks, ax.set_xticklabels, 90),
            (y_labels, ax.set_yticks, ax.set_yticklabels, 0),
        ):
            if labels is not None:
                set_ticks(range(len(labels)))
                set_labels(labels, fontsize=7, rotation=rotation)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
    return fig


def regression_plot(
    inputs: Tensor, predictions: Tensor, truth: Tensor, train_inputs: Tensor, train_targets: Tensor
) -> Figure:
    """Truth and prediction curves over the query inputs, with the training points.

    Tensors go to float32 first: under ``bf16-mixed`` the predictions are bfloat16, which NumPy
    (and so matplotlib) cannot hold."""
    inputs, predictions, truth, train_inputs, train_targets = (
        t.detach().float().cpu() for t in (inputs, predictions, truth, train_inputs, train_targets)
    )
    fig = Figure(figsize=(5, 3.5))
    ax = fig.subplots()
    ax.plot(inputs, truth, label="Truth")
    ax.plot(inputs, predictions, "--", label="Pred")
    ax.plot(train_inputs, train_targets, "o", alpha=0.5, label="Training points")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend()
    fig.tight_layout()
    return fig


def publish_figure(module: L.LightningModule, figure: Figure, name: str) -> Path | None:
    """Save ``figure`` as ``<run dir>/images/<name>.png`` and log it.

    Returns the PNG path on the global-zero process, None elsewhere (and without a trainer).
    """
    path = None
    try:
        trainer = module.trainer
    except RuntimeError:  # not attached to a trainer
        trainer = None
    if trainer is not None and trainer.is_global_zero:
        path = run_directory(trainer) / "images" / f"{name}.png"  # not trainer.log_dir: it is a collective
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "add_figure"):  # TensorBoard
                experiment.add_figure(name, figure, global_step=trainer.global_step, close=False)
            elif hasattr(logger, "log_image"):  # Weights & Biases
                logger.log_image(key=name, images=[str(path)], step=trainer.global_step)
    return path
