"""Transformer encoder block: self-attention and a position-wise FFN, each in a residual wrapper."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.attention.multi_head import SelfAttention
from zoo.attention.spec import AttentionSpec
from zoo.layers.add_norm import AddNorm
from zoo.layers.feed_forward import PositionWiseFFN

__all__ = ["EncoderBlock"]


class EncoderBlock(nn.Module):
    """One encoder block, post-LN (the original Transformer) or pre-LN (``norm_first=True``).

    Each sublayer sits in an :class:`~zoo.layers.AddNorm` residual wrapper, which places the norm.

    Args:
        d_model: Feature size.
        num_heads: Attention (query) heads.
        ffn_hidden: Inner size of the FFN.
        attention: The self-attention's :class:`~zoo.attention.spec.AttentionSpec` (variant,
            key/value heads, rotary or bias positions, dropout on the weights), or a registered name.
        dropout: Dropout on sublayer outputs and inside the FFN.
        norm_first: Pre-LN instead of post-LN.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        attention: AttentionSpec | str = "dot_product",
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
    ) -> None:
        super().__init__()
        self.attention = SelfAttention(d_model, num_heads, attention)
        self.ffn = PositionWiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)

    def forward(
        self,
        x: Tensor,
        valid_lens: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``x``: ``(B, L, d_model)``. Returns the new ``x`` and, if asked, ``(B, H, L, L)`` weights."""
        attended, weights = self.attention(
            self.add_norm1.pre(x), valid_lens, attn_mask=attn_mask, need_weights=need_weights
        )
        x = self.add_norm1(x, attended)
        return self.add_norm2(x, self.ffn(self.add_norm2.pre(x))), weights
