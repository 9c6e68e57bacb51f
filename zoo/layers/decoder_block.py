"""Transformer decoder block: masked self-attention, cross-attention and FFN, each in a residual wrapper."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.multi_head import CrossAttention, self_attention_layer
from zoo.layers.block_config import BlockConfig

__all__ = ["DecoderBlock", "KeyValue"]

KeyValue = tuple[Tensor, Tensor]
"""Projected keys and values of the memory, each ``(B, num_kv_heads, Ls, d)``."""


class DecoderBlock(nn.Module):
    """One decoder block, post-LN (default) or pre-LN (``norm_first=True``), each sublayer in an
    :class:`~zoo.layers.AddNorm` residual wrapper.

    Self-attention is causal. For incremental decoding the block takes its self-attention's cache
    of earlier positions (``cache``: keys and values, or a recurrent state;
    :mod:`zoo.attention.contract.cache`) and returns it extended by the new positions, so a step costs one
    position's projections instead of the whole prefix. The memory's keys and values are
    projected once per source (:meth:`project_memory`). A config with ``ffn_hidden=0`` builds no FFN.

    Args:
        config: The stack's sizes (heads: self and cross), dropout and norm placement.
        attention: The causal self-attention's :class:`~zoo.attention.build.spec.AttentionSpec` (its
            position scheme is the decoder stack's), or a registered name.
        cross_attention: The cross-attention's spec (no positions); ``None``: ``attention``'s
            without its position scheme.
    """

    def __init__(
        self,
        config: BlockConfig,
        attention: AttentionSpec | str = "dot_product",
        cross_attention: AttentionSpec | str | None = None,
    ) -> None:
        super().__init__()
        spec = AttentionSpec(attention) if isinstance(attention, str) else attention
        cross = spec.with_position(None) if cross_attention is None else cross_attention
        self.self_attention = self_attention_layer(spec, config.d_model, config.num_heads, bias=config.bias)
        self.cross_attention = CrossAttention(config.d_model, config.num_heads, cross, bias=config.bias)
        self.ffn = config.feed_forward()
        self.add_norm1, self.add_norm2 = config.add_norm(), config.add_norm()
        self.add_norm3 = None if self.ffn is None else config.add_norm()

    def project_memory(self, memory: Tensor) -> KeyValue:
        """The cross-attention keys and values of the encoder output ``(B, Ls, d_model)``."""
        return self.cross_attention.project_kv(memory, memory)

    def forward(
        self,
        x: Tensor,
        memory_kv: KeyValue,
        cross_context: AttentionContext,
        *,
        cache: LayerCache | None = None,
        context: AttentionContext | None = None,
    ) -> tuple[Tensor, LayerCache, Tensor | None]:
        """``x``: the new positions ``(B, Lt, d_model)``, after the ``cache`` ones if given.

        ``context`` is the self-attention's (causal; its ``offset`` the cache's length),
        ``cross_context`` the cross-attention's (the memory's padding; ``need_weights`` there asks
        for its weights). Returns the new ``x``, the self-attention's cache of all positions so
        far, and (if asked) the cross-attention weights ``(B, H, Lt, Ls)``.
        """
        attended, cache = self.self_attention.attend_cached(self.add_norm1.pre(x), cache, context)
        x = self.add_norm1(x, attended)
        crossed, weights = self.cross_attention.attend_projected(self.add_norm2.pre(x), *memory_kv, cross_context)
        x = self.add_norm2(x, crossed)
        if self.ffn is not None:
            x = self.add_norm3(x, self.ffn(self.add_norm3.pre(x)))
        return x, cache, weights
