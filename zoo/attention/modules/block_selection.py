"""The base of the layers that pick, per query, which key blocks to attend to: MoBA
(:mod:`zoo.attention.variants.moba`) and Native Sparse Attention (:mod:`zoo.attention.variants.nsa`).

Both are causal (a query picks among the blocks before it), take key padding but no mask that
differs per query (a block is picked from its real keys, the same for every query), may rotate
queries and keys with the stack's rotary scheme before the selection and the cache, and decode
from a :class:`~zoo.attention.contract.cache.KeyValueCache` of every position's keys and values: a new
token picks among the cached blocks as the full forward's query at its position does.

``conv_size`` ``K`` (0 by default: neither paper has one) puts the ``softmax`` layer's short
causal depthwise convolution (Primer's) on the projected queries, keys and values before the
rotation, the selection and the cache, so a key carries its predecessors, as the recurrent
families' do; decoding then keeps each convolution's last ``K - 1`` inputs beside the keys and
values (a :class:`~zoo.attention.contract.cache.ConvolvedCache`). It is what lets one softmax layer
recall on MQAR without first learning a previous-token head (``docs/results/recall.md``, the
previous-token head).

A subclass builds ``q_proj``, ``k_proj`` and ``v_proj`` (keys and values in heads of
``head_dim``), then :meth:`~zoo.attention.modules.convolved.ShortConvolved.add_convolutions`, and implements
:meth:`BlockSelectionLayer.select_attend`; the selection's operations are in
:mod:`zoo.attention.kernels.selection`.
"""

from __future__ import annotations

from torch import Tensor, nn

from zoo.attention.contract.base import AttentionOutput, IncompatibleAttentionError
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.modules.convolved import ShortConvolved
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions import PositionScheme

__all__ = ["BlockSelectionLayer"]


class BlockSelectionLayer(ShortConvolved, AttentionLayer):
    """Base class of the block-selection layers (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Query heads, of ``embed_dim // num_heads`` features each.
        position: The stack's rotary scheme, or None.
        sizes: The subclass's sizes, each refused in one line unless a positive integer.
    """

    supports_bidirectional = False
    supports_query_mask = False
    supports_rotary = True
    supports_position_bias = False
    family = "sparse selection"
    cost = "L²"

    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    q_conv: nn.Conv1d | None
    k_conv: nn.Conv1d | None
    v_conv: nn.Conv1d | None

    def __init__(self, embed_dim: int, num_heads: int, position: PositionScheme | None, **sizes: int) -> None:
        super().__init__()
        self.require_positive(embed_dim=embed_dim, num_heads=num_heads, **sizes)
        name = type(self).__name__
        if embed_dim % num_heads:
            raise ValueError(f"{name}: num_heads ({num_heads}) must divide embed_dim ({embed_dim}).")
        if position is not None and position.kind != "rotary":
            raise IncompatibleAttentionError(f"{name} takes a rotary scheme or none; got a {position.kind} scheme.")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.rotary = None if position is None else position.for_head_dim(self.head_dim)

    def heads(
        self, x: Tensor, offset: int, context: AttentionContext, windows: tuple[Tensor, ...] | None = None
    ) -> tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor, ...] | None]:
        """Queries ``(B, H, L, d)``, keys and values ``(B, heads, L, d)`` (as many heads as the
        projections give), queries and keys rotated at ``offset ..``; and the convolutions'
        windows after ``x`` (continuing ``windows``; None without convolutions)."""
        projected, windows = self.convolved_projections(x, windows, context)
        q, k, v = (t.unflatten(-1, (-1, self.head_dim)).transpose(1, 2) for t in projected)
        rotated = rotate_heads(self.rotary, q, offset, context), rotate_heads(self.rotary, k, offset, context), v
        return rotated, windows

    def select_attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, context: AttentionContext) -> AttentionOutput:
        """New queries ``q`` (of the inputs ``x``, at the last positions) over every key and value
        seen: the output ``(B, Lq, embed_dim)`` and, if the context asks, the weights."""
        raise NotImplementedError(f"{type(self).__name__} must implement select_attend(x, q, k, v, context).")

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        heads, _ = self.heads(x, context.offset, context)
        return self.select_attend(x, *heads, context)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (a
        :class:`~zoo.attention.contract.cache.KeyValueCache` of the keys and values :meth:`heads` gives, in
        a :class:`~zoo.attention.contract.cache.ConvolvedCache` when the layer convolves; None at the
        start), causal: the output and the cache extended. The context's mask, if any, is key
        padding over every position seen, ``(B, 1, 1, L)``."""
        held, windows = self.unwrap_cache(cache, KeyValueCache)
        context = AttentionContext(is_causal=True) if context is None else context
        self.check_request(context)
        (q, k, v), windows = self.heads(x, 0 if held is None else held.length, context, windows)
        held = KeyValueCache(k, v) if held is None else held.extend(k, v)
        output, _ = self.select_attend(x, q, held.keys, held.values, context.replace(need_weights=False))
        return output, ConvolvedCache.wrap(held, windows)
