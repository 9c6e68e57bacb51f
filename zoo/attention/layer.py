"""The attention-layer contract: :class:`AttentionLayer`, the unit a stack swaps.

What 2025-2026 models call attention is a layer: it owns its projections, norms, gates, short
convolutions and decoding cache, and reads the block's input ``x`` ``(B, L, embed_dim)`` (as each
of flash-linear-attention's ``fla/layers/*.py`` is one forward). A block holds one layer for its
self-attention and calls it two ways:

* ``forward(x, valid_lens=None, *, attn_mask=None, is_causal=False, need_weights=False)``: the
  whole sequence, returning an :class:`~zoo.attention.base.AttentionOutput` (``(B, L, embed_dim)``
  and, when asked, weights ``(B, H, L, L)``). The base class validates and merges the masks once
  (:func:`~zoo.attention.masking.layer_mask`), refuses what the layer declares it cannot do, and
  hands :meth:`AttentionLayer.attend` the one boolean mask: a layer implements ``attend``;
* ``attend_cached(x, cache, *, attn_mask=None)``: new positions after those in ``cache`` (None
  before the first), returning the output and the cache extended by them
  (:mod:`zoo.attention.cache`).

``multi_head`` (:class:`~zoo.attention.multi_head.SelfAttention`) is the layer that runs any
registered scoring attention per head; the recurrent families (:mod:`zoo.attention.recurrent`)
are layers of their own. A layer registers with :func:`~zoo.attention.factory.register_attention_layer`
(or the ``zoo.attention_layers`` entry-point group) and declares its capabilities once, as class
attributes; a stack refuses it at build time, naming the layers and attentions that would work.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from zoo.attention.base import AttentionOutput, _Capabilities
from zoo.attention.masking import layer_mask

__all__ = ["AttentionLayer"]


class AttentionLayer(_Capabilities, nn.Module):
    """Base class of attention layers (see the module docstring).

    The capability flags are :class:`~zoo.attention.base.Attention`'s, read the same way (a
    causal recurrence declares ``supports_bidirectional = False``; a layer that takes key padding
    only, ``supports_query_mask = False``), and :meth:`check_request` refuses a call that breaks
    them. A layer's constructor takes ``embed_dim`` and ``num_heads`` (the stack fills them), and
    ``position`` (a rotary or bias scheme) and ``bias`` where it takes them.
    """

    #: attends from one sequence over another (``forward(x, memory, ...)``)
    supports_cross_attention: ClassVar[bool] = False
    #: rotates its queries and keys with a rotary scheme (its constructor takes ``position``)
    supports_rotary: ClassVar[bool] = False
    #: adds a bias scheme (``alibi``, ``t5``) to its scores (its constructor takes ``position``)
    supports_position_bias: ClassVar[bool] = False
    #: decodes from a fixed-size state: its cache does not grow with the context
    fixed_state: ClassVar[bool] = False
    #: a stack builds it by name, from ``embed_dim`` and ``num_heads`` (False for the multi-head
    #: layers, which a stack builds around the scoring attention it is named by)
    stack_layer: ClassVar[bool] = True

    embed_dim: int
    num_heads: int

    def forward(
        self, x: Tensor, valid_lens: Tensor | None = None,
        *, attn_mask: Tensor | None = None, is_causal: bool = False, need_weights: bool = False,
    ) -> AttentionOutput:  # fmt: skip
        """Attend over ``x`` ``(B, L, embed_dim)``; ``valid_lens`` ``(B,)`` or ``(B, L)`` and a
        boolean ``attn_mask`` (True = attend, broadcastable to ``(B, L, L)``, or ``(B, H, L, L)``)
        mark what each position may see. Returns the output ``(B, L, embed_dim)`` and, if asked,
        the weights ``(B, H, L, L)``."""
        mask = self.layer_mask(x, valid_lens, attn_mask)
        self.check_request(mask, is_causal=is_causal, need_weights=need_weights)
        return self.attend(x, mask, is_causal=is_causal, need_weights=need_weights)

    def attend(self, x: Tensor, mask: Tensor | None, *, is_causal: bool, need_weights: bool) -> AttentionOutput:
        """The layer's computation on ``x`` under one boolean ``mask`` broadcastable to
        ``(B, H, L, L)`` (True = attend; None: nothing masked; causality comes as ``is_causal``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement attend(x, mask, *, is_causal, need_weights).")

    def layer_mask(self, x: Tensor, valid_lens: Tensor | None, attn_mask: Tensor | None) -> Tensor | None:
        """The masks of a call over ``x`` validated and merged into one (see :func:`~zoo.attention.masking.layer_mask`)."""
        length = x.shape[-2]
        return layer_mask(x.shape[0], length, length, self.num_heads, valid_lens, attn_mask, owner=type(self).__name__)
