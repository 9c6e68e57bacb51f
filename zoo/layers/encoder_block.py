"""Transformer encoder block: self-attention and a position-wise FFN, each in a residual wrapper."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from zoo.attention.multi_head import SelfAttention
from zoo.layers.add_norm import AddNorm
from zoo.layers.feed_forward import PositionWiseFFN

if TYPE_CHECKING:
    from zoo.positions import PositionScheme

__all__ = ["EncoderBlock", "block_self_attention"]


def block_self_attention(
    d_model: int,
    num_heads: int,
    dropout: float,
    attention: str,
    attention_kwargs: dict[str, Any] | None,
    num_kv_heads: int | None,
    position: PositionScheme | None,
) -> SelfAttention:
    """The self-attention sublayer of an encoder or decoder block, from the block's arguments
    (``dropout`` on the attention weights)."""
    return SelfAttention(
        d_model,
        num_heads,
        attention=attention,
        attention_kwargs=attention_kwargs,
        dropout=dropout,
        num_kv_heads=num_kv_heads,
        position=position,
    )


class EncoderBlock(nn.Module):
    """One encoder block, post-LN (the original Transformer) or pre-LN (``norm_first=True``).

    Each sublayer sits in an :class:`~zoo.layers.AddNorm` residual wrapper, which places the norm.

    Args:
        d_model: Feature size.
        num_heads: Attention (query) heads.
        ffn_hidden: Inner size of the FFN.
        dropout: Dropout on sublayer outputs and inside the FFN, and on the attention weights
            unless ``attention_dropout`` is given.
        attention: Registered name of the per-head scoring attention.
        attention_kwargs: Extra keyword arguments for the scoring attention.
        norm_first: Pre-LN instead of post-LN.
        num_kv_heads: Key/value heads (grouped-query attention); ``None``: ``num_heads``.
        position: A rotary or bias scheme for the self-attention (shared across the stack), or None.
        attention_dropout: Dropout on the attention weights alone; ``None``: ``dropout``. On CPU any
            nonzero value takes SDPA off its fused kernel (about 8x slower forward and backward at
            2,000 tokens), as x-transformers' and Hugging Face's separate ``attn_dropout`` allow.
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
        num_kv_heads: int | None = None,
        position: PositionScheme | None = None,
        attention_dropout: float | None = None,
    ) -> None:
        super().__init__()
        if attention_dropout is None:
            attention_dropout = dropout
        self.attention = block_self_attention(
            d_model, num_heads, attention_dropout, attention, attention_kwargs, num_kv_heads, position
        )
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
