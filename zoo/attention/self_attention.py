"""Self-attention: multi-head attention where queries, keys and values are one sequence."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from zoo.attention.base import AttentionOutput
from zoo.attention.factory import register_attention
from zoo.attention.multi_head import HeadedAttention

if TYPE_CHECKING:
    from zoo.positions import PositionScheme

__all__ = ["SelfAttention"]


@register_attention("self", aliases=("self_attention",))
class SelfAttention(HeadedAttention):
    """Multi-head self-attention: every position of ``x`` attends over ``x``.

    Args:
        embed_dim: Feature size of ``x`` and of the output.
        num_heads: Number of heads; must divide ``embed_dim``.
        score: Registered name of the per-head scoring attention.
        score_kwargs: Extra keyword arguments for the scoring attention.
        dropout: Dropout on the attention weights during training.
        bias: Whether the projections have biases.
        position: A rotary or bias positional scheme (``rope``, ``alibi``, ``t5``), or None.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        score: str = "dot_product",
        score_kwargs: dict[str, Any] | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        position: PositionScheme | None = None,
    ) -> None:
        super().__init__(
            embed_dim, num_heads, score=score, score_kwargs=score_kwargs, dropout=dropout, bias=bias, position=position
        )

    def forward(
        self,
        x: Tensor,
        valid_lens: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> AttentionOutput:
        """``x``: ``(B, L, embed_dim)``; ``valid_lens``: ``(B,)`` or ``(B, L)``."""
        return self.attend_heads(x, x, x, valid_lens, attn_mask, is_causal, need_weights)
