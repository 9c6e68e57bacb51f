"""The ``softmax`` layer reading another layer's keys and values (``kv_source``): Gemma 4's KV sharing.

A layer built with ``kv_source=s`` has no ``k_proj``, ``v_proj`` or key norm. Per head, with its
input ``x_i`` and the keys ``K_s`` and values ``V_s`` that layer ``s`` attended over in the same
forward (after ``s``'s key norm, rotation, value norm and value scale):

    q_i = rot_i(norm_q(W_q x_i)),   o_i = sum_j softmax_j(scale * q_i . k_j + mask_ij) v_j,   k_j, v_j in K_s, V_s,

its own queries, query norm, rotation (at its positions), scale, window mask, sinks and gate, as
transformers' ``Gemma4TextAttention`` computes a ``"reuse"`` layer (it takes ``shared_kv_states``
of the last earlier layer of its type, which the zoo's stack resolves:
:mod:`zoo.attention.build.kv_sources`). Layer ``s`` hands them on through the forward's
:class:`~zoo.attention.contract.kv_sharing.KeyValueStore`; when decoding, what it hands on is its
cache extended by the new positions (a window layer's: what its window reaches, at their
positions), so the reader keeps a :class:`~zoo.attention.contract.kv_sharing.SharedCache` of no bytes.

Saved per reading layer: ``k_proj`` and ``v_proj`` (``2 * embed_dim * num_kv_heads * head_dim``
weights, plus biases) and the key norm; when decoding, its cache (``2 * num_kv_heads * head_dim``
numbers per position held). Its queries and output projection cost what they cost before.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.kv_sharing import SharedCache

__all__ = ["SHARING_HOOKS", "SharesKeyValues"]

#: the methods through which the ``softmax`` layer computes, hands on and reads keys and values
SHARING_HOOKS = ("attend", "attend_cached", "attend_positions", "project_kv", "_kv_heads", "_projected")


class SharesKeyValues:
    """The ``softmax`` layer's part that reads another layer's keys and values (``kv_source``), and
    keeps ``supports_kv_sharing`` honest: a subclass that overrides one of :data:`SHARING_HOOKS`
    (the Forgetting Transformer's decays, DeltaFormer's written values) computes keys, values or
    caches its own way, so it neither reads nor hands on shared ones unless it declares
    ``supports_kv_sharing`` itself. The layer provides ``attend_positions``."""

    supports_kv_sharing = False
    #: the layer whose keys and values this one reads; None: its own
    kv_source: int | None
    #: the layer's place in its stack, under which it hands on its keys and values
    layer_index: int | None
    attend_positions: Any

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "supports_kv_sharing" not in cls.__dict__ and any(hook in cls.__dict__ for hook in SHARING_HOOKS):
            cls.supports_kv_sharing = False

    def attend_shared(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """The output for ``x`` ``(B, Lq, embed_dim)``, the last ``Lq`` positions the source has
        seen, over the keys and values the source attended over in this forward."""
        shared = context.shared_kv(self.kv_source, self._reader)
        return self.attend_positions(
            x, shared.keys, shared.values, context, first=shared.length - x.shape[1], key_positions=shared.positions
        )

    def attend_shared_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None
    ) -> tuple[Tensor, SharedCache]:
        """A decoding step: new positions ``x`` over the source's cache, extended by them in this
        step; the cache kept is a count of positions (``cache``: this layer's, None at the start)."""
        if cache is not None and not isinstance(cache, SharedCache):
            raise TypeError(f"{self._reader} continues a SharedCache; got a {type(cache).__name__}.")
        context = AttentionContext(is_causal=True) if context is None else context
        output, _ = self.attend_shared(x, context)
        return output, SharedCache(context.shared_kv(self.kv_source, self._reader).length, self.kv_source)

    @property
    def _reader(self) -> str:
        """The layer as errors name it."""
        where = "" if self.layer_index is None else f" at layer index {self.layer_index}"
        return f"{type(self).__name__}{where} (kv_source={self.kv_source})"
