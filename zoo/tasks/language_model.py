"""Causal language modelling as a LightningModule: next-token cross-entropy, nanoGPT's optimisation,
loss, perplexity and bits per unit (character, byte or token), and sampling text.

The registered model ``gpt`` trains :class:`zoo.models.GPT` on a ``text`` data module (Tiny
Shakespeare by default): each batch holds windows of ``block_size + 1`` tokens, the model reads
the first ``block_size`` and is scored on predicting the last ``block_size``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torchmetrics
from torch import Tensor, nn

from zoo.errors import DataError
from zoo.models import GPT
from zoo.tasks.base import ZooTask
from zoo.tasks.optim import configure_adamw
from zoo.tasks.registry import register_model
from zoo.text.language import LANGUAGE_CODECS

__all__ = ["LanguageModel"]

STAGES = ("val", "test")


@register_model("gpt", aliases=("language_model",))
class LanguageModel(ZooTask):
    """A decoder-only Transformer language model (see :class:`zoo.models.GPT`).

    Optimisation is nanoGPT's: AdamW with weight decay on the matrices only (embeddings included,
    norms and biases not), a linear warm-up to ``lr`` then a cosine decay to ``min_lr`` at the
    last step; gradient clipping is the trainer's (``gradient_clip_val``). ``vocab_size`` and
    ``block_size`` come from the data module.

    Args:
        vocab_size: Tokens (from the data module).
        block_size: The longest context (from the data module).
        lr: Peak AdamW learning rate.
        min_lr: The learning rate the cosine decay ends at.
        weight_decay: AdamW weight decay of the matrices.
        beta1: AdamW's first moment decay.
        beta2: AdamW's second moment decay (nanoGPT uses 0.99 for its small Shakespeare models).
        warmup_steps: Linear warm-up steps.
        max_new_tokens: Tokens each prompt is continued by when predicting.
        temperature: Sampling temperature when predicting (0: greedy).
        top_k: Sample among the ``top_k`` most likely tokens only when predicting (None: all).
        sample_seed: Seed of the sampling when predicting, each prompt drawn from it afresh, so
            predictions repeat; None: from the global random state.
        torch_compile: Compile the model with ``torch.compile`` (checkpoints unchanged).
        model_kwargs: The architecture's hyperparameters (``--model.d_model``,
            ``--model.attention``, ``--model.position`` and so on), each documented, with its
            default, in :class:`zoo.models.GPT`.
    """

    kind = "language_model"
    default_datamodule = "shakespeare"
    data_links = ("vocab_size", "block_size")
    monitor = ("val/loss", "min")
    codecs = LANGUAGE_CODECS

    def __init__(
        self,
        vocab_size: int,
        block_size: int = 256,
        lr: float = 1e-3,
        min_lr: float = 1e-4,
        weight_decay: float = 0.1,
        beta1: float = 0.9,
        beta2: float = 0.99,
        warmup_steps: int = 100,
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = 200,
        sample_seed: int | None = 0,
        torch_compile: bool = False,
        **model_kwargs: Any,
    ) -> None:
        super().__init__(torch_compile)
        self.save_hyperparameters()
        self.save_model_hyperparameters(GPT, model_kwargs)
        self.model = GPT(vocab_size=vocab_size, block_size=block_size, **model_kwargs)
        self.metrics = nn.ModuleDict()
        for stage in STAGES:
            self.metrics[f"{stage}_loss"] = torchmetrics.MeanMetric()
            self.metrics[f"{stage}_ppl"] = torchmetrics.text.Perplexity()
            self.metrics[f"{stage}_bits"] = torchmetrics.MeanMetric()

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits ``(B, T, V)`` at every position of ``tokens`` ``(B, T)``."""
        return self.model(tokens)[0]

    def _logits_and_loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        tokens = batch["tokens"]
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        logits = self(inputs)
        return logits, targets, nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        _, _, loss = self._logits_and_loss(batch)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)  # the mean over every process's batch
        return loss

    def _evaluate(self, batch: dict[str, Tensor], stage: str) -> None:
        logits, targets, loss = self._logits_and_loss(batch)
        weight = targets.numel()
        self.metrics[f"{stage}_loss"].update(loss, weight=weight)
        self.metrics[f"{stage}_bits"].update(loss / math.log(2), weight=weight)
        self.metrics[f"{stage}_ppl"].update(logits.float(), targets)
        unit = self.codec.unit if self.codec is not None else "token"
        self.log(f"{stage}/loss", self.metrics[f"{stage}_loss"], prog_bar=True)
        self.log(f"{stage}/ppl", self.metrics[f"{stage}_ppl"])
        self.log(f"{stage}/bits_per_{unit}", self.metrics[f"{stage}_bits"])

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> dict[str, Any]:
        return configure_adamw(self, betas=(self.hparams.beta1, self.hparams.beta2))

    # -- text in, text out --------------------------------------------------------------------------

    def encode_prompt(self, prompt: str) -> Tensor:
        """The prompt's token ids ``(1, T)``; a character the vocabulary lacks is one clear error."""
        codec = self.require_codec()
        unknown = codec.unknown(prompt)
        if unknown:
            raise DataError(
                f"The prompt holds characters this model's vocabulary lacks: {''.join(sorted(set(unknown)))!r}. "
                f"Remove them (the model reads the {codec.vocab_size} characters it was trained on), or train with "
                "--data.tokenizer byte, which reads any text."
            )
        ids = codec.encode(prompt)
        if not ids:
            raise DataError("The prompt is empty: give at least one character to continue.")
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    def stream(
        self,
        prompt: str,
        max_new_tokens: int,
        *,
        temperature: float = 0.8,
        top_k: int | None = 200,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Iterator[str]:
        """The continuation of ``prompt`` as pieces of text, each as soon as its tokens are drawn
        (a byte or subword that ends in the middle of a character waits for the rest)."""
        codec = self.require_codec()
        ids: list[int] = []
        shown = ""
        with self.inference():
            for token in self.model.generate(
                self.encode_prompt(prompt), max_new_tokens, temperature=temperature, top_k=top_k,
                generator=generator, use_cache=use_cache,
            ):  # fmt: skip
                ids.append(int(token[0]))
                text = codec.decode(ids)
                complete = text.rstrip("\ufffd") if len(ids) < max_new_tokens else text
                if len(complete) > len(shown):
                    yield complete[len(shown) :]
                    shown = complete

    def generate(self, prompt: str, max_new_tokens: int = 200, **options: Any) -> str:
        """``prompt`` continued by ``max_new_tokens`` sampled tokens (options as :meth:`stream`)."""
        return prompt + "".join(self.stream(prompt, max_new_tokens, **options))

    def predict(self, inputs: Sequence[str]) -> list[dict[str, Any]]:
        """Each prompt continued with the predicting settings (``max_new_tokens``, ``temperature``,
        ``top_k``, ``sample_seed``)."""
        hp, rows = self.hparams, []
        for prompt in inputs:
            generator = None if hp.sample_seed is None else torch.Generator(self.device).manual_seed(hp.sample_seed)
            pieces = self.stream(
                prompt, hp.max_new_tokens, temperature=hp.temperature, top_k=hp.top_k, generator=generator
            )
            rows.append({"text": prompt, "continuation": "".join(pieces)})
        return rows

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> list[dict[str, Any]]:
        return self.predict(batch["text"])
