"""Cross-attention: queries from one sequence attend over another (encoder-decoder attention)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from zoo.attention.base import AttentionOutput
from zoo.attention.factory import register_attention, require_attention
from zoo.attention.multi_head import HeadedAttention

__all__ = ["CrossAttention"]


@register_attention("cross", aliases=("cross_attention", "encoder_decoder"))
class CrossAttention(HeadedAttention):
    """Multi-head attention of ``x`` over ``memory`` (keys and values both come from ``memory``).

    Args:
        embed_dim: Feature size of ``x`` and of the output.
        num_heads: Number of heads; must divide ``embed_dim``.
        memory_dim: Feature size of ``memory`` (defaults to ``embed_dim``).
        score: Registered name of the per-head scoring attention.
        score_kwargs: Extra keyword arguments for the scoring attention.
        dropout: Dropout on the attention weights during training.
        bias: Whether the projections have biases.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        memory_dim: int | None = None,
        score: str = "dot_product",
        score_kwargs: dict[str, Any] | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        require_attention(score, cross=True, role="cross-attention (queries and keys from two sequences)")
        super().__init__(
            embed_dim, num_heads, kdim=memory_dim, vdim=memory_dim,
            score=score, score_kwargs=score_kwargs, dropout=dropout, bias=bias,
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_valid_lens: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> AttentionOutput:
        """``x``: ``(B, Lq, embed_dim)``; ``memory``: ``(B, Lk, memory_dim)``;
        ``memory_valid_lens``: ``(B,)`` or ``(B, Lq)`` valid memory positions."""
        return self.attend_heads(x, memory, memory, memory_valid_lens, attn_mask, is_causal, need_weights)
