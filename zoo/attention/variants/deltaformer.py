"""DeltaFormer (Zhong, Xu, Ao and Shi, 2025, "Understanding Transformer from the Perspective of
Associative Memory", arXiv 2505.19488): softmax attention over values corrected by the
delta rule, with a softmax kernel in both places.

Per key/value head, with keys ``k_j``, values ``v_j``, a write strength ``beta_i`` in ``(0, 1)``
and queries ``q_i``:

    u_i = v_i - beta_i sum_{j < i} softmax_j(k_i . k_j / sqrt(d)) u_j
    o_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d)) u_j

Linear attention's memory ``sum_j v_j k_j^T`` with the delta rule writes ``u_i``, what ``v_i``
adds beyond what the memory already returns for ``k_i`` (DeltaNet's dual form); DeltaFormer keeps
that write and reads with the exponential kernel of softmax attention instead of a dot product,
so the memory is unbounded in size; the paper's argument is that the delta-rule write takes it
beyond the TC0 class that softmax attention is confined to (state tracking, as DeltaNet's). The ``u`` are
:mod:`zoo.attention.kernels.corrected_values`' (a triangular solve, chunk by chunk for
``chunk_size``; one position at a time when decoding), the read is the ``softmax`` layer's,
with ``u`` as its values, so the options of that layer (QK-norm, rotary positions, the output
gate, sinks, grouped key/value heads, ``conv_size``) apply to the read as they are.

Reference code: flash-linear-attention's ``fla/layers/deltaformer.py`` over
``fla/ops/deltaformer`` (``naive.py``: the per-position loop). Departures, each written once here:

* the write reads with the keys, ``softmax(k_i . k_j)``, as the paper's equations and the
  delta rule do (the key a value is written under is the one its old value is read with);
  fla's kernels are called with the queries (``softmax(q_i . k_j)``; its pull request notes
  that the paper's key-key form is one argument away);
* ``beta = sigmoid(W_b x + b)``, one per key/value head, in ``(0, 1)`` as DeltaNet's; fla's layer
  passes the projection unbounded (its tests draw ``beta`` through a sigmoid);
* fla's layer always rotates queries and keys (RoPE, its model's only positions); here positions
  are the stack's, as for every softmax layer.

Causal only. A padded position is read by neither stage, so it changes no visible ``u`` or output;
the ``u`` are shared by every query, so a mask must hide a position from every query alike
(``supports_query_mask = False``). Decoding keeps a
:class:`~zoo.attention.contract.cache.KeyValueCache` whose values are the ``u`` (and the
convolutions' windows beside it when the layer convolves): a new position needs the earlier keys
and ``u`` only.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.corrected_values import corrected_values, corrected_values_recurrent
from zoo.attention.variants.softmax import SoftmaxAttention
from zoo.attention.variants.softmax_options import SoftmaxOptions

__all__ = ["DeltaFormer"]


@register_attention_layer("deltaformer", aliases=("delta_former",))
class DeltaFormer(SoftmaxAttention):
    """Softmax attention over delta-corrected values (see the module docstring).

    Args:
        embed_dim, num_heads: The stack's width and heads (it fills them).
        chunk_size: Positions per triangular solve of the ``u`` in the full forward; None: one
            solve over the whole sequence.
        options: ``qk_norm``, ``gate``, ``sinks`` and ``conv_size`` as the ``softmax`` layer's;
            ``num_kv_heads``, ``dropout``, ``position`` and ``bias``, the stack's (it fills them).

    Parameters besides the ``softmax`` layer's: ``beta_proj`` (``embed_dim -> num_kv_heads``, with
    a bias), the write strengths' logits.
    """

    family = "softmax"
    cost = "L²"

    supports_bidirectional = False
    supports_query_mask = False

    def __init__(
        self, embed_dim: int, num_heads: int, *, chunk_size: int | None = 64, **options: Unpack[SoftmaxOptions]
    ) -> None:
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
            name = type(self).__name__
            raise ValueError(f"{name}: chunk_size must be a positive integer or None (one solve); got {chunk_size!r}.")
        super().__init__(embed_dim, num_heads, **options)
        self.beta_proj = nn.Linear(embed_dim, self.num_kv_heads)
        self.chunk_size = chunk_size

    def write_strengths(self, x: Tensor) -> Tensor:
        """``beta`` ``(B, num_kv_heads, T)`` in ``(0, 1)`` at the positions of ``x``."""
        return torch.sigmoid(self.beta_proj(x)).transpose(1, 2)

    @staticmethod
    def visible_keys(context: AttentionContext) -> Tensor | None:
        """The context's key padding as ``(B, 1, 1, Lk)`` (True at real keys); None: every key."""
        padding = context.key_padding
        return None if padding is None else padding.all(dim=1)[:, None, None, :]

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """``x`` ``(B, L, embed_dim)`` over itself, causally: the ``u`` chunk by chunk, then the read."""
        q, k, v, _ = self._projected(x, context, None, context.offset)
        u = corrected_values(
            k, k, v, self.write_strengths(x), scale=1.0 / math.sqrt(self.head_dim),
            visible=self.visible_keys(context), chunk_size=self.chunk_size,
        )  # fmt: skip
        return self.attend_positions(x, k, u, context, first=0, projected_queries=q)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions after a :class:`~zoo.attention.contract.cache.KeyValueCache` of the
        earlier keys and ``u`` (in a :class:`~zoo.attention.contract.cache.ConvolvedCache` with the
        convolutions' windows when the layer convolves): the ``u`` one position at a time."""
        held, windows = self.unwrap_cache(cache, KeyValueCache)
        context = AttentionContext(is_causal=True) if context is None else context
        seen = 0 if held is None else held.length
        q, k, v, windows = self._projected(x, context, windows, seen)
        keys = k if held is None else torch.cat([held.keys, k], dim=-2)
        u = corrected_values_recurrent(
            k, keys, v, self.write_strengths(x), scale=1.0 / math.sqrt(self.head_dim),
            earlier=None if held is None else held.values, visible=self.visible_keys(context),
        )  # fmt: skip
        held = KeyValueCache(k, u) if held is None else held.extend(k, u)
        output, _ = self.attend_positions(x, held.keys, held.values, context, first=seen, projected_queries=q)
        return output, ConvolvedCache.wrap(held, windows)

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.chunk_size is None else f", chunk_size={self.chunk_size}")
