"""The shared machinery of multi-head attention layers: project, split into heads, run a
registered scoring attention per head, merge.

:class:`HeadedAttention` holds what every multi-head layer shares (projections, head splitting,
mask handling, grouped key/value heads, positions); the registered layers built on it are in
:mod:`zoo.attention.modules.multi_head`. What runs in the heads is one
:class:`~zoo.attention.build.spec.AttentionSpec`: the variant and its arguments, the key/value heads,
the position scheme and the dropout, checked when the spec was built.

Grouped-query attention (Ainslie et al., 2023): with ``num_kv_heads < num_heads`` the keys and
values have fewer heads than the queries, each shared by ``num_heads // num_kv_heads`` query
heads (``num_kv_heads=1`` is multi-query attention). A scoring attention that declares
``supports_grouped_kv`` gets the ``(B, num_kv_heads, Lk, d)`` keys and values as they are
(``dot_product`` hands them to the fused kernel with ``enable_gqa=True``); any other gets them
repeated along the head axis (:meth:`zoo.Attention.forward`). Decoder caches hold the
unexpanded tensors, so they shrink by ``num_heads / num_kv_heads``.

Decoding: :meth:`HeadedAttention.attend_cached` runs new positions after a
:class:`~zoo.attention.contract.cache.KeyValueCache` of the earlier ones' projected keys and values,
or, for a scoring attention whose causal queries read only the latest positions (its
``causal_reach``, a sliding window's width: ``local``; with ``causal_sinks``, also the first
positions every query reads: ``longformer``'s global ones), a
:class:`~zoo.attention.contract.cache.WindowCache` that stops growing there.

Masks and options come in the :class:`~zoo.attention.contract.context.AttentionContext` the model built
once for its forward; the layer hands it to the scoring attention unchanged (with the stack's
bias scheme, when it has one), so nothing is validated or merged per layer.

Positions: a self-attention layer's spec may hold a rotary or bias
:class:`~zoo.positions.PositionScheme`, usually shared by every layer of a stack; cross-attention
never gets one. Keys
are rotated at their positions when projected (:meth:`HeadedAttention.project_kv`, ``offset`` =
positions already cached), so a cache holds them rotated; queries sit at ``Lk - Lq + i``,
aligned bottom-right like causal masks. The rotation's tables are computed once a forward and
shared by every layer of the stack (:meth:`~zoo.attention.contract.context.AttentionContext.memoized`). A
bias scheme is handed to the scoring attention, which adds it to its scores.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from zoo.attention.build.factory import require_attention
from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.base import AttentionOutput, Capabilities, IncompatibleAttentionError, capabilities
from zoo.attention.contract.cache import KeyValueCache, LayerCache, PatternCache, WindowCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions import PositionScheme

__all__ = ["HeadedAttention"]


class HeadedAttention(AttentionLayer):
    """Shared machinery of multi-head layers.

    A stack builds one around the scoring attention it is named by (``stack_layer`` is False: the
    name ``multi_head`` itself is no stack's attention).

    Args:
        embed_dim: Query feature size, and the size of the output.
        num_heads: Number of heads; must divide ``embed_dim`` (and be divisible by the spec's
            ``num_kv_heads``).
        attention: What runs in the heads: an :class:`~zoo.attention.build.spec.AttentionSpec`, or a
            registered name for that variant with its defaults.
        kdim: Key feature size (defaults to ``embed_dim``).
        vdim: Value feature size (defaults to ``embed_dim``).
        bias: Whether the projections have biases.
        head_dim: Features per head; None for ``embed_dim // num_heads``. Given, the queries and
            the heads' outputs are ``num_heads * head_dim`` wide whatever ``embed_dim`` is (the
            output projection maps them back to ``embed_dim``), as Qwen3's and gpt-oss's are.
        v_head_dim: Features per value head, ``d_v``; None for ``head_dim``. Given, the values and
            the heads' outputs are ``d_v`` wide per head (``o_i = sum_j a_ij v_j``, ``v_j`` of
            ``d_v``) while queries and keys stay ``head_dim``; the output projection reads
            ``num_heads * d_v`` features (MiMo-V2-Flash: query/key heads of 192, value heads of 128).
    """

    stack_layer = False
    #: a multi-head layer attends over another sequence when its scoring attention can (the
    #: instance's flag says whether it does)
    supports_cross_attention = True

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        attention: AttentionSpec | str = "dot_product",
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        head_dim: int | None = None,
        v_head_dim: int | None = None,
    ) -> None:
        super().__init__()
        if isinstance(attention, str):  # a name is refused as the heads' attention, not a stack's
            require_attention(attention, role="an attention layer (per-head scoring)")
        spec = AttentionSpec(attention) if isinstance(attention, str) else attention
        if spec.is_layer:
            raise IncompatibleAttentionError(
                f"{spec.name!r} is an attention layer with projections of its own, not a scoring attention a "
                "multi-head layer runs per head: build it with zoo.create_attention, or in a block through "
                "zoo.attention.self_attention_layer."
            )
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive; got {embed_dim} and {num_heads}.")
        if head_dim is not None and (not isinstance(head_dim, int) or head_dim <= 0):
            raise ValueError(
                f"head_dim must be a positive integer or None; got {head_dim!r}. Pass None for embed_dim // num_heads."
            )
        if head_dim is None and embed_dim % num_heads:
            divisors = [h for h in range(1, embed_dim + 1) if embed_dim % h == 0 and h <= 64]
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}); "
                f"head counts that divide it: {divisors}."
            )
        if v_head_dim is not None and (not isinstance(v_head_dim, int) or v_head_dim <= 0):
            raise ValueError(
                f"v_head_dim must be a positive integer or None; got {v_head_dim!r}. Pass None for head_dim."
            )
        num_kv_heads = num_heads if spec.num_kv_heads is None else spec.num_kv_heads
        if num_heads % num_kv_heads:
            divisors = [h for h in range(1, num_heads + 1) if num_heads % h == 0]
            raise ValueError(
                f"num_kv_heads must be a positive divisor of num_heads ({num_heads}); got {num_kv_heads!r}. "
                f"Choose one of {divisors} (1 is multi-query attention, {num_heads} standard multi-head)."
            )
        self.spec = spec
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads if head_dim is None else head_dim
        self.v_head_dim = self.head_dim if v_head_dim is None else v_head_dim
        self.num_kv_heads = num_kv_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.score_attention = spec.build(self.head_dim, num_heads)
        self.position = None if spec.position is None else spec.position.for_head_dim(self.head_dim)
        inner_dim, kv_dim = num_heads * self.head_dim, num_kv_heads * self.head_dim
        if self.v_head_dim != self.head_dim and not self.score_attention.reads_keys:
            raise ValueError(
                f"v_head_dim ({self.v_head_dim}) differs from head_dim ({self.head_dim}), but {spec.name!r} reads no "
                "keys and scores its values in their place; leave v_head_dim out."
            )
        # No projection the per-head attention never reads: every parameter then gets a gradient,
        # so multi-process DDP needs no find_unused_parameters (Hugging Face's shared-QK Reformer
        # layer likewise has only a query-key and a value projection).
        reads = self.score_attention
        self.q_proj = nn.Linear(embed_dim, inner_dim, bias=bias) if reads.reads_queries else None
        self.k_proj = nn.Linear(self.kdim, kv_dim, bias=bias) if reads.reads_keys else None
        self.v_proj = nn.Linear(self.vdim, num_kv_heads * self.v_head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * self.v_head_dim, embed_dim, bias=bias)

    @property
    def capabilities(self) -> Capabilities:
        """What both the heads and the layer's class serve (a linformer layer is not causal; a
        softmax layer declares that it takes one sequence)."""
        return capabilities(self.score_attention) & super().capabilities

    @property
    def rotary(self) -> PositionScheme | None:
        """The stack's rotary scheme (queries and keys are rotated here), or None."""
        return self.position if self.position is not None and self.position.kind == "rotary" else None

    @property
    def bias_scheme(self) -> PositionScheme | None:
        """The stack's bias scheme (handed to the heads with the context), or None."""
        return self.position if self.position is not None and self.position.kind == "bias" else None

    @property
    def attention_name(self) -> str:
        """The registered name of the scoring attention in the heads."""
        return self.spec.name

    def _split_heads(self, x: Tensor) -> Tensor:
        # (B, L, heads * d) -> (B, heads, L, d)
        return x.unflatten(-1, (-1, self.head_dim)).transpose(1, 2)

    def _split_values(self, x: Tensor) -> Tensor:
        # (B, L, heads * d_v) -> (B, heads, L, d_v)
        return x.unflatten(-1, (-1, self.v_head_dim)).transpose(1, 2)

    def _check(self, queries: Tensor, keys: Tensor, values: Tensor) -> None:
        name = type(self).__name__
        for label, tensor, size in (
            ("queries", queries, self.embed_dim),
            ("keys", keys, self.kdim),
            ("values", values, self.vdim),
        ):
            if not isinstance(tensor, Tensor) or tensor.dim() != 3:
                shape = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
                raise ValueError(f"{name}: {label} must have shape (batch, length, {size}); got {shape}.")
            if tensor.shape[-1] != size:
                raise ValueError(
                    f"{name}: {label} must have {size} features; got {tensor.shape[-1]} (shape {tuple(tensor.shape)})."
                )
        if not queries.shape[0] == keys.shape[0] == values.shape[0]:
            raise ValueError(
                f"{name}: batch sizes differ: queries {queries.shape[0]}, keys {keys.shape[0]}, values {values.shape[0]}."
            )
        if keys.shape[1] != values.shape[1]:
            raise ValueError(
                f"{name}: keys and values must have the same length; got {keys.shape[1]} and {values.shape[1]}."
            )

    def project_kv(
        self, keys: Tensor, values: Tensor, *, offset: int = 0, context: AttentionContext | None = None
    ) -> tuple[Tensor, Tensor]:
        """Keys and values projected and split into heads: two ``(B, num_kv_heads, Lk, d)`` tensors.

        Decoders cache these: the projections of earlier positions never change, so each step
        projects only its new position (and cross-attention projects the memory once). With a
        rotary scheme the keys are rotated at positions ``offset ..`` (``offset``: how many
        positions the cache already holds), with the tables of the forward's ``context``.
        """
        v = self._split_values(self.v_proj(values))
        if self.k_proj is None:  # an attention that reads no keys gets the values in their place: same shape
            return v, v
        return rotate_heads(self.rotary, self._split_heads(self.k_proj(keys)), offset, context), v

    def attend_projected(
        self, queries: Tensor, k: Tensor, v: Tensor, context: AttentionContext, *, query_offset: int | None = None
    ) -> AttentionOutput:
        """Attend from ``queries`` ``(B, Lq, embed_dim)`` over already projected ``k``, ``v``.

        ``k`` and ``v`` are ``(B, num_kv_heads, Lk, d)``, as :meth:`project_kv` returns them; the
        context's mask broadcasts to ``(B, H, Lq, Lk)``. Causal masks align bottom-right, so a
        single new query (``Lq = 1``) sees every cached position. So do positions: query ``i``
        sits at ``Lk - Lq + i``, or at ``query_offset + i`` where the keys are the latest ones only.
        """
        offset = k.shape[-2] - queries.shape[1] if query_offset is None else query_offset
        q = self._queries(queries, offset, context)
        heads, weights = self.score_attention(q, k, v, context=context.with_position_bias(self.bias_scheme))
        return AttentionOutput(self._merge(heads), weights)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """Causal self-attention of new positions ``x`` ``(B, Lq, embed_dim)`` after those in
        ``cache`` (None before the first call): the output ``(B, Lq, embed_dim)`` and the
        :class:`~zoo.attention.contract.cache.KeyValueCache` extended by them, or for a scoring
        attention with a ``causal_reach`` of ``w`` a
        :class:`~zoo.attention.contract.cache.WindowCache` of the last ``w - 1`` positions (and of
        the first ``causal_sinks``, where it declares them).

        Positions continue the cache's: a rotary scheme rotates the new queries and keys at
        ``cache.length ..``. The context (causal) may hold a mask broadcastable to
        ``(B, H, Lq, L)`` over all positions seen (the padding of left-padded prompts).
        """
        if (keeps := getattr(self.score_attention, "causal_keeps", None)) is not None:
            return self._attend_pattern_cached(x, cache, context, keeps)
        reach_back: int | None = getattr(self.score_attention, "causal_reach", None)
        sinks: int = getattr(self.score_attention, "causal_sinks", 0)
        expected = KeyValueCache if reach_back is None else WindowCache
        if cache is not None and not isinstance(cache, expected):
            raise TypeError(f"{type(self).__name__} continues a {expected.__name__}; got a {type(cache).__name__}.")
        context = AttentionContext(is_causal=True) if context is None else context
        offset = 0 if cache is None else cache.length
        k, v = self.project_kv(x, x, offset=offset, context=context)
        if reach_back is None:
            cache = reach = KeyValueCache(k, v) if cache is None else cache.extend(k, v)
        else:
            held = WindowCache(k[..., :0, :], v[..., :0, :], 0, sinks, reach_back) if cache is None else cache
            reach = held.extend(k, v)
            cache = reach.trimmed()
            if context.mask is not None:  # over every position seen; the keys are the latest ones
                context = context.replace(mask=context.mask[..., -reach.keys.shape[-2] :])
        output, _ = self.attend_projected(x, reach.keys, reach.values, context, query_offset=offset)
        return output, cache

    def _attend_pattern_cached(
        self,
        x: Tensor,
        cache: LayerCache | None,
        context: AttentionContext | None,
        keeps: Callable[[Tensor, int], Tensor],
    ) -> tuple[Tensor, LayerCache]:
        """:meth:`attend_cached` for a sparse pattern that states what its later queries read
        (``causal_keeps``): a :class:`~zoo.attention.contract.cache.PatternCache` of those
        positions alone, read at their positions once it has dropped any."""
        if cache is not None and not isinstance(cache, PatternCache):
            raise TypeError(f"{type(self).__name__} continues a PatternCache; got a {type(cache).__name__}.")
        context = AttentionContext(is_causal=True) if context is None else context
        offset = 0 if cache is None else cache.length
        k, v = self.project_kv(x, x, offset=offset, context=context)
        held = (
            PatternCache(k[..., :0, :], v[..., :0, :], torch.arange(0, device=k.device), 0) if cache is None else cache
        )
        reach = held.extend(k, v)
        if reach.contiguous:
            output = self.attend_projected(x, reach.keys, reach.values, context).output
        else:
            if context.mask is not None:  # over every position seen
                context = context.replace(mask=context.mask[..., reach.positions])
            query_pos = torch.arange(offset, reach.length, device=k.device)
            q = self._queries(x, offset, context)
            output = self._merge(
                self.score_attention.attend_at(q, reach.keys, reach.values, query_pos, reach.positions, context)
            )
        return output, reach.kept(keeps(reach.positions, reach.length))

    def _queries(self, queries: Tensor, offset: int, context: AttentionContext | None) -> Tensor:
        """Queries projected, split into heads ``(B, H, Lq, d)`` and rotated at ``offset ..``."""
        projected = queries if self.q_proj is None else self.q_proj(queries)  # unread: only its shape counts
        return rotate_heads(self.rotary, self._split_heads(projected), offset, context)

    def _merge(self, heads: Tensor) -> Tensor:
        """Heads ``(B, H, Lq, d)`` merged and projected back to ``(B, Lq, embed_dim)``."""
        return self.out_proj(heads.transpose(1, 2).flatten(-2))

    def extra_repr(self) -> str:
        grouped = f", num_kv_heads={self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        if self.head_dim * self.num_heads != self.embed_dim:
            grouped += f", head_dim={self.head_dim}"
        if self.v_head_dim != self.head_dim:
            grouped += f", v_head_dim={self.v_head_dim}"
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}{grouped}, attention={self.spec.describe()!r}"
