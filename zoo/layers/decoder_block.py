"""Transformer decoder block: masked self-attention, cross-attention and FFN, each with add & norm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from zoo.attention.cross_attention import CrossAttention
from zoo.attention.self_attention import SelfAttention
from zoo.layers.add_norm import AddNorm
from zoo.layers.feed_forward import PositionWiseFFN

if TYPE_CHECKING:
    from zoo.positions import PositionScheme

__all__ = ["DecoderBlock", "KeyValue"]

KeyValue = tuple[Tensor, Tensor]
"""Projected keys and values, each ``(B, H, L, d)``."""


class DecoderBlock(nn.Module):
    """One decoder block, post-LN (default) or pre-LN (``norm_first=True``).

    Self-attention is causal. For incremental decoding the block takes the projected keys and
    values of earlier positions (``self_kv``) and returns them extended by the new positions,
    so a step costs one position's projections instead of the whole prefix. The memory's keys
    and values are projected once per source (:meth:`project_memory`).

    Args:
        d_model: Feature size.
        num_heads: Attention heads (self and cross).
        ffn_hidden: Inner size of the FFN.
        dropout: Dropout on attention weights, sublayer outputs and inside the FFN.
        attention: Registered per-head scoring attention name (must support causal masking).
        attention_kwargs: Extra keyword arguments for it.
        norm_first: Pre-LN instead of post-LN.
        cross_attention: Scoring attention of the cross-attention; ``None``: ``attention``.
        cross_attention_kwargs: Its keyword arguments; ``None`` with ``cross_attention=None``:
            ``attention_kwargs``.
        position: A rotary or bias scheme for the self-attention (causal; shared across the
            stack), or None. Cross-attention never gets positions.
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
        position: PositionScheme | None = None,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        if cross_attention is None:
            cross_attention, cross_attention_kwargs = attention, attention_kwargs
        self.self_attention = SelfAttention(
            d_model, num_heads, score=attention, score_kwargs=attention_kwargs, dropout=dropout, position=position
        )
        self.cross_attention = CrossAttention(
            d_model, num_heads, score=cross_attention, score_kwargs=cross_attention_kwargs, dropout=dropout
        )
        self.ffn = PositionWiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm1, self.add_norm2, self.add_norm3 = AddNorm(d_model, dropout), AddNorm(d_model, dropout), AddNorm(d_model, dropout)

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
        def self_attend(h: Tensor) -> tuple[Tensor, KeyValue]:
            k, v = self.self_attention.project_kv(h, h, offset=0 if self_kv is None else self_kv[0].shape[2])
            if self_kv is not None:
                k, v = torch.cat([self_kv[0], k], dim=2), torch.cat([self_kv[1], v], dim=2)
            return self.self_attention.attend_projected(h, k, v, is_causal=True).output, (k, v)

        def cross_attend(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.cross_attention.attend_projected(h, *memory_kv, attn_mask=memory_mask, need_weights=need_weights)

        if self.norm_first:
            attended, kv = self_attend(self.add_norm1.norm(x))
            x = x + self.add_norm1.dropout(attended)
            crossed, weights = cross_attend(self.add_norm2.norm(x))
            x = x + self.add_norm2.dropout(crossed)
            x = x + self.add_norm3.dropout(self.ffn(self.add_norm3.norm(x)))
            return x, kv, weights
        attended, kv = self_attend(x)
        x = self.add_norm1(x, attended)
        crossed, weights = cross_attend(x)
        x = self.add_norm2(x, crossed)
        return self.add_norm3(x, self.ffn(x)), kv, weights
