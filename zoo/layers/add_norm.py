"""Residual connection followed by layer normalization (the Transformer's "add & norm")."""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["AddNorm"]


class AddNorm(nn.Module):
    """``LayerNorm(x + dropout(sublayer_output))``.

    Args:
        d_model: Feature size.
        dropout: Dropout on the sublayer's output before the residual sum.
    """

    def __init__(self, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        if x.shape != sublayer_output.shape:
            raise ValueError(f"AddNorm: shapes differ: {tuple(x.shape)} and {tuple(sublayer_output.shape)}.")
        return self.norm(x + self.dropout(sublayer_output))
