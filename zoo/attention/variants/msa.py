"""MiniMax Sparse Attention (MSA; MiniMax-M3's ``minimax_m3_sparse`` layers): grouped-query softmax
attention with per-head QK-norm and partial RoPE, in which each key-value head's queries attend
only to the key blocks a small indexer picks for them.

Per query token ``t`` (at position ``t``) and key-value head ``g`` (one index head per key-value
head, ``H_I = G``), with index queries ``q^I_t,g`` and one index key ``k^I_s`` per token::

    I_t,g,s = q^I_t,g . k^I_s                  s <= t (and s a real key); -inf otherwise
    P_t,g,b = max_{s in block b} I_t,g,s       blocks b of block_size keys from the first key
    L_t     = {b : c(t) - local_blocks < b <= c(t)},   c(t) = t // block_size
    S_t,g   = L_t + the best topk_blocks - |L_t| other blocks by P_t,g,:   (never one of -inf)
    o_t,h   = softmax_{s in S_t,g(h), s <= t}(q_t,h . k_s,g(h) / sqrt(d)) v_s,g(h)
    y_t     = [o_t,1 ; ... ; o_t,H] W^O

``g(h)`` is query head ``h``'s key-value group. The index vectors are ``q^I = RMSNorm(x W^IQ)`` per
index head and ``k^I = RMSNorm(x W^IK)`` (each with its learned scale), their leading features
rotated as the main heads' are (the same frequencies); the main queries and keys are
``RMSNorm(x W^Q)`` and ``RMSNorm(x W^K)`` per head before the rotation, as the ``qk_norm`` layer
computes. A block is kept whole (its keys up to ``t``), the local blocks always (``+inf`` before the
top-k), and a query's own block is one of them, so every query sees itself. The selection passes no
gradient; the indexer learns from ``index_loss_weight * L^I``, the KL divergence of its softmax over
each group's selected keys from the group's attention weights summed over its heads, its input
detached (DeepSeek-V3.2's indexer loss, :func:`~zoo.attention.modules.lightning_indexer.indexer_kl`,
tied to the output by :func:`~zoo.attention.modules.auxiliary_loss.attach_auxiliary_loss`).

What follows transformers' ``MiniMaxM3VLAttention`` and ``MiniMaxM3VLIndexer``: the unscaled
index dot products in float32 (or wider), max-pooling of whole blocks anchored at the first key,
the local blocks forced in, ``topk_blocks`` blocks per query and index head (fewer where fewer
have a visible key), one index key per token shared by the index heads, the rotation of the
index vectors' leading features by the main rotation's tables. Where the zoo departs: padded keys
score ``-inf`` before the pooling (transformers pools them; with right padding the two agree, and
left padding then selects by real keys only, as transformers' indexer notes it would need); the
index heads are the key-value heads by construction (transformers' config holds the two counts
apart and expects them equal); the indexer loss is the zoo's (transformers has none); the defaults
(blocks of 16, 4 of them, one local) are sized for the zoo's contexts where MiniMax-M3 reads
blocks of 128, 16 of them. Ties between equal block scores are left to ``topk``. Decoding keeps
every position's keys, values and index key (:class:`IndexedKeyValueCache`): a new token scores
every cached index key and attends to the blocks it picks, as transformers' sparse cache layer
holds the index keys beside the keys and values. The index scores are a dense ``(B, G, Lq, Lk)``
product, over :data:`QUERY_CHUNK` queries at a time where the weights are not asked for (8 GiB
at once at 16k tokens and 8 groups); while the indexer learns, each chunk of queries runs under
activation checkpointing and adds its share of the KL, divided by every chunk's queries at the end,
so that training at 8k holds one chunk's scores and weights. The attention runs over the selection with
:func:`~zoo.attention.kernels.selection.selected_block_attention` (a mask over the fused kernel up
to 4096 keys, gathered blocks beyond): it shows what the selection computes, not MiniMax's kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput, IncompatibleAttentionError
from zoo.attention.contract.cache import ConvolvedCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.kernels.chunking import QUERY_CHUNK
from zoo.attention.kernels.selection import selected_block_attention, top_blocks
from zoo.attention.modules.auxiliary_loss import attach_auxiliary_loss
from zoo.attention.modules.lightning_indexer import indexer_kl_mean, indexer_kl_terms
from zoo.attention.modules.rotation import rotate_heads
from zoo.attention.modules.row_blocks import checkpointed_blocks, rows_of
from zoo.positions import PositionScheme

__all__ = ["BlockIndexer", "IndexedKeyValueCache", "MiniMaxSparseAttention", "select_blocks", "visible_keys"]


@dataclass(frozen=True)
class IndexedKeyValueCache:
    """MSA's positions seen so far: keys and values ``(B, G, L, d)`` (rotated) and each position's
    index key ``(B, L, d_I)`` (rotated at its position)."""

    keys: Tensor
    values: Tensor
    index_keys: Tensor

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values, self.index_keys))

    def extend(self, keys: Tensor, values: Tensor, index_keys: Tensor) -> IndexedKeyValueCache:
        """This cache followed by new positions' keys, values and index keys."""
        return IndexedKeyValueCache(
            torch.cat([self.keys, keys], -2), torch.cat([self.values, values], -2),
            torch.cat([self.index_keys, index_keys], -2),
        )  # fmt: skip

    def select(self, index: Tensor) -> IndexedKeyValueCache:
        return IndexedKeyValueCache(*(t.index_select(0, index) for t in (self.keys, self.values, self.index_keys)))


