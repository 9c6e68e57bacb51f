"""Kernel regression as a LightningModule: leave-one-out training, MSE, fit and heatmap figures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torchmetrics
from torch import Tensor

from zoo.distributed import gather_objects
from zoo.errors import ConfigurationError, DataError
from zoo.models import KernelRegression
from zoo.tasks.base import ZooTask
from zoo.tasks.figures import attention_heatmaps, publish_figure, regression_plot
from zoo.tasks.registry import register_model

__all__ = ["NadarayaWatson"]


@register_model("nadaraya_watson", aliases=("kernel_regression",))
class NadarayaWatson(ZooTask):
    """Nadaraya-Watson kernel regression trained leave-one-out (each training point attends
    to all the others), as in the reference notes.

    The three kernels of the notes: ``--model.attention average`` (average pooling),
    ``--model.learnable false`` (fixed Gaussian kernel: non-parametric, nothing to train) and
    the default, a Gaussian kernel with a learned bandwidth.

    Args:
        lr: SGD learning rate (on the mean squared error).
        torch_compile: Compile the model with ``torch.compile`` (checkpoints unchanged).
        model_kwargs: The architecture's hyperparameters (``--model.attention``,
            ``--model.attention_kwargs``, ``--model.learnable``), each documented, with its
            default, in :class:`zoo.models.KernelRegression`.
    """

    default_datamodule = "synthetic_regression"
    monitor = ("val/mse", "min")
    kind = "regression"

    def __init__(self, lr: float = 5.0, torch_compile: bool = False, **model_kwargs: Any) -> None:
        super().__init__(torch_compile)
        self.save_hyperparameters()
        self.save_model_hyperparameters(KernelRegression, model_kwargs)
        self.model = KernelRegression(**model_kwargs)
        self.lr = lr
        self.metrics = torch.nn.ModuleDict(
            {stage: torchmetrics.MeanSquaredError() for stage in ("val", "test")}
            | {f"{stage}_truth": torchmetrics.MeanSquaredError() for stage in ("val", "test")}
        )
        self._figure_points: list[tuple[Tensor, ...]] = []  # (inputs, predictions, truth, weights) per batch

    def setup(self, stage: str) -> None:
        """Remember the training points: always when fitting, else only if no checkpoint did.

        Every process remembers all of them (each training point attends to all the others);
        under DDP the processes share out the training *queries*, and the index each carries
        keeps leave-one-out exact.
        """
        super().setup(stage)
        if stage == "fit" and self.trainer.world_size > 1 and not any(p.requires_grad for p in self.parameters()):
            raise ConfigurationError(
                f"nadaraya_watson with attention {self.hparams.attention!r} and learnable={self.hparams.learnable} "
                f"has no parameter to train, so there is nothing for {self.trainer.world_size} processes to share: "
                f"fit it with --trainer.devices 1 (validate and test do run on several processes)."
            )
        datamodule = getattr(self.trainer, "datamodule", None)
        if hasattr(datamodule, "train_tensors") and (stage == "fit" or self.model.memory_size == 0):
            inputs, targets = datamodule.train_tensors()
            self.model.remember(inputs.to(self.device), targets.to(self.device))

    def forward(self, inputs: Tensor) -> Tensor:
        return self.model(inputs).output

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor | None:
        predictions = self.model(batch["inputs"], exclude=batch["index"]).output
        loss = torch.nn.functional.mse_loss(predictions, batch["targets"])
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        # Fixed kernels have nothing to learn: skip the backward pass instead of failing.
        return loss if any(p.requires_grad for p in self.parameters()) else None

    def _draws_figures(self, stage: str) -> bool:
        """Figures after testing and after the last validation of a fit (the same on every process)."""
        trainer = self.trainer
        return stage == "test" or (not trainer.sanity_checking and self.current_epoch == trainer.max_epochs - 1)

    def _evaluate(self, batch: dict[str, Tensor], stage: str) -> None:
        predictions, weights = self.model(batch["inputs"], need_weights=True)
        self.metrics[stage].update(predictions, batch["targets"])
        self.metrics[f"{stage}_truth"].update(predictions, batch["truth"])
        self.log(f"{stage}/mse", self.metrics[stage], prog_bar=True)
        self.log(f"{stage}/mse_truth", self.metrics[f"{stage}_truth"])
        if self._draws_figures(stage):
            points = (batch["inputs"], predictions, batch["truth"], weights)
            self._figure_points.append(tuple(t.detach().cpu() for t in points))

    def _figures(self, stage: str) -> None:
        """The fit against the truth and the weights of each query over the training inputs.

        Drawn from every batch of every process (gathered here, so every process must call
        this), sorted by input; global zero publishes.
        """
        gathered = [part for parts in gather_objects(self._figure_points) for part in parts]
        self._figure_points = []
        if not self.trainer.is_global_zero or not gathered:
            return
        inputs, predictions, truth, weights = (torch.cat(column) for column in zip(*gathered))
        order = inputs.argsort()
        inputs, predictions, truth, weights = inputs[order], predictions[order], truth[order], weights[order]
        model = self.model
        publish_figure(
            self, regression_plot(inputs, predictions, truth, model.memory_inputs, model.memory_targets), f"{stage}_fit"
        )
        heatmap = attention_heatmaps(
            weights,
            x_title="Sorted training inputs",
            y_title=f"Sorted {stage} inputs",
            titles=[model.attention.__class__.__name__],
        )
        publish_figure(self, heatmap, f"{stage}_attention")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_validation_epoch_end(self) -> None:
        if self._draws_figures("val"):
            self._figures("val")

    def on_test_epoch_end(self) -> None:
        self._figures("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> list[dict[str, float]]:
        predictions = self.model(batch["inputs"]).output
        return [{"input": float(x), "prediction": float(y)} for x, y in zip(batch["inputs"], predictions)]

    def predict(self, inputs: Sequence[float | str] | Tensor) -> list[dict[str, float]]:
        """Predict ``y`` at raw inputs ``x`` (numbers, or text that reads as numbers) from the
        remembered training points: ``[{"input", "prediction"}, ...]``."""
        try:
            x = torch.as_tensor([float(value) for value in inputs], dtype=torch.float32, device=self.device)
        except (TypeError, ValueError) as exc:
            raise DataError(f"Kernel regression predicts at numbers; got {list(inputs)[:5]!r} ({exc}).") from exc
        with self.inference():
            predictions = self(x)
        return [{"input": float(a), "prediction": float(b)} for a, b in zip(x, predictions)]

    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.SGD(params, lr=self.lr) if params else None
