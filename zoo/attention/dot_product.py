"""Scaled dot-product attention: ``softmax(q k^T / sqrt(d)) v``, with a fused fast path."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.base import Attention, AttentionOutput, PositionBias, position_bias_grid
from zoo.attention.factory import register_attention

__all__ = ["DotProductAttention"]


@register_attention("dot_product", aliases=("scaled_dot_product",))
class DotProductAttention(Attention):
    """Scaled dot-product attention (Vaswani et al., 2017).

    Scores are ``q . k * scale`` with ``scale = 1 / sqrt(d)`` by default. When weights are not
    requested, the computation runs in :func:`torch.nn.functional.scaled_dot_product_attention`
    (flash / memory-efficient kernels where available); with ``need_weights=True`` it runs the
    explicit formulation, which gives the same output. A positional bias reaches the kernel as
    a float mask: the bias, with ``-inf`` where the boolean mask hides a key.

    Args:
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    has_fused_path: ClassVar[bool] = True
    supports_position_bias: ClassVar[bool] = True

    def __init__(self, dropout: float = 0.0, scale: float | None = None) -> None:
        super().__init__(dropout)
        self.scale = scale

    def _scale(self, queries: Tensor) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(queries.shape[-1])

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        return torch.matmul(queries, keys.transpose(-2, -1)) * self._scale(queries)

    def attend(
        self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, *, need_weights: bool, position_bias: PositionBias | None = None
    ) -> AttentionOutput:
        if need_weights:
            return super().attend(queries, keys, values, mask, need_weights=True, position_bias=position_bias)
        if position_bias is not None:
            bias = position_bias_grid(position_bias, queries.shape[-2], keys.shape[-2], queries.device).to(queries.dtype)
            mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        output = F.scaled_dot_product_attention(
            queries,
            keys,
            values,
            attn_mask=mask,
            dropout_p=self.dropout.p if self.training else 0.0,
            scale=self._scale(queries),
        )
        return AttentionOutput(output, None)

    def extra_repr(self) -> str:
        return f"scale={self.scale}" if self.scale is not None else ""
