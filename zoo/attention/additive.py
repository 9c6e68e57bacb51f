"""Additive (Bahdanau) attention: ``w^T tanh(W_q q + W_k k)``, for queries and keys of any size."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from zoo.attention.base import Attention
from zoo.attention.factory import register_attention

__all__ = ["AdditiveAttention"]


@register_attention("additive", aliases=("bahdanau",))
class AdditiveAttention(Attention):
    """Additive attention (Bahdanau et al., 2015): a one-hidden-layer tanh MLP scores each pair.

    Args:
        query_size: Feature size of the queries.
        key_size: Feature size of the keys.
        num_hiddens: Hidden size of the scoring MLP (defaults to ``key_size``).
        dropout: Dropout on the attention weights during training.
    """

    requires_equal_qk_dims: ClassVar[bool] = False

    def __init__(self, query_size: int, key_size: int, num_hiddens: int | None = None, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        num_hiddens = num_hiddens or key_size
        for label, size in (("query_size", query_size), ("key_size", key_size), ("num_hiddens", num_hiddens)):
            if not isinstance(size, int) or size <= 0:
                raise ValueError(f"AdditiveAttention: {label} must be a positive integer, got {size!r}.")
        self.query_size, self.key_size = query_size, key_size
        self.query_proj = nn.Linear(query_size, num_hiddens, bias=False)
        self.key_proj = nn.Linear(key_size, num_hiddens, bias=False)
        self.score_proj = nn.Linear(num_hiddens, 1, bias=False)

    def check_dims(self, query_dim: int, key_dim: int, value_dim: int) -> None:
        if (query_dim, key_dim) != (self.query_size, self.key_size):
            raise ValueError(
                f"AdditiveAttention was built for queries of size {self.query_size} and keys of "
                f"size {self.key_size}; got {query_dim} and {key_dim}."
            )

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        # (*batch, Lq, 1, h) + (*batch, 1, Lk, h) -> (*batch, Lq, Lk, h) -> (*batch, Lq, Lk)
        features = torch.tanh(self.query_proj(queries).unsqueeze(-2) + self.key_proj(keys).unsqueeze(-3))
        return self.score_proj(features).squeeze(-1)
