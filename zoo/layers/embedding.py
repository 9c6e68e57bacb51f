"""Token embeddings scaled by sqrt(d_model), initialized so the scaled vectors have unit variance."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["ScaledEmbedding", "scaled_embedding"]


class ScaledEmbedding(nn.Embedding):
    """``nn.Embedding`` whose output is multiplied by ``sqrt(d_model)``.

    Weights start from ``N(0, 1/d_model)`` (the convention of the Transformer and fairseq), so
    scaled embeddings have unit variance, comparable to the sinusoidal positional encoding
    added next. With PyTorch's default ``N(0, 1)`` the scaled vectors would be ``sqrt(d_model)``
    times larger, swamping the positions and saturating attention at the start of training.
    """

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=self.embedding_dim**-0.5)
        self._fill_padding_idx_with_zero()

    def forward(self, tokens: Tensor) -> Tensor:
        return super().forward(tokens) * math.sqrt(self.embedding_dim)


def scaled_embedding(vocab_size: int, d_model: int, padding_idx: int | None = None) -> ScaledEmbedding:
    """A :class:`ScaledEmbedding` with a clear error for a bad ``padding_idx``."""
    if padding_idx is not None and not 0 <= padding_idx < vocab_size:
        raise ValueError(f"padding_idx {padding_idx} is outside the vocabulary of {vocab_size} tokens.")
    with torch.no_grad():
        return ScaledEmbedding(vocab_size, d_model, padding_idx=padding_idx)
