"""Scaled dot-product attention: ``softmax(q k^T / sqrt(d)) v``, with a fused fast path."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from zoo.attention.build.backends import requested_backend
from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels import flex, fused_attention
from zoo.attention.kernels.sdpa import repeat_kv_heads
from zoo.attention.modules.flex_variant import FlexVariant
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["DotProductAttention"]


@register_attention("dot_product", aliases=("scaled_dot_product",))
class DotProductAttention(FlexVariant, ScaledDotScores):
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

    family = "softmax"
    cost = "L²"

    has_fused_path: ClassVar[bool] = True
    flex_needs_bias: ClassVar[bool] = True  # without a bias scheme, SDPA's flash kernel runs it
    supports_position_bias: ClassVar[bool] = True
    supports_grouped_kv: ClassVar[bool] = True

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """The explicit formulation when weights are asked for, else the fused kernel.

        Grouped key/value heads (fewer at axis -3 than the queries) go to the kernel as they are
        (``enable_gqa``), and are repeated for the explicit formulation. With a bias scheme
        FlexAttention takes it where the backend allows (:mod:`zoo.attention.modules.flex_variant`): the
        bias as a table over distances, never an ``(H, Lq, Lk)`` float mask.
        """
        if context.position_bias is not None or requested_backend() == "flex":  # else SDPA's kernel is its own
            if (flexed := self.attend_flex(queries, keys, values, context)) is not None:
                return flexed
        grouped = keys.dim() >= 3 and queries.dim() >= 3 and keys.shape[-3] != queries.shape[-3]
        if context.need_weights:
            return super().attend(queries, *repeat_kv_heads(queries, keys, values), context)
        output = fused_attention(
            queries, keys, values, context.mask, is_causal=context.is_causal,
            bias=context.bias_grid(queries.shape[-2], keys.shape[-2], queries.device),
            dropout_p=self.active_dropout, scale=self.dot_scale(queries), enable_gqa=grouped,
        )  # fmt: skip
        return AttentionOutput(output, None)

    def flex_pattern(self, num_keys: int, is_causal: bool, device: torch.device) -> flex.FlexMask | None:
        """Causality, or every pair."""
        return flex.causal() if is_causal else None
