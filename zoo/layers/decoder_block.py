"""Transformer decoder block: masked self-attention, cross-attention and FFN, each in a residual wrapper."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from zoo.attention.multi_head import CrossAttention
from zoo.layers.add_norm import AddNorm
from zoo.layers.encoder_block import block_self_attention
from zoo.layers.feed_forward import PositionWiseFFN

if TYPE_CHECKING:
    from zoo.positions import PositionScheme

__all__ = ["DecoderBlock", "KeyValue"]

KeyValue = tuple[Tensor, Tensor]
"""Projected keys and values, each ``(B, num_kv_heads, L, d)``."""


class DecoderBlock(nn.Module):
    """One decoder block, post-LN (default) or pre-LN (``norm_first=True``), each sublayer in an
    :class:`~zoo.layers.AddNorm` residual wrapper.

    Self-attention is causal. For incremental decoding the block takes the projected keys and
    values of earlier positions (``self_kv``) and returns them extended by the new positions,
    so a step costs one position's projections instead of the whole prefix. The memory's keys
    and values are projected once per source (:meth:`project_memory`).

    Args:
        d_model: Feature size.
        num_heads: Attention (query) heads, self and cross.
        ffn_hidden: Inner size of the FFN.
        dropout: Dropout on sublayer outputs and inside the FFN, and on the attention weights
            unless ``attention_dropout`` is given.
        attention: Registered per-head scoring attention name (must support causal masking).
        attention_kwargs: Extra keyword arguments for it.
        norm_first: Pre-LN instead of post-LN.
        cross_attention: Scoring attention of the cross-attention; ``None``: ``attention``.
        cross_attention_kwargs: Its keyword arguments; ``None`` with ``cross_attention=None``:
            ``attention_kwargs``.
        num_kv_heads: Key/value heads of both attentions (grouped-query attention; the cache
            shrinks by ``num_heads / num_kv_heads``); ``None``: ``num_heads``.
        position: A rotary or bias scheme for the self-attention (causal; shared across the
            stack), or None. Cross-attention never gets positions.
        attention_dropout: Dropout on both attentions' weights alone; ``None``: ``dropout``.
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
        cross_attention: str | None = None,
        cross_attention_kwargs: dict[str, Any] | None = None,
        num_kv_heads: int | None = None,
        position: PositionScheme | None = None,
        attention_dropout: float | None = None,
    ) -> None:
        super().__init__()
        if cross_attention is None:
            cross_attention, cross_attention_kwargs = attention, attention_kwargs
        if attention_dropout is None:
            attention_dropout = dropout
        self.self_attention = block_self_attention(
            d_model, num_heads, attention_dropout, attention, attention_kwargs, num_kv_heads, position
        )
        self.cross_attention = CrossAttention(
            d_model,
            num_heads,
            attention=cross_attention,
            attention_kwargs=cross_attention_kwargs,
            dropout=attention_dropout,
            num_kv_heads=num_kv_heads,
        )
        self.ffn = PositionWiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm1, self.add_norm2, self.add_norm3 = (AddNorm(d_model, dropout, norm_first) for _ in range(3))

    def project_memory(self, memory: Tensor) -> KeyValue:
        """The cross-attention keys and values of the encoder output ``(B, Ls, d_model)``."""
        return self.cross_attention.project_kv(memory, memory)

    def forward(
        self,
        x: Tensor,
        memory_kv: KeyValue,
        memory_mask: Tensor | None,
        *,
        self_kv: KeyValue | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, KeyValue, Tensor | None]:
        """``x``: the new positions ``(B, Lt, d_model)``, after the ``self_kv`` ones if given.

        Returns the new ``x``, the self-attention keys/values of all positions so far, and
        (if asked) the cross-attention weights ``(B, H, Lt, Ls)``.
        """
        h = self.add_norm1.pre(x)
        k, v = self.self_attention.project_kv(h, h, offset=0 if self_kv is None else self_kv[0].shape[2])
        if self_kv is not None:
            k, v = torch.cat([self_kv[0], k], dim=2), torch.cat([self_kv[1], v], dim=2)
        x = self.add_norm1(x, self.self_attention.attend_projected(h, k, v, is_causal=True).output)
        crossed, weights = self.cross_attention.attend_projected(
            self.add_norm2.pre(x), *memory_kv, attn_mask=memory_mask, need_weights=need_weights
        )
        x = self.add_norm2(x, crossed)
        return self.add_norm3(x, self.ffn(self.add_norm3.pre(x))), (k, v), weights
