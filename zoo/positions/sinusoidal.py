"""Sinusoidal positional encoding (Vaswani et al., 2017): the ``sinusoidal`` scheme, the default."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from zoo.positions.base import PositionScheme, register_position

__all__ = ["PositionalEncoding", "sinusoidal_table"]


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """``(max_len, d_model)`` table: column ``2j`` holds ``sin(pos / 10000^(2j/d))``, ``2j+1`` the cosine."""
    positions = torch.arange(max_len, dtype=torch.float64).unsqueeze(-1)
    frequencies = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = positions * frequencies  # (max_len, ceil(d/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


@register_position("sinusoidal", aliases=("sinusoid",))
class PositionalEncoding(PositionScheme):
    """Adds fixed sinusoids to ``(B, L, d_model)`` embeddings, then applies dropout.

    The table is a non-persistent buffer: it is not stored in checkpoints, so ``max_len`` can
    change between training and inference.

    Args:
        d_model: Embedding size.
        dropout: Dropout applied after adding the encoding.
        max_len: Longest sequence (plus ``offset``) supported.
    """

    kind = "absolute"

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 4096) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Encode positions ``offset .. offset + L - 1`` (``offset`` > 0 for cached decoding)."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"PositionalEncoding expects (batch, length, {self.d_model}); got {tuple(x.shape)}.")
        length = x.shape[1]
        if offset < 0:
            raise ValueError(f"PositionalEncoding: offset must be >= 0 (the first position's index), got {offset}.")
        if offset + length > self.max_len:
            raise ValueError(
                f"Sequence of {offset + length} positions exceeds max_len={self.max_len}; "
                f"build the PositionalEncoding with a larger max_len."
            )
        return self.dropout(x + self.table[offset : offset + length].to(x.dtype))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"
