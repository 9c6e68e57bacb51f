"""Sequence classification as a LightningModule: cross-entropy, accuracy and F1, attention heatmaps.

``classifier`` is the general model (any data module that yields labelled token sequences:
``listops``, ``lra_text``, ``sst2``, ``imdb``); ``sentiment`` is the same model in its sentiment
configuration (SST-2 by default, ``configs/sentiment*.yaml``), kept as its own registered name so
its runs, configs and checkpoints keep theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torchmetrics
from torch import Tensor

from zoo.datamodules.listops import ListOpsCodec
from zoo.models import SequenceClassifier
from zoo.tasks.base import ZooTask
from zoo.tasks.figures import attention_heatmaps, publish_figure
from zoo.tasks.optim import configure_adamw
from zoo.tasks.registry import register_model
from zoo.text.bytes import ByteCodec
from zoo.text.codecs import TextClassificationCodec

__all__ = ["Classifier", "Sentiment"]

#: How heatmaps label the classification token (``pooling="cls"``).
CLS_LABEL = "[CLS]"


@register_model("classifier", aliases=("sequence_classifier",))
class Classifier(ZooTask):
    """Self-attention sequence classifier (see :class:`zoo.models.SequenceClassifier`).

    It has no data of its own: name one (``--data listops``) or a config that does
    (``configs/classifier_listops.yaml``). ``vocab_size``, ``padding_idx`` and ``num_classes``
    come from the data module.

    Args:
        vocab_size: Vocabulary size (from the data module).
        num_classes: Number of labels (from the data module).
        padding_idx: Token id of padding (from the data module).
        lr: Peak AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: Linear warm-up steps before cosine decay.
        label_smoothing: Cross-entropy label smoothing.
        heatmap_examples: Validation examples whose attention is drawn after each validation.
        torch_compile: Compile the model with ``torch.compile`` (checkpoints unchanged).
        model_kwargs: The architecture's hyperparameters (``--model.d_model``,
            ``--model.attention``, ``--model.pooling`` and so on), each documented, with its
            default, in :class:`zoo.models.SequenceClassifier`.
    """

    data_links = ("vocab_size", "padding_idx", "num_classes")
    monitor = ("val/acc", "max")
    kind = "classification"
    codecs = (TextClassificationCodec, ByteCodec, ListOpsCodec)

    def __init__(
        self,
        vocab_size: int,
        num_classes: int = 2,
        padding_idx: int = 0,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 200,
        label_smoothing: float = 0.0,
        heatmap_examples: int = 2,
        torch_compile: bool = False,
        **model_kwargs: Any,
    ) -> None:
        super().__init__(torch_compile)
        self.save_hyperparameters()
        self.save_model_hyperparameters(SequenceClassifier, model_kwargs)
        self.model = SequenceClassifier(
            vocab_size=vocab_size, num_classes=num_classes, padding_idx=padding_idx, **model_kwargs
        )
        self.metrics = torch.nn.ModuleDict()
        for stage in ("val", "test"):
            self.metrics[f"{stage}_acc"] = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
            self.metrics[f"{stage}_f1"] = torchmetrics.F1Score(
                task="multiclass", num_classes=num_classes, average="macro"
            )
            self.metrics[f"{stage}_loss"] = torchmetrics.MeanMetric()
        self._heatmap_batch: dict[str, Tensor] | None = None

    def forward(self, tokens: Tensor, valid_lens: Tensor) -> Tensor:
        return self.model(tokens, valid_lens)[0]

    def _loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return torch.nn.functional.cross_entropy(logits, labels, label_smoothing=self.hparams.label_smoothing)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        loss = self._loss(self(batch["tokens"], batch["valid_lens"]), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)  # the mean over every process's batch
        return loss

    def _evaluate(self, batch: dict[str, Any], stage: str) -> None:
        logits = self(batch["tokens"], batch["valid_lens"])
        labels = batch["labels"]
        self.metrics[f"{stage}_loss"].update(self._loss(logits, labels), weight=labels.numel())
        self.metrics[f"{stage}_acc"].update(logits, labels)
        self.metrics[f"{stage}_f1"].update(logits, labels)
        for name in ("loss", "acc", "f1"):
            self.log(f"{stage}/{name}", self.metrics[f"{stage}_{name}"], prog_bar=name == "acc")

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        if batch_idx == 0 and self._heatmap_batch is None:
            count = self.hparams.heatmap_examples
            self._heatmap_batch = {k: batch[k][:count] for k in ("tokens", "valid_lens")}
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_validation_epoch_end(self) -> None:
        """Draw every head of the last block for a fixed few validation examples (global zero only;
        nothing here communicates, so the other processes may skip it)."""
        if self.trainer.sanity_checking or self._heatmap_batch is None or not self.hparams.heatmap_examples:
            return
        if not self.trainer.is_global_zero:
            return
        tokens, valid_lens = self._heatmap_batch["tokens"], self._heatmap_batch["valid_lens"]
        with self.inference():
            _, weights = self.model(tokens, valid_lens, need_weights=True)
        prefix = [CLS_LABEL] * self.model.num_prefix_tokens
        for i in range(tokens.shape[0]):
            ids = tokens[i, : int(valid_lens[i])].tolist()
            labels = prefix + (self.codec.id_to_token(ids) if self.codec is not None else [str(t) for t in ids])
            size = len(labels)
            figure = attention_heatmaps(weights[-1][i, :, :size, :size], x_labels=labels, y_labels=labels)
            publish_figure(self, figure, f"attention_example{i}")

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> list[dict[str, Any]]:
        logits = self(batch["tokens"], batch["valid_lens"])
        names = self.codec.class_names if self.codec is not None else [str(i) for i in range(logits.shape[-1])]
        return _labelled(logits, batch.get("texts") or [""] * logits.shape[0], names)

    def predict(self, inputs: Sequence[str]) -> list[dict[str, Any]]:
        """Classify raw texts with the codec (from the data module or the checkpoint):
        ``[{"text", "label", "probability"}, ...]``."""
        codec = self.require_codec()
        batch = codec.batch(inputs)
        with self.inference():
            logits = self(batch["tokens"].to(self.device), batch["valid_lens"].to(self.device))
        return _labelled(logits, list(inputs), codec.class_names)

    def configure_optimizers(self) -> dict[str, Any]:
        return configure_adamw(self)


@register_model("sentiment", aliases=("sentiment_classifier",))
class Sentiment(Classifier):
    """The classifier in its sentiment configuration: SST-2 when no data is named
    (``configs/sentiment.yaml``; ``sentiment_imdb.yaml`` and ``sentiment_local.yaml`` overlay it).
    Arguments and defaults are :class:`Classifier`'s."""

    default_datamodule = "sst2"


def _labelled(logits: Tensor, texts: Sequence[str], names: Sequence[str]) -> list[dict[str, Any]]:
    """The most probable class of each text, with its probability."""
    confidence, labels = torch.softmax(logits, dim=-1).max(dim=-1)
    return [
        {"text": text, "label": names[int(label)], "probability": float(p)}
        for text, label, p in zip(texts, labels, confidence)
    ]
