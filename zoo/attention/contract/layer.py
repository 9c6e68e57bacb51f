"""The attention-layer contract: :class:`AttentionLayer`, the unit a stack swaps.

What 2025-2026 models call attention is a layer: it owns its projections, norms, gates, short
convolutions and decoding cache, and reads the block's input ``x`` ``(B, L, embed_dim)`` (as each
of flash-linear-attention's ``fla/layers/*.py`` is one forward). A block holds one layer for its
self-attention and calls it two ways:

* ``forward(x, context)``: the whole sequence, returning an
  :class:`~zoo.attention.contract.base.AttentionOutput` (``(B, L, embed_dim)`` and, when
  ``context.need_weights``, weights ``(B, H, L, L)``). ``context`` is the
  :class:`~zoo.attention.contract.context.AttentionContext` the model built once for its forward (masks
  merged and validated, causality, positions); the base class refuses what the layer declares it
  cannot do and calls :meth:`AttentionLayer.attend`, which a layer implements;
* ``attend_cached(x, cache, context)``: new positions after those in ``cache`` (None before the
  first), returning the output and the cache extended by them (:mod:`zoo.attention.contract.cache`).

A layer called on its own gets its context from :meth:`AttentionContext.build
<zoo.attention.contract.context.AttentionContext.build>` (``layer(x, AttentionContext.build(B, L,
valid_lens=lens, is_causal=True))``); with none, nothing is masked and it attends both ways.

``multi_head`` (:class:`~zoo.attention.modules.multi_head.SelfAttention`) is the layer that runs any
registered scoring attention per head; the recurrent families (:mod:`zoo.attention.modules.recurrent`)
are layers of their own. A layer registers with :func:`~zoo.attention.build.factory.register_attention_layer`
(or the ``zoo.attention_layers`` entry-point group) and declares its capabilities once, as class
attributes; a stack refuses it at build time, naming the layers and attentions that would work.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from zoo.attention.contract.base import AttentionOutput, _Capabilities
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext, refuse_hooks_without_context

__all__ = ["AttentionLayer"]


class AttentionLayer(_Capabilities, nn.Module):
    """Base class of attention layers (see the module docstring).

    The capability flags are :class:`~zoo.attention.contract.base.Attention`'s, read the same way (a
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

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A layer whose hooks have the shape before the context is refused (one line naming the
        rename); one that implements no ``attend_cached`` and says nothing does not decode."""
        super().__init_subclass__(**kwargs)
        if "supports_decoding" not in cls.__dict__ and cls.attend_cached is AttentionLayer.attend_cached:
            cls.supports_decoding = False
        refuse_hooks_without_context(cls, "x")

    def forward(self, x: Tensor, context: AttentionContext | None = None) -> AttentionOutput:
        """Attend over ``x`` ``(B, L, embed_dim)`` under ``context`` (None: nothing masked, both
        ways). Returns the output ``(B, L, embed_dim)`` and, if the context asks, the weights
        ``(B, H, L, L)``."""
        context = AttentionContext() if context is None else context
        if not isinstance(context, AttentionContext):
            raise TypeError(
                f"{type(self).__name__} takes (x, context): build the context once a forward with "
                "zoo.AttentionContext.build(batch, length, valid_lens=..., attn_mask=..., is_causal=...); "
                f"got a {type(context).__name__} in its place."
            )
        self.check_request(context)
        return self.attend(x, context)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """The layer's computation on ``x`` under ``context`` (its ``mask`` broadcasts to
        ``(B, 1 or H, L, L)``, True = attend; causality comes as ``context.is_causal``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement attend(x, context).")

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (None before the
        first), causal: the output ``(B, Lq, embed_dim)`` and the cache extended by them. The
        context's mask, if any, broadcasts to ``(B, 1 or H, Lq, L)`` over every position seen."""
        raise NotImplementedError(f"{type(self).__name__} does not decode from a cache.")
