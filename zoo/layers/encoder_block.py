"""Transformer encoder block: self-attention and a position-wise FFN, each in a residual wrapper."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from zoo.attention.multi_head import self_attention_layer
from zoo.attention.spec import AttentionSpec
from zoo.layers.block_config import BlockConfig

__all__ = ["EncoderBlock"]


class EncoderBlock(nn.Module):
    """One encoder block, post-LN (the original Transformer) or pre-LN (``norm_first=True``).

    Each sublayer sits in an :class:`~zoo.layers.AddNorm` residual wrapper, which places the norm.

    Args:
        config: The stack's sizes, dropout and norm placement.
        attention: The self-attention's :class:`~zoo.attention.spec.AttentionSpec` (a scoring
            attention run per head, or an attention layer; key/value heads, rotary or bias
            positions, dropout on the weights), or a registered name.
    """

    #: whether the self-attention is causal (:class:`~zoo.layers.CausalBlock`'s)
    causal: ClassVar[bool] = False

    def __init__(self, config: BlockConfig, attention: AttentionSpec | str = "dot_product") -> None:
        super().__init__()
        self.attention = self_attention_layer(attention, config.d_model, config.num_heads, bias=config.bias)
        self.ffn = config.feed_forward()
        self.add_norm1, self.add_norm2 = config.add_norm(), config.add_norm()

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
            self.add_norm1.pre(x), valid_lens, attn_mask=attn_mask, is_causal=self.causal, need_weights=need_weights
        )
        return self._feed_forward(self.add_norm1(x, attended)), weights

    def _feed_forward(self, x: Tensor) -> Tensor:
        """The second sublayer: the FFN in its residual wrapper."""
        return self.add_norm2(x, self.ffn(self.add_norm2.pre(x)))
