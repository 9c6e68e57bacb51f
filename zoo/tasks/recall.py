"""Recall and copying as a LightningModule: the training and the metrics of Zoology (Arora,
Eyuboglu et al., 2023) and MAD (Poli et al., 2024) for the sequence model :class:`zoo.models.RecallLM`,
on the generated tasks of :mod:`zoo.datamodules.recall` (``mqar``, ``mad``, ``selective_copying``,
``induction_heads``).

A batch holds ``inputs`` ``x`` ``(B, L)``, ``targets`` ``y`` (-100 where the loss ignores a
position) and ``scored``, the positions ``S`` the benchmark's accuracy counts (``S`` lies within
the labelled positions ``T = {(b, t): y_bt != -100}``). With ``h`` the final hidden states and
``W`` the output projection, training minimises the mean cross-entropy over ``T``:

    loss = -1/|T| sum_{(b,t) in T} log softmax(W h_bt)[y_bt]

and the projection is computed at ``T`` alone (``GPT.forward(..., output_mask=...)``): on MQAR,
16 of 256 positions over 8,192 ids, where a head over every position made the step 8 times
slower. MAD's three recall tasks and H3's induction heads train on every next token, so there
``T`` is every position, as their code trains; MAD's compression trains and scores every
position of an auto-encoder's reconstruction (``backbone="autoencoder"``,
:class:`zoo.models.SequenceAutoEncoder`, which the data module picks). Evaluation computes the
projection at ``S`` alone: the loss over ``S`` (what both references report: their test targets
label ``S`` only) and

* **Zoology's accuracy** (``mqar``, ``selective_copying``, ``induction_heads``): per example, the
  fraction of its scored positions answered, then the mean over examples,
  ``acc = 1/B sum_b 1/|S_b| sum_{t in S_b} [argmax W h_bt = y_bt]`` (Zoology's ``compute_metrics``);
* **MAD's accuracy** (``mad``): torchmetrics' ``MulticlassAccuracy`` over the scored positions
  of a batch with its default ``average="macro"`` (MAD's ``mad/metrics.py`` sets none): the
  mean, over the classes present among the batch's targets or predictions, of each class's
  fraction answered; MAD logs that value per batch with ``on_epoch=True``, so its reported
  accuracy is the mean over batches weighted by their examples, as here.

Logged: ``train/loss``; ``val/loss``, ``val/accuracy`` (the benchmark's), ``val/accuracy_micro``
(the fraction of all scored positions answered) and ``val/accuracy/<set>``, the benchmark's
accuracy per set of the split: ``num_kv_pairs_<P>`` for MQAR (Zoology's slices), ``length_<L>``
otherwise (Mamba's tasks test one set per length), ``length_<L>_depth_<D>`` for RULER's needles (a
set per length and needle depth, in percent); the same under ``test/``.

Training stops once ``val/accuracy`` exceeds ``target_accuracy`` (Zoology: 0.99, MAD: 0.999;
Lightning's ``EarlyStopping`` with ``stopping_threshold``, no patience). The optimiser is
Zoology's and MAD's: AdamW over every parameter (norms, biases and embeddings decayed too) and a
cosine decay of the learning rate; here per step to ``min_lr`` over the run's steps (Zoology
steps it per epoch to 0 over ``max_epochs``, MAD to 1e-6), with an optional linear warm-up.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, EarlyStopping
from torch import Tensor
from torchmetrics.functional.classification import multiclass_accuracy

from zoo.datamodules.recall import AUTOENCODER, BACKBONES, IGNORE_INDEX, LANGUAGE_MODEL, MADDataModule
from zoo.errors import DataError
from zoo.models import RecallLM, SequenceAutoEncoder
from zoo.tasks.base import ZooTask
from zoo.tasks.optim import configure_adamw
from zoo.tasks.registry import register_model

__all__ = ["MAD_TARGET", "ZOOLOGY_TARGET", "RecallModel"]

ZOOLOGY_TARGET = 0.99
"""The validation accuracy past which Zoology stops a run (``early_stopping_threshold``)."""
MAD_TARGET = 0.999
"""The test accuracy past which MAD stops a run (``EarlyStopping(stopping_threshold=0.999)``)."""

FIELDS = ("inputs", "targets", "scored")
"""What every recall batch holds (:mod:`zoo.datamodules.recall.base`)."""


@register_model("recall")
class RecallModel(ZooTask):
    """The sequence model :class:`zoo.models.RecallLM` (a :class:`~zoo.models.GPT` with Zoology's
    defaults: 2 layers, width 64, one head, no MLP, positions by family, dropout 0.1 on the
    embeddings and the attention weights) trained on a recall or copying task with the
    references' loss, metrics, optimiser and early stopping (see :mod:`zoo.tasks.recall`).

    ``configs/recall.yaml`` trains at most 64 epochs (Zoology's) on MQAR's (256, 16) cell by
    default. ``vocab_size``, ``block_size`` and ``backbone`` come from the data module: MAD's
    compression gets MAD's auto-encoder around the same sequence model
    (:class:`zoo.models.SequenceAutoEncoder`), every other task the language model.

    Args:
        vocab_size: Token ids (from the data module).
        block_size: The longest sequence (from the data module).
        lr: Peak AdamW learning rate (Zoology's Figure 2 sweeps 1e-4, 4.6e-4, 2.2e-3, 1e-2; MAD
            1e-4, 5e-4, 1e-3).
        weight_decay: AdamW weight decay of every parameter (Zoology: 0.1; MAD sweeps 0 and 0.1).
        min_lr: The learning rate the cosine decay ends at (Zoology: 0; MAD: 1e-6).
        warmup_steps: Linear warm-up steps (neither reference warms up).
        target_accuracy: Stop once ``val/accuracy`` exceeds it; ``None``: the benchmark's (MAD's
            0.999 on ``mad``, Zoology's 0.99 elsewhere); 1 trains to the end.
        torch_compile: Compile the model with ``torch.compile`` (checkpoints unchanged).
        backbone: ``language_model`` or ``autoencoder`` (from the data module; MAD's ``backbone``).
        model_kwargs: The architecture's hyperparameters (``--model.d_model``,
            ``--model.attention``, ``--model.ffn_hidden`` and so on): defaults in
            :class:`zoo.models.RecallLM`, meanings in :class:`zoo.models.GPT`.
    """

    kind = "recall"
    default_datamodule = "mqar"
    data_links = ("vocab_size", "block_size", "backbone")
    monitor = ("val/accuracy", "max")

    def __init__(
        self,
        vocab_size: int,
        block_size: int = 256,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        min_lr: float = 0.0,
        warmup_steps: int = 0,
        target_accuracy: float | None = None,
        torch_compile: bool = False,
        backbone: str = LANGUAGE_MODEL,
        **model_kwargs: Any,
    ) -> None:
        super().__init__(torch_compile)
        if lr <= 0 or not 0 <= min_lr <= lr:
            raise ValueError(f"The recall model needs 0 < lr and 0 <= min_lr <= lr; got lr={lr}, min_lr={min_lr}.")
        if backbone not in BACKBONES:
            raise ValueError(f"The recall model's backbone is one of {', '.join(BACKBONES)}; got {backbone!r}.")
        if target_accuracy is not None and not 0 < target_accuracy <= 1:
            raise ValueError(f"target_accuracy is an accuracy in (0, 1] (1: never stop early); got {target_accuracy}.")
        self.save_hyperparameters()
        self.save_model_hyperparameters(RecallLM, model_kwargs)
        sequence_model = RecallLM(vocab_size=vocab_size, block_size=block_size, **model_kwargs)
        self.model = SequenceAutoEncoder(sequence_model) if backbone == AUTOENCODER else sequence_model

    def forward(self, inputs: Tensor) -> Tensor:
        """Logits ``(B, L, V)`` at every position of ``inputs`` ``(B, L)``."""
        return self.model(inputs)[0]

    # -- the benchmark, from the data module --------------------------------------------------------

    def _on_mad(self) -> bool:
        """Whether the data are MAD's (its accuracy and target), not Zoology's or Mamba's."""
        trainer = self._trainer
        return trainer is not None and isinstance(trainer.datamodule, MADDataModule)

    def configure_callbacks(self) -> list[Callback]:
        """Stop once ``val/accuracy`` exceeds the target, checked after each validation (as Zoology
        checks after each epoch's); no patience, so only the threshold stops a run, and a run
        that validates nothing is not stopped."""
        target = self.hparams.target_accuracy
        if target is None:
            target = MAD_TARGET if self._on_mad() else ZOOLOGY_TARGET
        stop = EarlyStopping(
            monitor="val/accuracy", mode="max", stopping_threshold=target, patience=sys.maxsize, strict=False,
            check_on_train_epoch_end=False,
        )  # fmt: skip
        return [stop]

    # -- steps ----------------------------------------------------------------------------------------

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        inputs, targets, _ = _fields(batch)
        labelled = targets != IGNORE_INDEX
        logits, _ = self.model(inputs, output_mask=labelled)
        loss = F.cross_entropy(logits.float(), targets[labelled])
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def _evaluate(self, batch: Mapping[str, Tensor], stage: str) -> None:
        inputs, targets, scored = _fields(batch)
        logits, _ = self.model(inputs, output_mask=scored)
        answers = targets[scored]
        loss = F.cross_entropy(logits.float(), answers)
        predicted = logits.argmax(-1)
        correct = (predicted == answers).float()
        if self._on_mad():
            accuracy = multiclass_accuracy(predicted, answers, num_classes=self.hparams.vocab_size, average="macro")
            weight = inputs.shape[0]
        else:
            accuracy, weight = per_example_accuracy(correct, scored)
        self.log(f"{stage}/loss", loss, batch_size=answers.numel(), prog_bar=True, sync_dist=True)
        self.log(f"{stage}/accuracy", accuracy, batch_size=weight, prog_bar=True, sync_dist=True)
        self.log(f"{stage}/accuracy_micro", correct.mean(), batch_size=answers.numel(), sync_dist=True)
        self.log(f"{stage}/accuracy/{_set_name(batch)}", accuracy, batch_size=weight, sync_dist=True)

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse, in one line, weights built for shorter sequences than the data linked into this
        model (a learned position table of fewer rows: a checkpoint tested at longer lengths)."""
        super().on_load_checkpoint(checkpoint)
        built = checkpoint.get("hyper_parameters", {}).get("block_size", self.hparams.block_size)
        own = self.state_dict()
        resized = [
            name
            for name, weight in checkpoint.get("state_dict", {}).items()
            if name in own and own[name].shape != weight.shape
        ]
        if built < self.hparams.block_size and resized:
            raise DataError(
                f"The checkpoint's model reaches {built} positions ({resized[0]}) but the data go to "
                f"{self.hparams.block_size} tokens; test at lengths up to {built}, or train on data that reach the longest."
            )

    def configure_optimizers(self) -> dict[str, Any]:
        return configure_adamw(self, betas=(0.9, 0.999), decay_all=True)  # torch's betas, as Zoology and MAD train


def per_example_accuracy(correct: Tensor, scored: Tensor) -> tuple[Tensor, int]:
    """Zoology's accuracy of a batch and the examples it averages: per example, the fraction of its
    scored positions answered, then the mean over the examples that have any.

    Args:
        correct: ``(N,)`` 1 where the answer at a scored position is right, in the row-major order
            of ``scored.nonzero()``.
        scored: ``(B, L)`` booleans, the scored positions.
    """
    counts = scored.sum(1)
    right = torch.zeros(scored.shape[0], device=correct.device).index_add_(0, scored.nonzero()[:, 0], correct)
    present = counts > 0
    return (right[present] / counts[present]).mean(), int(present.sum())


def _set_name(batch: Mapping[str, Tensor]) -> str:
    """The name of the set a batch comes from: its MQAR pairs (Zoology's slices), else its length,
    and with a ``depth`` (the needle tasks' percent) the depth too (``length_1024_depth_50``)."""
    if "num_kv_pairs" in batch:
        return f"num_kv_pairs_{int(batch['num_kv_pairs'][0])}"
    name = f"length_{batch['inputs'].shape[1]}"
    return f"{name}_depth_{int(batch['depth'][0])}" if "depth" in batch else name


def _fields(batch: Any) -> tuple[Tensor, Tensor, Tensor]:
    """``inputs``, ``targets`` and ``scored`` of a recall batch; other data refused in one line."""
    missing = [name for name in FIELDS if not isinstance(batch, Mapping) or name not in batch]
    if missing:
        raise DataError(
            f"The recall model reads batches of {', '.join(FIELDS)} (the data modules of zoo.datamodules.recall: "
            f"python -m zoo list lists them); these batches lack {', '.join(missing)}: choose one with --data."
        )
    return batch["inputs"], batch["targets"], batch["scored"]
