"""The attention-layer contract: :class:`AttentionLayer`, the unit a stack swaps.

What 2025-2026 models call attention is a layer: it owns its projections, norms, gates, short
convolutions and decoding cache, and reads the block's input ``x`` ``(B, L, embed_dim)`` (as each
of flash-linear-attention's ``fla/layers/*.py`` is one forward). A block holds one layer for its
self-attention and calls it two ways:

* ``forward(x, valid_lens=None, *, attn_mask=None, is_causal=False, need_weights=False)``: the
  whole sequence, returning an :class:`~zoo.attention.base.AttentionOutput` (``(B, L, embed_dim)``
  and, when asked, weights ``(B, H, L, L)``);
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

from torch import nn

from zoo.attention.base import _Capabilities

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
