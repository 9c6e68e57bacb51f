"""Additive (Bahdanau) attention: ``w^T tanh(W_q q + W_k k)``, for queries and keys of any size.

Scoring every (query, key) pair through a hidden layer of size ``h`` has a ``(*batch, Lq, Lk, h)``
intermediate: 2 GiB in float32 for a batch of 32 sequences of 256 tokens with ``h = 256``, and
autograd would keep it (and its gradient) for the backward pass. Here it never exists whole:
:class:`AdditiveScores` computes it in chunks of at most ``chunk_bytes``, keeps only the
``(*batch, Lq, Lk)`` scores, and recomputes each chunk's ``tanh`` in the backward pass (as flash
attention recomputes its softmax). Peak memory stays bounded and each chunk stays in cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from zoo.attention.build.factory import register_attention
from zoo.attention.modules.row_blocks import RowBlocked

__all__ = ["AdditiveAttention", "AdditiveScores"]


def _chunks(batch: int, num_queries: int, row_elements: int, max_elements: int) -> Iterator[tuple[slice, slice]]:
    """``(batch slice, query slice)`` pairs covering ``(batch, num_queries)``, each holding at
    most ``max_elements`` elements at ``row_elements`` per (sequence, query) row (or one row)."""
    rows = max(1, max_elements // max(row_elements, 1))
    if rows >= num_queries:  # whole sequences at a time
        step = rows // max(num_queries, 1)
        for start in range(0, batch, step):
            yield slice(start, start + step), slice(None)
        return
    for n in range(batch):
        for start in range(0, num_queries, rows):
            yield slice(n, n + 1), slice(start, start + rows)


class AdditiveScores(torch.autograd.Function):
    """``scores[n, i, j] = sum_h w[h] * tanh(a[n, i, h] + b[n, j, h])``, chunk by chunk.

    Inputs: projected queries ``a`` ``(N, Lq, h)``, projected keys ``b`` ``(N, Lk, h)``, the
    score vector ``w`` ``(h,)`` and the chunk size in bytes. Only ``a``, ``b`` and ``w`` are kept
    for the backward pass, which recomputes ``t = tanh(a + b)`` per chunk and accumulates
    ``dw = sum g t``, ``da = w * sum_j g (1 - t^2)``, ``db = w * sum_i g (1 - t^2)``.
    """

    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor, w: Tensor, chunk_bytes: int) -> Tensor:
        ctx.save_for_backward(a, b, w)
        ctx.chunk_bytes = chunk_bytes
        (batch, num_queries, hidden), num_keys = a.shape, b.shape[1]
        scores = a.new_empty((batch, num_queries, num_keys))
        for n, i in _chunks(batch, num_queries, num_keys * hidden, chunk_bytes // a.element_size()):
            features = a[n, i].unsqueeze(-2) + b[n].unsqueeze(-3)  # (n, i, Lk, h)
            scores[n, i] = torch.matmul(features.tanh_(), w)
        return scores

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_scores: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        a, b, w = ctx.saved_tensors
        (batch, num_queries, hidden), num_keys = a.shape, b.shape[1]
        accumulate = torch.promote_types(a.dtype, torch.float32)  # sums over many chunks
        grad_a = torch.empty_like(a)
        grad_b = torch.zeros(b.shape, dtype=accumulate, device=b.device)
        grad_w = torch.zeros(hidden, dtype=accumulate, device=w.device)
        for n, i in _chunks(batch, num_queries, num_keys * hidden, ctx.chunk_bytes // a.element_size()):
            features = (a[n, i].unsqueeze(-2) + b[n].unsqueeze(-3)).tanh_()  # (n, i, Lk, h)
            g = grad_scores[n, i]  # (n, i, Lk)
            grad_w += torch.matmul(g.reshape(1, -1), features.reshape(-1, hidden)).squeeze(0)
            local = features.square_().neg_().add_(1).mul_(g.unsqueeze(-1))  # g * (1 - t^2)
            grad_a[n, i] = local.sum(-2) * w
            grad_b[n] += local.sum(-3)
        return grad_a, (grad_b * w).to(b.dtype), grad_w.to(w.dtype), None


@register_attention("additive", aliases=("bahdanau",))
class AdditiveAttention(RowBlocked):
    """Additive attention (Bahdanau et al., 2015): a one-hidden-layer tanh MLP scores each pair.

    Args:
        query_size: Feature size of the queries.
        key_size: Feature size of the keys.
        num_hiddens: Hidden size of the scoring MLP (defaults to ``key_size``).
        dropout: Dropout on the attention weights during training.
        chunk_bytes: Most bytes of the ``(*batch, Lq, Lk, num_hiddens)`` hidden activations
            computed at once (at least one query row at a time).
    """

    family = "softmax"
    cost = "L²"

    requires_equal_qk_dims: ClassVar[bool] = False
    #: a long causal input a block of queries at a time over the keys before them (half the pairs);
    #: its scores recompute their hidden layer already, so a block is not checkpointed as well
    checkpoint_row_blocks: ClassVar[bool] = False

    def __init__(
        self,
        query_size: int,
        key_size: int,
        num_hiddens: int | None = None,
        dropout: float = 0.0,
        chunk_bytes: int = 4 * 2**20,
    ) -> None:
        super().__init__(dropout)
        num_hiddens = num_hiddens or key_size
        self.require_positive(
            query_size=query_size, key_size=key_size, num_hiddens=num_hiddens, chunk_bytes=chunk_bytes
        )
        self.query_size, self.key_size, self.chunk_bytes = query_size, key_size, chunk_bytes
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
        a, b = self.query_proj(queries), self.key_proj(keys)  # (*batch, Lq, h), (*batch, Lk, h)
        scores = AdditiveScores.apply(a.flatten(0, -3), b.flatten(0, -3), self.score_proj.weight[0], self.chunk_bytes)
        return scores.reshape(*a.shape[:-1], b.shape[-2])  # (*batch, Lq, Lk)
