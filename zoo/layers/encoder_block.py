"""Transformer encoder block: self-attention and a position-wise FFN, each with add & norm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from zoo.attention.self_attention import SelfAttention
from zoo.layers.add_norm import AddNorm
from zoo.layers.feed_forward import PositionWiseFFN

if TYPE_CHECKING:
    from zoo.positions import PositionScheme

__all__ = ["EncoderBlock"]


class EncoderBlock(nn.Module):
    """One encoder block, post-LN (the original Transformer) or pre-LN (``norm_first=True``).

    Post-LN: ``x = AddNorm(x, attn(x)); x = AddNorm(x, ffn(x))``.
    Pre-LN: ``x = x + attn(norm(x)); x = x + ffn(norm(x))``, steadier for deep stacks and
    large learning rates (the final norm belongs to the stack, not the block).

    Args:
        d_model: Feature size.
        num_heads: Attention heads.
        ffn_hidden: Inner size of the FFN.
        dropout: Dropout on attention weights, sublayer outputs and inside the FFN.
        attention: Registered name of the per-head scoring attention.
        attention_kwargs: Extra keyword arguments for the scoring attention.
        norm_first: Pre-LN instead of post-LN.
        position: A rotary or bias scheme for the self-attention (shared across the stack), or None.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        dropout: float = 0.0,
        attention: str = "dot_product",
        attention_kwargs: dict[str, Any] | None = None,
        norm_first: bool = False,
        position: PositionScheme | None = None,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.attention = SelfAttention(
            d_model, num_heads, score=attention, score_kwargs=attention_kwargs, dropout=dropout, position=position
        )
        self.ffn = PositionWiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm1 = AddNorm(d_model, dropout)
        self.add_norm2 = AddNorm(d_model, dropout)

    def forward(
        self, x: Tensor, valid_lens: Tensor | None = None, *, attn_mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """``x``: ``(B, L, d_model)``. Returns the new ``x`` and, if asked, ``(B, H, L, L)`` weights."""
        if self.norm_first:
            attended, weights = self.attention(self.add_norm1.norm(x), valid_lens, attn_mask=attn_mask, need_weights=need_weights)
            x = x + self.add_norm1.dropout(attended)
            x = x + self.add_norm2.dropout(self.ffn(self.add_norm2.norm(x)))
            return x, weights
        attended, weights = self.attention(x, valid_lens, attn_mask=attn_mask, need_weights=need_weights)
        x = self.add_norm1(x, attended)
        return self.add_norm2(x, self.ffn(x)), weights