class BlockIndexer(nn.Module):
    """MSA's indexer: ``num_heads`` index queries and one index key per token, RMS-normalized with
    learned scales, their leading features rotated by the layer's rotation (see the module docstring).

    Parameters: ``q_proj`` (``embed_dim -> H_I d_I``), ``k_proj`` (``embed_dim -> d_I``), no biases;
    ``q_norm``, ``k_norm`` (RMSNorm over ``d_I``, epsilon ``eps``).
    """

    def __init__(self, embed_dim: int, num_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, head_dim, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=eps)

    def keys(self, x: Tensor, rotary: PositionScheme | None, first: int, context: AttentionContext) -> Tensor:
        """The index keys ``(B, L, d_I)`` of tokens ``x`` at positions ``first ..``."""
        keys = self.k_norm(self.k_proj(x)).unsqueeze(1)
        return rotate_heads(rotary, keys, first, context).squeeze(1)

    def scores(
        self, x: Tensor, keys: Tensor, rotary: PositionScheme | None, first: int, context: AttentionContext
    ) -> Tensor:
        """``I`` ``(B, H_I, Lq, Lk)`` of the query tokens ``x`` at positions ``first ..`` against the
        index ``keys`` ``(B, Lk, d_I)``, in float32 or the inputs' wider precision."""
        queries = self.q_norm(self.q_proj(x).unflatten(-1, (self.num_heads, self.head_dim))).transpose(1, 2)
        queries = rotate_heads(rotary, queries, first, context)
        dtype = torch.promote_types(x.dtype, torch.float32)
        return torch.einsum("bgqd,bkd->bgqk", queries.to(dtype), keys.to(dtype))


def visible_keys(num_queries: int, num_keys: int, key_padding: Tensor | None, device: torch.device) -> Tensor:
    """Which keys each query may see, ``(Lq, Lk)`` or ``(B, 1 or G, Lq, Lk)`` under ``key_padding``
    ``(B, 1 or G, Lk)``: those up to its position (query ``i`` at ``Lk - Lq + i``) that are real."""
    positions = torch.arange(num_keys - num_queries, num_keys, device=device)
    visible = torch.arange(num_keys, device=device) <= positions[:, None]
    return visible if key_padding is None else visible & key_padding.unsqueeze(-2)


