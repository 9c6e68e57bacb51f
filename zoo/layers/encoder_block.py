"""Transformer encoder block: self-attention and a position-wise FFN, each in a residual wrapper."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.multi_head import self_attention_layer
from zoo.layers.block_config import BlockConfig

__all__ = ["EncoderBlock"]


class EncoderBlock(nn.Module):
    """One encoder block, post-LN (the original Transformer) or pre-LN (``norm_first=True``).

    Each sublayer sits in an :class:`~zoo.layers.AddNorm` residual wrapper, which places the norm.
    A config with ``ffn_hidden=0`` builds no FFN: the block is its self-attention sublayer alone.

    Args:
        config: The stack's sizes, dropout and norm placement.
        attention: The self-attention's :class:`~zoo.attention.build.spec.AttentionSpec` (a scoring
            attention run per head, or an attention layer; key/value heads, rotary or bias
            positions, dropout on the weights), or a registered name.
    """

    #: whether the self-attention is causal (:class:`~zoo.layers.CausalBlock`'s): what a stack of
    #: these blocks needs of its attention, and the causality of its model's contexts
    causal: ClassVar[bool] = False

    def __init__(self, config: BlockConfig, attention: AttentionSpec | str = "dot_product") -> None:
        super().__init__()
        self.attention = self_attention_layer(attention, config.d_model, config.num_heads, bias=config.bias)
        self.ffn = config.feed_forward()
        self.add_norm1 = config.add_norm()
        self.add_norm2 = None if self.ffn is None else config.add_norm()

    def forward(self, x: Tensor, context: AttentionContext | None = None) -> tuple[Tensor, Tensor | None]:
        """``x``: ``(B, L, d_model)``, under the forward's ``context`` (its masks, whether weights are
        wanted, and causality, which must be the block's; None: nothing masked). Returns the new
        ``x`` and, if the context asks, ``(B, H, L, L)`` weights."""
        context = self.check_context(context)
        attended, weights = self.attention(self.add_norm1.pre(x), context)
        return self._feed_forward(self.add_norm1(x, attended)), weights

    def check_context(self, context: AttentionContext | None) -> AttentionContext:
        """``context``, or a new one with nothing masked; refused in one line where its causality is
        not the block's (a model builds its contexts for its blocks' kind)."""
        if context is None:
            return AttentionContext(is_causal=self.causal)
        if context.is_causal != self.causal:
            raise ValueError(
                f"{type(self).__name__} is {'' if self.causal else 'not '}causal; got a context with "
                f"is_causal={context.is_causal}. Build the context with is_causal={self.causal}."
            )
        return context

    def _feed_forward(self, x: Tensor) -> Tensor:
        """The second sublayer: the FFN in its residual wrapper (``x`` itself without an FFN)."""
        if self.ffn is None:
            return x
        return self.add_norm2(x, self.ffn(self.add_norm2.pre(x)))
