"""Linformer attention (Wang et al., 2020): keys and values projected along the sequence to ``k`` rows.

What it approximates: softmax attention, assuming its ``(L, L)`` weight matrix is close to low
rank. Keys ``(L, d)`` become ``E K`` ``(k, d)`` and values ``F V`` ``(k, dv)`` through learned
``(k, max_len)`` projections along the sequence; each query then attends over ``k`` rows, not
``L`` keys, so time and memory grow as ``O(L k d)``. A shorter input uses the first ``L`` columns
of each projection; a longer one than ``max_len`` is refused.

The value projection here is a learned pooling: each of its ``k`` rows is a softmax over the
visible positions, so ``F V`` averages values. The output is then a convex combination of the
values with weights ``P F`` (``P`` the ``(L, k)`` softmax over projected keys): non-negative,
summing to one, zero on padding. Those are the weights returned for heatmaps. (The paper's ``F``
is unconstrained; its mixing matrix ``P F`` is no distribution.)

What it drops: order. Every projected row mixes all positions, so a query cannot be kept from
future keys: ``linformer`` is not causal, declares so, and decoders refuse it. Padding is masked
before the projections (padded keys and values weigh nothing in them). A mask that differs per
query is honoured by projecting once per query, at ``O(Lq Lk k)`` cost, as dense as the mask.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import masked_softmax
from zoo.attention.modules.scaled_dot import ScaledDotScores
from zoo.errors import ConfigurationError

__all__ = ["LinformerAttention"]


@register_attention("linformer")
class LinformerAttention(ScaledDotScores):
    """Scaled dot-product attention over ``k`` learned projections of the keys (see the module docstring).

    Args:
        max_len: Longest sequence of keys the projections cover. The default reaches the 16k tokens
            ``zoo bench attention`` measures; set your data's length to save ``2 k`` parameters
            per position left unused.
        k: Rows the keys and values are projected to.
        dropout: Dropout on the ``(Lq, k)`` attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "low rank"
    cost = "L"

    supports_causal: ClassVar[bool] = False
    supports_position_bias: ClassVar[bool] = False

    def __init__(self, max_len: int = 16384, k: int = 64, dropout: float = 0.0, scale: float | None = None) -> None:
        super().__init__(dropout, scale)
        self.require_positive(max_len=max_len, k=k)
        self.max_len, self.k = max_len, k
        self.key_projection = nn.Parameter(torch.randn(k, max_len) / math.sqrt(k))  # E
        self.value_logits = nn.Parameter(torch.randn(k, max_len))  # F: softmax rows, k different poolings

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """Project keys and values along the sequence, then attend over the ``k`` rows."""
        mask, need_weights = context.mask, context.need_weights
        num_keys = keys.shape[-2]
        if num_keys > self.max_len:
            raise ConfigurationError(  # a setting, not a bug: one line at the command line
                f"LinformerAttention: {num_keys} keys exceed max_len={self.max_len}, the length its "
                f"projections were built for. Build it with max_len >= {num_keys}, or cut the input."
            )
        if mask is None:
            mask = torch.ones(1, num_keys, dtype=torch.bool, device=keys.device)
        while mask.dim() < 2:
            mask = mask.unsqueeze(0)
        per_query = mask.shape[-2] > 1  # one projection per query: insert an axis for the k rows
        if per_query:
            mask, queries, keys, values = (
                mask.unsqueeze(-2),
                queries.unsqueeze(-2),
                keys.unsqueeze(-3),
                values.unsqueeze(-3),
            )
        shape = (*mask.shape[:-2], self.k, num_keys)
        e = self.key_projection[:, :num_keys].to(keys.dtype) * mask  # (*, k, Lk): zero on padding
        f = masked_softmax(self.value_logits[:, :num_keys].to(values.dtype).expand(shape), mask=mask.expand(shape))
        scale = self.dot_scale(queries)
        scores = torch.matmul(queries, torch.matmul(e, keys).transpose(-2, -1)) * scale  # (*batch, Lq, k)
        weights = masked_softmax(scores)
        output = torch.matmul(self.dropout(weights), torch.matmul(f, values))  # (*batch, Lq, dv)
        # for heatmaps: the mixing of the values, (Lq, k) @ (k, Lk), a distribution over the visible keys
        mixing = torch.matmul(weights, f) if need_weights else None
        if per_query:
            output, mixing = output.squeeze(-2), None if mixing is None else mixing.squeeze(-2)
        return AttentionOutput(output, mixing)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, k={self.k}" + (f", scale={self.scale}" if self.scale is not None else "")
