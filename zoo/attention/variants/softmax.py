"""Softmax attention with the options of 2024-2025 models: ``softmax`` and its named recipes.

One layer, :class:`SoftmaxAttention`, is the multi-head self-attention layer (``self`` over
``dot_product``: the same projections, grouped key/value heads, rotary or bias positions and
key/value cache) with four options that combine freely, each from the paper or model that made
it common. Per head, with queries ``q_i``, keys ``k_j`` and values ``v_j`` of ``d`` features and
the layer's input ``x_i``:

* ``qk_norm``: ``q_i <- RMSNorm(q_i)``, ``k_j <- RMSNorm(k_j)`` over each head's ``d`` features,
  a learned scale of ``d`` shared by the heads, before the rotation (Qwen3, Gemma 3; Dehghani et
  al., 2023): it bounds the logits. OLMo 2 normalizes all heads at once, before splitting: not this.
* ``gate`` (Qiu et al., 2025, "Gated Attention for Large Language Models"): each head's output
  is multiplied by ``sigmoid(x_i W_g)`` before the output projection, the paper's best position
  (after the attention, "G1"): ``"elementwise"``, one gate per output feature (``W_g`` is
  ``embed_dim x embed_dim``), or ``"headwise"``, one per head (``embed_dim x H``). It is
  query-dependent and sparse, so a head can output nothing instead of dumping its weight on the
  first token; Qwen3-Next uses the elementwise gate with QK-norm. The gate's projection has a
  bias when the stack's projections do (Qwen3-Next folds it into the query projection, without).
* ``sinks`` (gpt-oss; Xiao et al., 2023, "attention sinks"): a learned logit ``s_h`` per head
  that enters the softmax's denominator only,
  ``a_ij = exp(z_ij) / (exp(s_h) + sum_l exp(z_il))``, so a query may put weight on no key (its
  output then shrinks towards zero). It starts at 0 here (gpt-oss's are loaded from its
  checkpoint); the weights then sum to less than one (``normalized_weights`` is False).
* ``window`` ``W`` with ``sink_tokens`` ``S``: query ``i`` sees key ``j`` when ``|i - j| < W``
  (causal: ``j <= i``, the last ``W`` positions, gpt-oss's and Mistral's sliding window) or
  ``j < S``, the first positions, which StreamingLLM (Xiao et al., 2023) keeps when decoding
  past the window because trained models park weight there. Decoding keeps exactly those in a
  :class:`~zoo.attention.contract.cache.WindowCache` (``S + W - 1`` positions at most), the full
  forward masks the same pairs, and a key keeps the position it was rotated at (gpt-oss's and
  Mistral's rolling caches; StreamingLLM renumbers). ``S = 0``: a plain sliding window.

* ``conv_size`` ``K`` (So et al., 2021, Primer's "Multi-DConv-Head Attention"): a short causal
  depthwise convolution over the last ``K`` positions on each projected query, key and value
  channel, ``q_i <- sum_{r<K} w_r * q_{i-r}`` (the same for ``k`` and ``v``, each with its own
  filters; no bias, no activation), after the projections and before QK-norm and the rotation.
  It gives attention what the recurrent families' short convolutions give them (kernel 4, as fla's
  and Zoology's): a value's key also carries the key before it, so one layer does associative
  recall without first learning a previous-token head (``docs/results/recall.md``). Causal in a
  bidirectional stack too; padded positions enter as zeros; decoding keeps the last ``K - 1``
  projections in a :class:`~zoo.attention.contract.cache.ConvolvedCache`.

* ``scale``: ``z_ij = scale * q_i . k_j``; None (default): ``d ** -0.5``. Gemma 3 27B scales by
  ``query_pre_attn_scalar ** -0.5`` (168) beside heads of 128; it runs as sinks and windows do.
* ``v_head_dim`` ``d_v`` and ``value_scale`` ``c``: value heads of ``d_v`` features beside queries
  and keys of ``d``, and ``v_j <- c * v_j`` after the projection (and convolution), so
  ``o_i = c * sum_j a_ij v_j``; None (default): ``d_v = d``, no factor. MiMo-V2-Flash: ``d`` 192,
  ``d_v`` 128, ``c`` 0.707 (``sqrt(embed_dim / (H d_v))``, its ``attention_value_scale``).
* ``values`` and ``v_norm`` (Gemma 4): ``values="keys"`` drops the value projection and reads the
  key projection's output as the values, ``v_j = W_k x_j``, taken before QK-norm and the rotation
  (Gemma 4's global layers, its ``attention_k_eq_v``); ``v_norm`` normalizes each value head with
  RMSNorm without a learned scale, ``v_j <- v_j / sqrt(mean(v_j^2) + eps)`` (before ``c``).
  Defaults: ``"projected"`` (``v_j = W_v x_j``) and no norm.
* ``kv_source`` ``s`` (Gemma 4's KV sharing, :mod:`~zoo.attention.variants.softmax_sharing`): no key or
  value projection; the layer's own queries attend over the keys and values layer ``s`` attended
  over, ``o_i = softmax(q_i K_s^T) V_s``; when decoding it reads layer ``s``'s cache, keeping none.

* ``scores`` (x-transformers' way of giving every option to every attention): the registered
  scoring attention each head runs, ``dot_product`` (softmax) by default; ``sigmoid``,
  ``softpick``, ``stick_breaking`` or any other then get QK-norm, the gate and the convolution
  as they are (``{name: softmax, scores: sigmoid, conv_size: 4}``). Sinks and windows are
  softmax's denominator and mask over dot products, so they take ``dot_product`` only.

The registered names are this layer with other defaults (:mod:`~zoo.attention.variants.softmax_recipes`):
``softmax`` (none on), ``qk_norm``, ``gated_attention`` (elementwise gate), ``sink_attention``
(learned sinks) and ``streaming`` (a window of 128 with the first 4 positions). Qwen3-Next's attention
is ``{name: gated_attention, qk_norm: true}``; gpt-oss's ``{name: sink_attention, window: 128}``.

Kernels: the heads run ``dot_product``'s fused kernel, sinks and windows too (:mod:`zoo.attention.kernels.window`:
a sink as one more key, a window blockwise in ``O(L (W + S))``); ``need_weights`` takes the explicit form.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer, require_attention
from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.base import AttentionOutput, Capabilities
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache, LayerCache, WindowCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.sdpa import repeat_kv_heads
from zoo.attention.kernels.window import softmax_heads, visible_keys, window_blocks
from zoo.attention.modules.convolved import ShortConvolved
from zoo.attention.modules.multi_head import SelfAttention
from zoo.attention.modules.rotation import rotate_heads
from zoo.attention.variants.dot_product import DotProductAttention
from zoo.attention.variants.softmax_options import NORM_EPS, Gate, ValueSource, check_options, describe_options
from zoo.attention.variants.softmax_sharing import SharesKeyValues
from zoo.positions import PositionScheme

__all__ = ["SoftmaxAttention"]


@register_attention_layer("softmax", aliases=("softmax_attention",))
class SoftmaxAttention(SharesKeyValues, ShortConvolved, SelfAttention):
    """Multi-head softmax self-attention with QK-norm, an output gate, learned sinks and a sliding
    window (see the module docstring).

    Args:
        embed_dim: The block's width (the stack fills it).
        num_heads: Query heads (the stack fills it).
        qk_norm: RMSNorm on each head's queries and keys, with learned scales.
        gate: ``"elementwise"`` or ``"headwise"``: a sigmoid gate of the layer's input on the
            heads' outputs; None for none.
        sinks: A learned logit per head in the softmax's denominator.
        window: Keys within this many positions of the query (itself included); None for all.
        sink_tokens: With a window: the first positions every query sees too (StreamingLLM's 4).
        conv_size: Kernel of a short causal depthwise convolution on the projected queries, keys
            and values (Primer's; 4 as the recurrent families'); 0 for none.
        scores: The registered scoring attention each head runs (its defaults); ``dot_product``,
            softmax over scaled dot products, unless another is named. Sinks and windows need it.
        num_kv_heads: Key/value heads (grouped-query attention); the stack gives the model's.
        dropout: Dropout on the weights; the stack gives the model's attention dropout.
        position: The stack's rotary or bias scheme.
        bias: Whether the projections (and the gate's) have biases.
        head_dim: Features per head; None for ``embed_dim // num_heads`` (Qwen3-Next: 16 heads of
            256 beside 2048; gpt-oss: 64 of 64 beside 2880).
        scale: The factor on the dot products; None for ``head_dim ** -0.5``. Dot-product scores only.
        v_head_dim: Features per value head (and per head's output); None for ``head_dim``.
        value_scale: A factor on the values before the heads read them; None for none.
        values: ``"projected"``: the values' own projection ``v_proj``; ``"keys"``: the key
            projection's output (before QK-norm and the rotation), with no ``v_proj``.
        v_norm: RMSNorm without a learned scale on each value head.
        kv_source: The ``layer_index`` of an earlier layer whose keys and values this one reads; None: its own.
        layer_index: The layer's place in its stack (the stack fills it), under which it hands on
            its keys and values to layers that read them.

    Parameters besides ``self``'s projections: ``q_norm``, ``k_norm``, ``gate_proj``, ``sinks``,
    ``q_conv``, ``k_conv``, ``v_conv`` (depthwise ``nn.Conv1d`` filters of ``conv_size``); with
    ``values="keys"``, no ``v_proj``; with ``kv_source``, no ``k_proj``, ``v_proj`` or ``k_norm``.
    """

    family = "softmax"
    cost = "L²"

    stack_layer = True
    supports_rotary = True
    supports_position_bias = True
    #: a self-attention layer: a decoder's cross-attention takes a scoring attention (``dot_product``)
    supports_cross_attention = False
    #: reads and hands on keys and values across layers (``kv_source``; subclasses: :class:`SharesKeyValues`)
    supports_kv_sharing = True

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        qk_norm: bool = False,
        gate: Gate | None = None,
        sinks: bool = False,
        window: int | None = None,
        sink_tokens: int = 4,
        conv_size: int = 0,
        scores: str = "dot_product",
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        position: PositionScheme | None = None,
        bias: bool = True,
        head_dim: int | None = None,
        scale: float | None = None,
        v_head_dim: int | None = None,
        value_scale: float | None = None,
        values: ValueSource = "projected",
        v_norm: bool = False,
        kv_source: int | None = None,
        layer_index: int | None = None,
    ) -> None:
        name = type(self).__name__
        require_attention(scores, role=f"the heads of {name} (its scores)")
        spec = AttentionSpec(scores, {}, num_kv_heads, position, dropout)
        super().__init__(embed_dim, num_heads, spec, bias=bias, head_dim=head_dim, v_head_dim=v_head_dim)
        self.scores = scores
        check_options(
            name, dot_products=type(self.score_attention) is DotProductAttention, reads_keys=self.k_proj is not None,
            scores=scores, gate=gate, sinks=sinks, window=window, sink_tokens=sink_tokens, conv_size=conv_size,
            scale=scale, value_scale=value_scale, values=values, v_head_dim=self.v_head_dim, head_dim=self.head_dim,
            v_norm=v_norm, kv_source=kv_source,
        )  # fmt: skip
        self.kv_source, self.layer_index = kv_source, layer_index
        self.q_norm = nn.RMSNorm(self.head_dim, eps=NORM_EPS) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=NORM_EPS) if qk_norm and kv_source is None else None
        self.gate = gate
        self.gate_proj = (
            None
            if gate is None
            else nn.Linear(embed_dim, num_heads * self.v_head_dim if gate == "elementwise" else num_heads, bias=bias)
        )
        self.sinks = nn.Parameter(torch.zeros(num_heads)) if sinks else None
        self.add_convolutions(conv_size)
        self.window = window
        self.sink_tokens = sink_tokens if window is not None else 0
        self.scale = scale
        self.value_scale = value_scale
        self.values = values
        if values == "keys" or kv_source is not None:
            self.v_proj = None  # the key projection gives the values, or layer ``kv_source``'s are read
        if kv_source is not None:
            self.k_proj = None
        self.v_norm = nn.RMSNorm(self.v_head_dim, eps=NORM_EPS, elementwise_affine=False) if v_norm else None

    @property
    def capabilities(self) -> Capabilities:
        """The layer's; with sinks, weights that sum to less than one (some weight goes to no key)."""
        declared = super().capabilities
        return replace(declared, normalized_weights=False) if self.sinks is not None else declared

    # -- projections: QK-norm before the rotation ---------------------------------------------------

    def _queries(self, queries: Tensor, offset: int, context: AttentionContext | None) -> Tensor:
        """Queries projected, split into heads, normalized (QK-norm) and rotated at ``offset ..``."""
        return self._query_heads(self.q_proj(queries), offset, context)

    def _query_heads(self, projected: Tensor, offset: int, context: AttentionContext | None) -> Tensor:
        """Projected queries split into heads, normalized (QK-norm) and rotated at ``offset ..``."""
        return rotate_heads(self.rotary, self._normed(self.q_norm, self._split_heads(projected)), offset, context)

    def project_kv(
        self, keys: Tensor, values: Tensor, *, offset: int = 0, context: AttentionContext | None = None
    ) -> tuple[Tensor, Tensor]:
        """Keys (normalized, then rotated at ``offset ..``) and values, split into heads; with
        ``values="keys"`` the values are the projected ``keys``."""
        projected = self.k_proj(keys)
        return self._kv_heads(projected, projected if self.v_proj is None else self.v_proj(values), offset, context)

    def _kv_heads(
        self, keys: Tensor, values: Tensor, offset: int, context: AttentionContext | None
    ) -> tuple[Tensor, Tensor]:
        """Projected keys (split into heads, normalized, rotated at ``offset ..``) and values (split
        into heads, normalized with ``v_norm``, times ``value_scale``)."""
        k = rotate_heads(self.rotary, self._normed(self.k_norm, self._split_heads(keys)), offset, context)
        v = self._normed(self.v_norm, self._split_values(values))
        return k, v if self.value_scale is None else v * self.value_scale

    def _projected(
        self, x: Tensor, context: AttentionContext, windows: tuple[Tensor, ...] | None, offset: int
    ) -> tuple[Tensor | None, Tensor, Tensor, tuple[Tensor, ...] | None]:
        """What ``x`` ``(B, T, embed_dim)`` at positions ``offset ..`` writes and asks: its queries
        when the layer convolves them (projected and convolved; None: :meth:`attend_positions`
        projects them), its keys (normalized, rotated) and values in heads, and the convolutions'
        windows after ``x`` (continuing ``windows``; None without convolutions)."""
        if not self.convolves:
            return None, *self.project_kv(x, x, offset=offset, context=context), None
        (q, k, v), windows = self.convolved_projections(x, windows, context)
        return q, *self._kv_heads(k, v, offset, context), windows

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """``x`` ``(B, L, embed_dim)`` over itself under the forward's ``context`` (a sequence's
        start when the layer convolves)."""
        if self.kv_source is not None:
            return self.attend_shared(x, context)
        if not self.convolves:
            return super().attend(x, context)
        q, k, v, _ = self._projected(x, context, None, context.offset)
        return self.attend_positions(x, k, v, context, first=0, projected_queries=q)

    @staticmethod
    def _normed(norm: nn.Module | None, heads: Tensor) -> Tensor:
        return heads if norm is None else norm(heads)

    # -- the heads, the gate, the output -------------------------------------------------------------

    def attend_projected(self, queries: Tensor, k: Tensor, v: Tensor, context: AttentionContext) -> AttentionOutput:
        """``queries`` (the layer's input) over keys and values at positions ``0 .. Lk - 1``."""
        return self.attend_positions(queries, k, v, context, first=k.shape[-2] - queries.shape[1])

    def attend_positions(
        self,
        x: Tensor,
        k: Tensor,
        v: Tensor,
        context: AttentionContext,
        *,
        first: int,
        key_positions: Tensor | None = None,
        logits: Tensor | None = None,
        projected_queries: Tensor | None = None,
        sees_every_key: bool = False,
    ) -> AttentionOutput:
        """The layer's input ``x`` ``(B, Lq, embed_dim)`` at positions ``first ..`` over projected
        ``k``, ``v`` ``(B, num_kv_heads, Lk, d)`` at ``key_positions`` (None: ``0 .. Lk - 1``).
        ``logits``, broadcastable to ``(B, H, Lq, Lk)``, are added to the scores (a subclass's:
        the Forgetting Transformer's decay). The context's mask spans the keys given, or every
        position up to the last key (a window cache's context), of which those held are read.
        ``projected_queries`` ``(B, Lq, H * d)``: the queries already projected (and convolved);
        None projects ``x``. ``sees_every_key``: every query sees every key given and the context has
        no mask (a decoded token over its own cache), so no mask is formed."""
        if context.kv_store is not None:  # later layers may read these keys and values
            context.kv_store.put(self.layer_index, k, v, key_positions, first + x.shape[1])
        if projected_queries is None:
            q = self._queries(x, first, context)
        else:
            q = self._query_heads(projected_queries, first, context)
        custom = (
            self.sinks is not None or self.window is not None or self.scale is not None or logits is not None
            or key_positions is not None
        )  # fmt: skip
        if custom:
            heads, weights = self._attend_heads(q, k, v, context, first, key_positions, logits, sees_every_key)
        else:  # ``self``'s path: dot_product's fused kernel, its bias scheme and weights
            heads, weights = self.score_attention(q, k, v, context=context.with_position_bias(self.bias_scheme))
        if self.gate_proj is not None:
            gate = torch.sigmoid(self.gate_proj(x))
            heads = heads * (
                self._split_values(gate) if self.gate == "elementwise" else gate.transpose(1, 2)[..., None]
            )
        return AttentionOutput(self._merge(heads), weights)

    def _attend_heads(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        context: AttentionContext,
        first: int,
        key_positions: Tensor | None,
        logits: Tensor | None,
        sees_every_key: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Softmax over the keys a query sees (causality, window, first positions, the context's
        mask), plus the sinks: the explicit form when weights are asked for, else the fused kernel
        (blockwise over a window that is short beside the sequence)."""
        device, (num_queries, num_keys) = q.device, (q.shape[-2], k.shape[-2])
        scale = 1.0 / math.sqrt(q.shape[-1]) if self.scale is None else self.scale
        dropout = self.score_attention
        windowed = self.window is not None and not sees_every_key
        if windowed and key_positions is None and logits is None and not context.need_weights:
            k, v = repeat_kv_heads(q, k, v)
            blocks = window_blocks(
                q, k, v, window=self.window, sink_tokens=self.sink_tokens, is_causal=context.is_causal, first=first,
                mask=context.mask, scale=scale, dropout_p=dropout.active_dropout, bias=self.bias_scheme,
                sinks=self.sinks,
            )  # fmt: skip
            if blocks is not None:
                return blocks, None
        plain_causal = (
            context.is_causal and context.mask is None and self.window is None and logits is None
            and key_positions is None and num_queries == num_keys and self.bias_scheme is None
        )  # fmt: skip
        if plain_causal or sees_every_key:  # causality alone is formed where it is needed: no offsets here
            mask = None
        else:
            query_positions = torch.arange(first, first + num_queries, device=device)
            key_positions = torch.arange(num_keys, device=device) if key_positions is None else key_positions
            mask = self._visible(context, query_positions, key_positions)
            if self.bias_scheme is not None:
                scheme_bias = self.bias_scheme(query_positions[:, None], key_positions).to(q.dtype)
                logits = scheme_bias if logits is None else logits + scheme_bias
        return softmax_heads(
            q, k, v, mask, scale=scale, logits=logits, sinks=self.sinks, dropout_p=dropout.active_dropout,
            need_weights=context.need_weights, is_causal=plain_causal,
        )  # fmt: skip

    def _visible(self, context: AttentionContext, query_positions: Tensor, key_positions: Tensor) -> Tensor | None:
        """Which keys each query sees under the context and this layer's window (:func:`visible_keys`)."""
        return visible_keys(
            context.mask, query_positions, key_positions, is_causal=context.is_causal, window=self.window,
            sink_tokens=self.sink_tokens,
        )  # fmt: skip

    # -- decoding ---------------------------------------------------------------------------------------

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions after ``cache`` (:mod:`zoo.attention.contract.cache`): a ``KeyValueCache``, or
        with a window a ``WindowCache`` (the first ``sink_tokens`` positions and the last ``window -
        1``), in a ``ConvolvedCache`` with the convolutions' windows when the layer convolves; a layer
        reading another's keys and values reads its cache and keeps a ``SharedCache``."""
        if self.kv_source is not None:
            return self.attend_shared_cached(x, cache, context)
        expected = WindowCache if self.window is not None else KeyValueCache
        inner, windows = self.unwrap_cache(cache, expected)
        context = AttentionContext(is_causal=True) if context is None else context
        seen = 0 if inner is None else inner.length
        q, k, v, windows = self._projected(x, context, windows, seen)
        sees_every_key = x.shape[1] == 1 and context.mask is None and self.bias_scheme is None
        # what the new positions see (``reach``: one token sees all a cache holds) and what is kept
        if self.window is None:
            reach: KeyValueCache | WindowCache = KeyValueCache(k, v) if inner is None else inner.extend(k, v)
            held, positions = reach, None
        else:
            if inner is None:
                inner = WindowCache(k[..., :0, :], v[..., :0, :], 0, self.sink_tokens, self.window)
            reach = inner.extend(k, v)
            unread = sees_every_key and context.kv_store is None  # ``kv_source`` readers need positions
            held, positions = reach.trimmed(), None if unread else reach.positions
        output, _ = self.attend_positions(
            x, reach.keys, reach.values, context, first=seen, key_positions=positions, projected_queries=q,
            sees_every_key=sees_every_key,
        )  # fmt: skip
        return output, ConvolvedCache.wrap(held, windows)

    def extra_repr(self) -> str:
        return describe_options(self) + self.conv_repr()
