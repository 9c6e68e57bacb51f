"""DeepSeek-V4's attention (DeepSeek-AI, 2026, DeepSeek-V4): its sliding-window layer (one key that
is also the value, shared by every head, a learned sink per head, partial rotation undone on the
output, a grouped low-rank output projection) and, as options of the same layer, its two compressed
layers, which add to the window's keys entries that each pool ``m`` tokens: heavily compressed
attention (HCA, ``compression="hca"``) and compressed sparse attention (CSA, ``"csa"``), whose
queries read only the entries a lightning indexer scores highest.

For a token ``x_t`` with ``H`` heads of ``d`` features, ``r`` of them rotated (written from the
reference's computation, in the notation of :mod:`zoo.attention.variants.mla`)::

    c^Q_t = RMSNorm(x_t W^DQ)                              (q_lora_rank)
    q_t,h = RMSNorm_0([c^Q_t W^UQ]_h)                      (per head, RMSNorm_0 has no weight)
    kv_t  = RMSNorm(x_t W^KV)                              (one head of d features: key and value)
    q_t,h <- RoPE_t(q_t,h),  kv_t <- RoPE_t(kv_t)           (the r rotated features only)
    K_t   = {kv_j : t - w < j <= t}  +  {C_i : i in R_t}   (the window w, the entries read)
    o_t,h = sum_{k in K_t} exp(q_t,h . k / sqrt(d)) k / (exp(z_h) + sum_{k in K_t} exp(q_t,h . k / sqrt(d)))
    o_t,h <- RoPE_{-t}(o_t,h)                              (the rotated features turned back by t)
    y_t = concat_g([o_t,G(g)] W^OA_g) W^OB                 (o_groups groups of H / G heads, o_lora_rank each)

The sliding layer reads no entries (``R_t`` empty). A compressed layer pools every ``m`` tokens
(:mod:`zoo.attention.modules.token_compression`), per feature ``f``::

    C_s = x_s W^C,  Z_s = x_s W^Z                          (c series of d features: c = 1 HCA, 2 CSA)
    HCA: C_i = RoPE_{im}(RMSNorm(sum_{s = im}^{im+m-1} softmax_s(Z_s + B_{s-im})_f C_s,f))
    CSA: C_i = RoPE_{im}(RMSNorm(sum over the first series of window i - 1 and the second of
               window i, 2m slots, of softmax(Z + B)_f C_f))                    (stride m, width 2m)
    R_t = {i : (i + 1) m <= t + 1}                          (HCA: every entry complete at t)
    I_t,i = sum_{h=1}^{H_I} w_t,h ReLU(q^I_t,h . K^I_i) / sqrt(d_I),  w_t = x_t W^w / sqrt(H_I)
    R_t = the index_topk entries of highest I_t,i among those complete at t        (CSA)

with ``q^I_t,h = RoPE_t([c^Q_t W^IQ]_h)`` and ``K^I_i`` pooled as CSA's ``C_i`` by the indexer's own
compressor, ``d_I`` wide. An entry takes the rotation of its window's first token, so a query's
score on it depends on their distance, as on the window's keys. DeepSeek-V4 uses ``m = 128`` for
HCA and ``m = 4`` for CSA, with ``index_topk = 512``.

Since the value is the rotated key, ``o_t,h``'s rotated features carry each key's rotation by
``j``; turning them back by ``t`` leaves a rotation by ``j - t``, so the output depends on
positions only through their distances, as the scores do. The sink ``z_h`` is a logit with no
value: a query may put weight on nothing (gpt-oss's sinks). ``W^OA`` is block diagonal: each group
of heads is projected to ``o_lora_rank`` on its own before ``W^OB`` mixes the groups, so the
``H d``-wide output (DeepSeek-V4-Flash: 64 heads of 512) is never multiplied by a full matrix.

The top-k choice passes no gradient; the indexer learns, as ``dsa``'s does, from
``index_loss_weight`` times the KL divergence from the main attention's weights on the entries
(summed over heads) to ``softmax(I_t)`` over the entries read, its input detached
(:func:`~zoo.attention.modules.lightning_indexer.indexer_kl`), tied to the output. ``need_weights``
gives ``(B, H, L, L)``: each window key's weight, plus each read entry's weight spread over the
tokens it pools by their compression weights averaged over the features, so the heatmap shows
which tokens, near and far, a query read.

What follows transformers' ``DeepseekV4Attention`` (the reference read, with DeepSeek-V4's
config): the projections and norms (``eps`` ``1e-6`` by default, no biases), the weight-free norm on
every query head, the scale ``1 / sqrt(d)``, the sink, the window (a query sees itself and the ``w - 1``
positions before it), the inverse rotation and the grouped output; the compressors (per-feature
softmax over the slots in float32 at least, the slot bias, the norm after pooling, the overlap, the
rotation at ``i m``), which entries a query may read, the indexer's queries from ``c^Q`` and its
score. Where the zoo differs: the reference rotates each vector's *last* ``r`` features in
adjacent pairs; the zoo rotates the *first* ``r`` in pairs of halves
(:class:`~zoo.positions.rotary.RotaryEmbedding` with a ``fraction``), a fixed permutation of the
features of every query head, of the shared key and of the compressors' series, which
:mod:`zoo.integrations.hf_layers.deepseek_v4` applies to the weights. Ties in the index score go to
the earlier entry (the reference's ``topk`` leaves them to the kernel). A hidden token (key
padding) takes no weight in an entry and an entry of hidden tokens only is not read; the
reference's compressor does not look at padding. The windows start at the first position a call
without a cache is given (the reference's too). The indexer's loss is the zoo's (the reference runs
inference only). The decoding cache holds the last ``w - 1`` positions' shared key-value, all a
later query's window reaches, so a sliding layer's stops growing there and a compressed layer's
grows by an entry per ``m`` tokens; a prompt's scores are computed against every key and entry
and then masked (``O(L^2)``; the entries add ``L / m`` keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import torch
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput, Capabilities
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.kernels.chunking import QUERY_CHUNK
from zoo.attention.modules.auxiliary_loss import attach_auxiliary_loss
from zoo.attention.modules.lightning_indexer import indexer_kl, top_k_selection
from zoo.attention.modules.rotation import rotate_heads
from zoo.attention.modules.token_compression import (
    CompressedCache,
    CompressedIndexer,
    CompressorState,
    SharedWindow,
    TokenCompressor,
    entry_visibility,
)
from zoo.positions.rope_scaling import RopeScaling
from zoo.positions.rotary import RotaryEmbedding

__all__ = ["COMPRESS_RATES", "DeepseekV4Attention"]

Compression = Literal["hca", "csa"]
#: tokens pooled into one entry by default: DeepSeek-V4's m' = 128 (HCA) and m = 4 (CSA)
COMPRESS_RATES: dict[str, int] = {"hca": 128, "csa": 4}
#: compressed entries a CSA query reads by default (DeepSeek-V4's index_topk)
INDEX_TOPK = 512


def visible(num_queries: int, num_keys: int, window: int, device: torch.device) -> Tensor:
    """``(Lq, Lk)`` True where a query sees a key: causal, bottom-right aligned (query ``i`` is
    position ``Lk - Lq + i``), and within ``window`` positions of it, itself included."""
    query = torch.arange(num_keys - num_queries, num_keys, device=device).unsqueeze(-1)
    distance = query - torch.arange(num_keys, device=device)
    return (distance >= 0) & (distance < window)


@register_attention_layer("deepseek_v4", aliases=("dsv4",))
class DeepseekV4Attention(AttentionLayer):
    """DeepSeek-V4's attention: a sliding window over one shared key-value head with sinks, and
    optionally compressed entries of ``m`` tokens each (HCA, CSA; see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Query heads ``H``; a multiple of ``o_groups``.
        head_dim: Each head's features ``d`` and the shared key-value's; None: ``embed_dim // num_heads``.
        rope_head_dim: Rotated features ``r`` of each head (even); None: a quarter of ``head_dim``
            rounded down to even, at least 2 (DeepSeek-V4: 64 of 512).
        q_lora_rank: Width of the query latent ``c^Q``; None: ``embed_dim // 2``.
        o_groups: Groups ``G`` of heads in the output projection.
        o_lora_rank: Each group's projected width; None: ``embed_dim // o_groups``.
        window: Positions a query sees, itself included (DeepSeek-V4: 128).
        rope_base: The rotation's wavelength base.
        rope_scaling: The rotation's frequency scaling (:mod:`zoo.positions.rope_scaling`); None: none.
        eps: The RMSNorms' epsilon.
        compression: None: the sliding layer; ``"hca"``: heavily compressed attention; ``"csa"``:
            compressed sparse attention (see the module docstring).
        compress_rate: Tokens pooled into one entry ``m``; None: :data:`COMPRESS_RATES`.
        index_topk: Entries a CSA query reads (top-k of the indexer); None: 512.
        index_heads: The CSA indexer's heads ``H_I``; None: ``num_heads``.
        index_head_dim: Each index head's width ``d_I`` (at least ``rope_head_dim``); None:
            ``max(head_dim // 4, rope_head_dim)`` (DeepSeek-V4: 128 of 512).
        index_loss_weight: The weight of the CSA indexer's KL loss in every backward pass through
            the layer (0: the indexer does not learn).

    Parameters: ``q_a_proj`` (``embed_dim -> q_lora_rank``), ``q_a_norm``, ``q_b_proj`` (``-> H d``),
    ``kv_proj`` (``embed_dim -> d``), ``kv_norm``, ``sinks`` (``H``), ``o_a_proj`` (``G o_lora_rank``
    rows of ``H d / G``: group ``g``'s block is rows ``g o_lora_rank ..``), ``o_b_proj`` (``G
    o_lora_rank -> embed_dim``). No biases. A compressed layer adds ``compressor``
    (:class:`~zoo.attention.modules.token_compression.TokenCompressor`), and CSA ``indexer``
    (:class:`~zoo.attention.modules.token_compression.CompressedIndexer`).
    """

    family = "softmax"
    cost = "L²"  # the scores are computed densely, then masked to the window

    supports_bidirectional = False
    #: the sink takes a share of each query's weight: the weights over the keys sum to less than one
    normalized_weights = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        rope_head_dim: int | None = None,
        q_lora_rank: int | None = None,
        o_groups: int = 1,
        o_lora_rank: int | None = None,
        window: int = 128,
        rope_base: float = 10000.0,
        rope_scaling: RopeScaling | Mapping[str, Any] | None = None,
        eps: float = 1e-6,
        compression: Compression | None = None,
        compress_rate: int | None = None,
        index_topk: int | None = None,
        index_heads: int | None = None,
        index_head_dim: int | None = None,
        index_loss_weight: float = 1.0,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.require_positive(embed_dim=embed_dim, num_heads=num_heads, o_groups=o_groups, window=window)
        head_dim = max(embed_dim // num_heads, 2) if head_dim is None else head_dim
        rope_head_dim = max(head_dim // 8 * 2, 2) if rope_head_dim is None else rope_head_dim
        q_lora_rank = max(embed_dim // 2, 1) if q_lora_rank is None else q_lora_rank
        o_lora_rank = max(embed_dim // o_groups, 1) if o_lora_rank is None else o_lora_rank
        self.require_positive(head_dim=head_dim, q_lora_rank=q_lora_rank, o_lora_rank=o_lora_rank)
        if rope_head_dim % 2 or not 0 < rope_head_dim <= head_dim:
            raise ValueError(
                f"{name}: rope_head_dim must be even and in (0, head_dim={head_dim}]; got {rope_head_dim}."
            )
        if num_heads % o_groups:
            raise ValueError(f"{name}: num_heads={num_heads} must be a multiple of o_groups={o_groups}.")
        self.embed_dim, self.num_heads, self.head_dim, self.rope_head_dim = (
            embed_dim,
            num_heads,
            head_dim,
            rope_head_dim,
        )
        self.q_lora_rank, self.o_groups, self.o_lora_rank, self.window = q_lora_rank, o_groups, o_lora_rank, window
        self.eps = eps
        self.rotary = RotaryEmbedding(head_dim, rope_base, fraction=rope_head_dim / head_dim, scaling=rope_scaling)
        self.q_a_proj = nn.Linear(embed_dim, q_lora_rank, bias=False)
        self.q_a_norm = nn.RMSNorm(q_lora_rank, eps=eps)
        self.q_b_proj = nn.Linear(q_lora_rank, num_heads * head_dim, bias=False)
        self.kv_proj = nn.Linear(embed_dim, head_dim, bias=False)
        self.kv_norm = nn.RMSNorm(head_dim, eps=eps)
        self.sinks = nn.Parameter(torch.zeros(num_heads))
        self.o_a_proj = nn.Linear(num_heads * head_dim // o_groups, o_groups * o_lora_rank, bias=False)
        self.o_b_proj = nn.Linear(o_groups * o_lora_rank, embed_dim, bias=False)
        self.compression, self.compressor, self.indexer = compression, None, None
        indexing = {"index_topk": index_topk, "index_heads": index_heads, "index_head_dim": index_head_dim}
        if compression is None and compress_rate is not None:
            raise ValueError(f"{name}: compress_rate needs compression='hca' or 'csa'; got compression=None.")
        if compression != "csa" and any(value is not None for value in indexing.values()):
            raise ValueError(f"{name}: index_topk, index_heads and index_head_dim need compression='csa'.")
        if compression is None:
            return
        if compression not in COMPRESS_RATES:
            raise ValueError(f"{name}: compression must be None, 'hca' or 'csa'; got {compression!r}.")
        self.compress_rate = COMPRESS_RATES[compression] if compress_rate is None else compress_rate
        self.require_positive(compress_rate=self.compress_rate, **indexing)
        csa = compression == "csa"
        self.compressor = TokenCompressor(embed_dim, head_dim, self.compress_rate, overlap=csa, eps=eps)
        if not csa:
            return
        width = max(head_dim // 4, rope_head_dim) if index_head_dim is None else index_head_dim
        if width < rope_head_dim:
            raise ValueError(f"{name}: index_head_dim must be at least rope_head_dim={rope_head_dim}; got {width}.")
        if not index_loss_weight >= 0:
            raise ValueError(f"{name}: index_loss_weight must be 0 or more; got {index_loss_weight!r}.")
        self.index_topk = INDEX_TOPK if index_topk is None else index_topk
        self.index_loss_weight = float(index_loss_weight)
        heads = num_heads if index_heads is None else index_heads
        self.indexer = CompressedIndexer(embed_dim, q_lora_rank, heads, width, self.compress_rate, eps)

    @property
    def capabilities(self) -> Capabilities:
        """A compressed layer pools every real token into entries that every later query reads: it
        takes key padding only, the same for every query."""
        declared = Capabilities.declared(type(self))
        return declared if self.compressor is None else replace(declared, supports_query_mask=False)

    def _queries(self, latent: Tensor, offset: int, context: AttentionContext) -> Tensor:
        """Rotated query heads ``(B, H, L, d)`` of the query latent ``c^Q`` at positions ``offset ..``."""
        heads = self.q_b_proj(latent).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)
        heads = nn.functional.rms_norm(heads, (self.head_dim,), eps=self.eps)
        return rotate_heads(self.rotary, heads, offset, context)

    def _shared(self, x: Tensor, offset: int, context: AttentionContext) -> Tensor:
        """The rotated shared key-value ``(B, 1, L, d)`` of ``x`` at positions ``offset ..``."""
        return rotate_heads(self.rotary, self.kv_norm(self.kv_proj(x)).unsqueeze(1), offset, context)

    def _latent(self, x: Tensor) -> Tensor:
        """The query latent ``c^Q`` ``(B, L, q_lora_rank)`` of ``x``."""
        return self.q_a_norm(self.q_a_proj(x))

    def _attend(
        self, queries: Tensor, shared: Tensor, offset: int, context: AttentionContext,
        compressed: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """``queries`` ``(B, H, Lq, d)`` at positions ``offset ..`` over every position's ``shared``
        ``(B, 1, Lk, d)`` within the window and, if given, the ``compressed`` entries ``(B, 1, E, d)``
        each query may read ``(B, 1, Lq, E)``: the output ``(B, Lq, embed_dim)`` and the weights
        ``(B, H, Lq, Lk + E)``; None for a long input's inference, whose scores are computed
        :data:`QUERY_CHUNK` queries at a time (all at once: 8 GiB at 16k tokens and 8 heads)."""
        num_queries, num_keys = queries.shape[-2], shared.shape[-2]
        allowed = visible(num_queries, num_keys, self.window, queries.device)
        if context.mask is not None:  # over every position seen; the keys are the last ``num_keys``
            allowed = allowed & context.mask[..., -num_keys:]
        if compressed is not None:
            entries, readable = compressed
            shared = torch.cat([shared, entries], dim=-2)
            allowed = torch.cat([allowed.expand(*readable.shape[:-1], num_keys), readable], dim=-1)
        if context.need_weights or torch.is_grad_enabled() or num_queries <= QUERY_CHUNK:
            weights: Tensor | None = self._weights(queries, shared, allowed)
            heads = weights @ shared
        else:  # inference: QUERY_CHUNK queries' scores at a time
            weights, rows = None, [slice(start, start + QUERY_CHUNK) for start in range(0, num_queries, QUERY_CHUNK)]
            heads = torch.cat(
                [self._weights(queries[..., part, :], shared, allowed[..., part, :]) @ shared for part in rows], dim=-2
            )
        cos, sin = self.rotary.angles(torch.arange(offset, offset + num_queries, device=queries.device))
        heads = self.rotary.rotate(heads, cos, -sin)
        grouped = heads.transpose(1, 2).reshape(*heads.shape[:1], num_queries, self.o_groups, -1)
        blocks = self.o_a_proj.weight.view(self.o_groups, self.o_lora_rank, -1)
        projected = torch.einsum("blgi,gri->blgr", grouped, blocks).flatten(-2)
        return self.o_b_proj(projected), weights

    def _weights(self, queries: Tensor, shared: Tensor, allowed: Tensor) -> Tensor:
        """Softmax weights ``(B, H, Lq, Lk + E)`` of ``queries`` over the ``allowed`` keys and
        entries ``shared``, each head's sink in the denominator."""
        scores = queries @ shared.transpose(-1, -2) * self.head_dim**-0.5
        scores = scores.masked_fill(~allowed, float("-inf"))
        sinks = self.sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        return torch.cat([scores, sinks], dim=-1).softmax(dim=-1)[..., :-1]

    def _compressed(
        self, x: Tensor, latent: Tensor, queries: Tensor, shared: Tensor, states: tuple[CompressorState, ...],
        first: int, offset: int, context: AttentionContext,
    ) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """:meth:`_attend` with the compressor's entries (``states``: the compressor's, and the
        indexer's for CSA) that each query, at stream index ``first ..``, may read: those complete at
        it and, for CSA, among the indexer's top ``index_topk``; the indexer's loss attached when
        gradients are computed."""
        entries, real = states[0].entries, states[0].visible
        readable = entry_visibility(first, x.shape[1], entries.shape[1], self.compress_rate, x.device) & real[:, None]
        if self.indexer is None:
            return self._attend(queries, shared, offset, context, (entries.unsqueeze(1), readable.unsqueeze(1)))
        scores = self.indexer.scores(x.detach(), latent.detach(), states[1].entries, self.rotary, offset, context)
        if entries.shape[1] > self.index_topk:
            readable = readable & top_k_selection(scores, readable, self.index_topk).squeeze(1)
        output, weights = self._attend(queries, shared, offset, context, (entries.unsqueeze(1), readable.unsqueeze(1)))
        if self.index_loss_weight > 0 and torch.is_grad_enabled():
            loss = indexer_kl(scores, weights[..., shared.shape[-2] :], readable)
            output = attach_auxiliary_loss(output, self.index_loss_weight * loss)
        return output, weights

    def _compressors(self) -> tuple[TokenCompressor, ...]:
        """The compressor, and the indexer's for CSA."""
        return (self.compressor,) if self.indexer is None else (self.compressor, self.indexer.compressor)

    @staticmethod
    def _real(context: AttentionContext, x: Tensor) -> Tensor | None:
        """The key padding ``(B, L)`` of the new tokens ``x`` (the last ``L`` keys); None: all real."""
        padding = context.key_padding
        return None if padding is None else padding.all(dim=1)[..., -x.shape[1] :].expand(x.shape[0], -1)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        latent, offset = self._latent(x), context.offset
        queries, shared = self._queries(latent, offset, context), self._shared(x, offset, context)
        if self.compressor is None:
            output, weights = self._attend(queries, shared, offset, context)
            return AttentionOutput(output, weights if context.need_weights else None)
        real, pooled = self._real(context, x), []
        for compressor, source in zip(self._compressors(), (x, x.detach()), strict=False):  # the indexer's: detached
            pooled.append(compressor.extend(compressor.initial(x), source, real, self.rotary, offset))
        states = tuple(state for _, state in pooled)
        output, weights = self._compressed(x, latent, queries, shared, states, 0, offset, context)
        if not context.need_weights:
            return AttentionOutput(output, None)
        spread = weights[..., x.shape[1] :] @ self.compressor.attribution(pooled[0][0], x.shape[1]).unsqueeze(1)
        return AttentionOutput(output, weights[..., : x.shape[1]] + spread)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (None before the
        first), causal: the output and the extended cache. The sliding layer's is a
        :class:`~zoo.attention.modules.token_compression.SharedWindow`; a compressed layer's a
        :class:`~zoo.attention.modules.token_compression.CompressedCache` around one."""
        context = AttentionContext(is_causal=True) if context is None else context
        self.check_request(context)
        offset = 0 if cache is None else cache.length
        latent = self._latent(x)
        queries, shared = self._queries(latent, offset, context), self._shared(x, offset, context)
        expected = SharedWindow if self.compressor is None else CompressedCache
        if cache is not None and not isinstance(cache, expected):
            raise TypeError(f"{type(self).__name__} decodes from a {expected.__name__}, got {type(cache).__name__}.")
        if cache is None:
            held = SharedWindow(shared[..., :0, :], 0)
        else:
            held = cache.window if isinstance(cache, CompressedCache) else cache
        shared, window = held.extend(shared, self.window)
        if self.compressor is None:
            output, _ = self._attend(queries, shared, offset, context)
            return output, window
        real, states = self._real(context, x), []
        pooled = (None, None) if not isinstance(cache, CompressedCache) else (cache.compressor, cache.indexer)
        for compressor, source, state in zip(self._compressors(), (x, x.detach()), pooled, strict=False):
            states.append(
                compressor.extend(compressor.initial(x) if state is None else state, source, real, self.rotary)[1]
            )
        plain = context.replace(need_weights=False)
        output, _ = self._compressed(x, latent, queries, shared, tuple(states), offset, offset, plain)
        return output, CompressedCache(window, *states, *([None] if self.indexer is None else []))

    def extra_repr(self) -> str:
        compressed = ""
        if self.compressor is not None:
            compressed = f", compression={self.compression!r}, compress_rate={self.compress_rate}"
        if self.indexer is not None:
            compressed += (
                f", index_topk={self.index_topk}, index_heads={self.indexer.num_heads}, "
                f"index_head_dim={self.indexer.head_dim}, index_loss_weight={self.index_loss_weight}"
            )
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"rope_head_dim={self.rope_head_dim}, q_lora_rank={self.q_lora_rank}, o_groups={self.o_groups}, "
            f"o_lora_rank={self.o_lora_rank}, window={self.window}{compressed}"
        )
