"""The block of a decoder-only Transformer (GPT): an encoder block whose self-attention is causal,
and which continues a cache when decoding."""

from __future__ import annotations

from torch import Tensor

from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.layers.encoder_block import EncoderBlock

__all__ = ["CausalBlock"]


class CausalBlock(EncoderBlock):
    """Causal self-attention and an MLP, each in a residual wrapper, with a cache for decoding.

    As GPT-2 and nanoGPT build it (the config :class:`~zoo.models.gpt.GPT` gives): pre-LN,
    ``x + dropout(attention(norm(x)))`` then ``x + dropout(mlp(norm(x)))``, a GELU MLP without
    inner dropout (and, through the spec, dropout on the attention weights). A full forward is
    :class:`EncoderBlock`'s with the causal mask; :meth:`forward_cached` decodes.
    """

    causal = True

    def forward_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """``x``: the new positions ``(B, L, d_model)`` after those in ``cache`` (None before the
        first call), under the decoding step's causal ``context``; returns the new ``x`` and the
        cache extended by them."""
        attended, cache = self.attention.attend_cached(self.add_norm1.pre(x), cache, self.check_context(context))
        return self._feed_forward(self.add_norm1(x, attended)), cache