def select_blocks(scores: Tensor, visible: Tensor, block_size: int, topk_blocks: int, local_blocks: int) -> Tensor:
    """Each query's blocks ``(B, G, Lq, topk_blocks)`` (``-1``: none) from index ``scores`` ``(B, G,
    Lq, Lk)`` (query ``i`` at key position ``Lk - Lq + i``): its ``local_blocks`` blocks up to its
    own, then the blocks whose highest score over the ``visible`` keys (:func:`visible_keys`) is
    highest."""
    num_queries, num_keys = scores.shape[-2:]
    scores = scores.masked_fill(~visible, float("-inf"))
    pooled = F.pad(scores, (0, -num_keys % block_size), value=float("-inf")).unflatten(-1, (-1, block_size)).amax(-1)
    own = (torch.arange(num_keys - num_queries, num_keys, device=scores.device) // block_size)[:, None]
    blocks = torch.arange(pooled.shape[-1], device=scores.device)
    pooled = pooled.masked_fill((blocks <= own) & (blocks > own - local_blocks), float("inf"))
    return top_blocks(pooled, topk_blocks)


@register_attention_layer("msa", aliases=("minimax_sparse_attention",))
class MiniMaxSparseAttention(AttentionLayer):
    """MiniMax Sparse Attention: QK-normed grouped-query attention over the key blocks an indexer
    picks per key-value head (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Query heads.
        block_size: Keys per block the indexer scores and the attention reads whole (MiniMax-M3: 128).
        topk_blocks: Blocks each query reads, its local blocks included (MiniMax-M3: 16).
        local_blocks: The blocks up to the query's own that it always reads (MiniMax-M3: 1, its own).
        index_head_dim: Each index head's width ``d_I``; None: ``head_dim`` (MiniMax-M3: 128 beside 128).
        index_loss_weight: The weight of the indexer's KL loss in every backward pass through the
            layer (0: the indexer does not learn).
        num_kv_heads: Key-value heads, and index heads; None: ``num_heads``.
        head_dim: Features per head; None: ``embed_dim // num_heads`` (MiniMax-M3: 64 heads of 128
            beside 6144).
        eps: The RMSNorms' epsilon.
        position: The stack's rotary scheme, or None.
        bias: Biases in the query, key, value and output projections (the stack's ``bias``).

    Parameters: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, ``q_norm``, ``k_norm`` (RMSNorm
    over a head's features, shared by the heads) and the indexer's (:class:`BlockIndexer`).
    """

    supports_bidirectional = False
    supports_query_mask = False
    supports_rotary = True
    family = "sparse selection"
    cost = "L²"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        block_size: int = 16,
        topk_blocks: int = 4,
        local_blocks: int = 1,
        index_head_dim: int | None = None,
        index_loss_weight: float = 1.0,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        eps: float = 1e-6,
        position: PositionScheme | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        groups = num_heads if num_kv_heads is None else num_kv_heads
        width = embed_dim // num_heads if head_dim is None else head_dim
        index_width = width if index_head_dim is None else index_head_dim
        self.require_positive(
            embed_dim=embed_dim, num_heads=num_heads, block_size=block_size, topk_blocks=topk_blocks,
            local_blocks=local_blocks, index_head_dim=index_width, num_kv_heads=groups, head_dim=width,
        )  # fmt: skip
        if num_heads % groups:
            raise ValueError(f"{name}: num_kv_heads ({groups}) must divide num_heads ({num_heads}).")
        if local_blocks > topk_blocks:
            raise ValueError(
                f"{name}: local_blocks ({local_blocks}) must be at most topk_blocks ({topk_blocks}), which counts them."
            )
        if not index_loss_weight >= 0:
            raise ValueError(f"{name}: index_loss_weight must be 0 or more (0: the indexer does not learn).")
        if position is not None and position.kind != "rotary":
            raise IncompatibleAttentionError(f"{name} takes a rotary scheme or none; got a {position.kind} scheme.")
        self.rotary = None if position is None else position.for_head_dim(width)
        rotated = _rotated_features(self.rotary, width)
        if index_width < rotated:
            raise ValueError(
                f"{name}: index_head_dim must be at least the {rotated} features the rotation turns; got {index_width}."
            )
        self.embed_dim, self.num_heads, self.num_kv_heads, self.head_dim = embed_dim, num_heads, groups, width
        self.block_size, self.topk_blocks, self.local_blocks = block_size, topk_blocks, local_blocks
        self.index_loss_weight = float(index_loss_weight)
        self.q_proj = nn.Linear(embed_dim, num_heads * width, bias=bias)
        self.k_proj = nn.Linear(embed_dim, groups * width, bias=bias)
        self.v_proj = nn.Linear(embed_dim, groups * width, bias=bias)
        self.out_proj = nn.Linear(num_heads * width, embed_dim, bias=bias)
        self.q_norm = nn.RMSNorm(width, eps=eps)
        self.k_norm = nn.RMSNorm(width, eps=eps)
        self.indexer = BlockIndexer(embed_dim, groups, index_width, eps)

    def _heads(self, x: Tensor, first: int, context: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(B, H, L, d)``, keys and values ``(B, G, L, d)`` of ``x`` at positions
        ``first ..``: queries and keys normalized, then rotated."""
        q, k, v = (proj(x).unflatten(-1, (-1, self.head_dim)).transpose(1, 2) for proj in (self.q_proj, self.k_proj,
                   self.v_proj))  # fmt: skip
        q = rotate_heads(self.rotary, self.q_norm(q), first, context)
        return q, rotate_heads(self.rotary, self.k_norm(k), first, context), v

    def _select_attend(
        self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, index_keys: Tensor, first: int, context: AttentionContext
    ) -> AttentionOutput:
        """The new tokens ``x`` (queries ``q`` at positions ``first ..``, the last of the keys) over
        the blocks of every key and value seen that the indexer picks, :data:`QUERY_CHUNK` queries
        at a time past that many where the weights are not asked for; the indexer's loss attached
        when gradients are computed."""
        learning = self.index_loss_weight > 0 and torch.is_grad_enabled()
        if context.need_weights or x.shape[1] <= QUERY_CHUNK:
            output, weights, terms = self._select(x, q, k, v, index_keys, first, context, learning=learning)
        else:
            (output, terms), weights = self._select_chunks(x, q, k, v, index_keys, first, context, learning), None
        if terms is not None:
            output = attach_auxiliary_loss(output, self.index_loss_weight * indexer_kl_mean(terms))
        return AttentionOutput(output, weights)

    def _select(
        self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, index_keys: Tensor, first: int, context: AttentionContext,
        *, learning: bool,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:  # fmt: skip
        """One call's output ``(B, Lq, embed_dim)``, its weights where the context asks for them, and
        while ``learning`` the indexer's KL summed over the queries and their count ``(2,)``
        (:func:`~zoo.attention.modules.lightning_indexer.indexer_kl_terms`), else None."""
        with torch.set_grad_enabled(learning):
            scores = self.indexer.scores(x.detach(), index_keys, self.rotary, first, context)
        padding = context.key_padding
        visible = visible_keys(x.shape[1], k.shape[-2], padding, x.device)
        blocks = select_blocks(scores.detach(), visible, self.block_size, self.topk_blocks, self.local_blocks)
        heads, weights = selected_block_attention(
            q, k, v, blocks, block_size=self.block_size, key_padding=padding, scale=self.head_dim**-0.5,
            need_weights=context.need_weights or learning,
        )  # fmt: skip
        output = self.out_proj(heads.transpose(1, 2).flatten(-2))
        terms = None
        if learning:
            read = (blocks.unsqueeze(-1) == torch.arange(k.shape[-2], device=x.device) // self.block_size).any(-2)
            groups = (scores.flatten(0, 1), weights.unflatten(1, (self.num_kv_heads, -1)).flatten(0, 1))
            terms = indexer_kl_terms(*groups, (read & visible).expand_as(scores).flatten(0, 1))
        return output, weights if context.need_weights else None, terms

    def _select_chunks(
        self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, index_keys: Tensor, first: int, context: AttentionContext,
        learning: bool,
    ) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """:meth:`_select`, :data:`QUERY_CHUNK` queries at a time, each over the keys up to its last
        query (and the key padding there): the same output, and while ``learning`` the same KL terms
        summed over the chunks, with one chunk's index scores and weights held at a time (with
        gradients a chunk runs under activation checkpointing, its scores recomputed in the
        backward pass). The last chunk runs first, so that under the heap the zoo keeps each chunk
        reuses a larger one's memory: at 8k tokens and 8 heads a training step held 5.5 GB resident
        where first to last held 9.5, and 16k fits (:mod:`~zoo.attention.modules.row_blocks`)."""
        num_queries, num_keys = x.shape[1], k.shape[-2]

        def run(start: int, end: int) -> tuple[Tensor, Tensor | None]:
            reach = num_keys - num_queries + end
            part = rows_of(context, start, end, earlier=num_keys - num_queries)
            chunk = (x[:, start:end], q[..., start:end, :], k[..., :reach, :], v[..., :reach, :], index_keys[:, :reach])
            output, _, terms = self._select(*chunk, first + start, part, learning=learning)
            return output, terms

        outputs, terms = zip(*checkpointed_blocks(run, num_queries, QUERY_CHUNK, last_first=True), strict=True)
        return torch.cat(outputs, 1), torch.stack(terms).sum(0) if learning else None

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        q, k, v = self._heads(x, context.offset, context)
        index_keys = self.indexer.keys(x.detach(), self.rotary, context.offset, context)
        return self._select_attend(x, q, k, v, index_keys, context.offset, context)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (an
        :class:`IndexedKeyValueCache`; None before the first), causal: the output and the cache
        extended by their keys, values and index keys. The context's mask, if any, is key padding
        over every position seen, ``(B, 1, 1, L)``."""
        held, _ = ConvolvedCache.unwrap(cache, IndexedKeyValueCache, convolves=False, owner=self)
        context = AttentionContext(is_causal=True) if context is None else context
        self.check_request(context)
        seen = 0 if held is None else held.length
        q, k, v = self._heads(x, seen, context)
        index_keys = self.indexer.keys(x.detach(), self.rotary, seen, context)
        held = IndexedKeyValueCache(k, v, index_keys) if held is None else held.extend(k, v, index_keys)
        plain = context.replace(need_weights=False)
        output, _ = self._select_attend(x, q, held.keys, held.values, held.index_keys, seen, plain)
        return output, held

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, block_size={self.block_size}, topk_blocks={self.topk_blocks}, "
            f"local_blocks={self.local_blocks}, index_head_dim={self.indexer.head_dim}, "
            f"index_loss_weight={self.index_loss_weight}"
        )


def _rotated_features(rotary: PositionScheme | None, head_dim: int) -> int:
    """The leading features of a vector that ``rotary`` turns (all of a head's where it does not say)."""
    if rotary is None:
        return 0
    return getattr(rotary, "rotary_dim", head_dim) if getattr(rotary, "partial", "leading") == "leading" else head_dim
