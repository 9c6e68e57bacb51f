"""DeepSeek-V4's attention (DeepSeek-AI, 2026, DeepSeek-V4), its sliding-window layer: one key that
is also the value, shared by every head, a learned sink per head, partial rotation undone on the
output, and a grouped low-rank output projection.

For a token ``x_t`` with ``H`` heads of ``d`` features, ``r`` of them rotated (written from the
reference's computation, in the notation of :mod:`zoo.attention.variants.mla`)::

    c^Q_t = RMSNorm(x_t W^DQ)                              (q_lora_rank)
    q_t,h = RMSNorm_0([c^Q_t W^UQ]_h)                      (per head, RMSNorm_0 has no weight)
    kv_t  = RMSNorm(x_t W^KV)                              (one head of d features: key and value)
    q_t,h <- RoPE_t(q_t,h),  kv_t <- RoPE_t(kv_t)           (the r rotated features only)
    s_t,h,j = q_t,h . kv_j / sqrt(d)                       (t - w < j <= t: the window w)
    o_t,h = sum_j exp(s_t,h,j) kv_j / (exp(z_h) + sum_j exp(s_t,h,j))    (z_h: the head's sink)
    o_t,h <- RoPE_{-t}(o_t,h)                              (the rotated features turned back by t)
    y_t = concat_g([o_t,G(g)] W^OA_g) W^OB                 (o_groups groups of H / G heads, o_lora_rank each)

Since the value is the rotated key, ``o_t,h``'s rotated features carry each key's rotation by
``j``; turning them back by ``t`` leaves a rotation by ``j - t``, so the output depends on
positions only through their distances, as the scores do. The sink ``z_h`` is a logit with no
value: a query may put weight on nothing (gpt-oss's sinks). ``W^OA`` is block diagonal: each group
of heads is projected to ``o_lora_rank`` on its own before ``W^OB`` mixes the groups, so the
``H d``-wide output (DeepSeek-V4-Flash: 64 heads of 512) is never multiplied by a full matrix.

What follows transformers' ``DeepseekV4Attention`` (the reference read, with DeepSeek-V4's
config): the projections and norms (``eps`` ``1e-6`` by default, no biases), the weight-free norm on
every query head, the scale ``1 / sqrt(d)``, the sink, the window (a query sees itself and the ``w - 1``
positions before it), the inverse rotation and the grouped output. Where the zoo differs: the
reference rotates each head's *last* ``r`` features in adjacent pairs; the zoo rotates the *first*
``r`` in pairs of halves (:class:`~zoo.positions.rotary.RotaryEmbedding` with a ``fraction``), a
fixed permutation of the features of every query head and of the shared key, which
:mod:`zoo.integrations.hf_layers.deepseek_v4` applies to the weights. DeepSeek-V4's compressed
layers (heavily compressed attention, and compressed sparse attention with its indexer) append
compressed entries to the window's keys; this layer does not implement them. The decoding cache
holds every position's shared key (the window would allow dropping those older than ``w - 1``),
and the scores are computed against every key and then masked to the window (``O(L^2)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.cache import KeyValueCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions.rope_scaling import RopeScaling
from zoo.positions.rotary import RotaryEmbedding

__all__ = ["DeepseekV4Attention"]


def visible(num_queries: int, num_keys: int, window: int, device: torch.device) -> Tensor:
    """``(Lq, Lk)`` True where a query sees a key: causal, bottom-right aligned (query ``i`` is
    position ``Lk - Lq + i``), and within ``window`` positions of it, itself included."""
    query = torch.arange(num_keys - num_queries, num_keys, device=device).unsqueeze(-1)
    distance = query - torch.arange(num_keys, device=device)
    return (distance >= 0) & (distance < window)


@register_attention_layer("deepseek_v4", aliases=("dsv4",))
class DeepseekV4Attention(AttentionLayer):
    """DeepSeek-V4's sliding-window attention (see the module docstring).

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
        eps: The three RMSNorms' epsilon.

    Parameters: ``q_a_proj`` (``embed_dim -> q_lora_rank``), ``q_a_norm``, ``q_b_proj`` (``-> H d``),
    ``kv_proj`` (``embed_dim -> d``), ``kv_norm``, ``sinks`` (``H``), ``o_a_proj`` (``G o_lora_rank``
    rows of ``H d / G``: group ``g``'s block is rows ``g o_lora_rank ..``), ``o_b_proj`` (``G
    o_lora_rank -> embed_dim``). No biases.
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

    def _queries(self, x: Tensor, offset: int, context: AttentionContext) -> Tensor:
        """Rotated query heads ``(B, H, L, d)`` of ``x`` at positions ``offset ..``."""
        heads = self.q_b_proj(self.q_a_norm(self.q_a_proj(x))).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)
        heads = nn.functional.rms_norm(heads, (self.head_dim,), eps=self.eps)
        return rotate_heads(self.rotary, heads, offset, context)

    def _shared(self, x: Tensor, offset: int, context: AttentionContext) -> Tensor:
        """The rotated shared key-value ``(B, 1, L, d)`` of ``x`` at positions ``offset ..``."""
        return rotate_heads(self.rotary, self.kv_norm(self.kv_proj(x)).unsqueeze(1), offset, context)

    def _attend(self, queries: Tensor, shared: Tensor, offset: int, context: AttentionContext) -> AttentionOutput:
        """``queries`` ``(B, H, Lq, d)`` at positions ``offset ..`` over every position's ``shared``
        ``(B, 1, Lk, d)``: the output ``(B, Lq, embed_dim)`` and, if asked, the weights ``(B, H, Lq, Lk)``."""
        num_queries, num_keys = queries.shape[-2], shared.shape[-2]
        scores = queries @ shared.transpose(-1, -2) * self.head_dim**-0.5
        allowed = visible(num_queries, num_keys, self.window, queries.device)
        if context.mask is not None:
            allowed = allowed & context.mask
        scores = scores.masked_fill(~allowed, float("-inf"))
        sinks = self.sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.cat([scores, sinks], dim=-1).softmax(dim=-1)[..., :-1]
        heads = weights @ shared
        cos, sin = self.rotary.angles(torch.arange(offset, offset + num_queries, device=queries.device))
        heads = self.rotary.rotate(heads, cos, -sin)
        grouped = heads.transpose(1, 2).reshape(*heads.shape[:1], num_queries, self.o_groups, -1)
        blocks = self.o_a_proj.weight.view(self.o_groups, self.o_lora_rank, -1)
        projected = torch.einsum("blgi,gri->blgr", grouped, blocks).flatten(-2)
        return AttentionOutput(self.o_b_proj(projected), weights if context.need_weights else None)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        queries = self._queries(x, context.offset, context)
        return self._attend(queries, self._shared(x, context.offset, context), context.offset, context)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (a
        :class:`~zoo.attention.contract.cache.KeyValueCache` whose keys and values are the same
        shared tensor; None before the first), causal: the output and the extended cache."""
        context = AttentionContext(is_causal=True) if context is None else context
        self.check_request(context)
        offset = 0 if cache is None else cache.length
        shared = self._shared(x, offset, context)
        if cache is not None:
            shared = torch.cat([cache.keys, shared], dim=-2)
        output, _ = self._attend(self._queries(x, offset, context), shared, offset, context)
        return output, KeyValueCache(shared, shared)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"rope_head_dim={self.rope_head_dim}, q_lora_rank={self.q_lora_rank}, o_groups={self.o_groups}, "
            f"o_lora_rank={self.o_lora_rank}, window={self.window}"
        )
