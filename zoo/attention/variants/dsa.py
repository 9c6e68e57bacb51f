"""DeepSeek Sparse Attention (DSA; DeepSeek-AI, 2025, "DeepSeek-V3.2: Pushing the Frontier of Open
Large Language Models", arXiv:2512.02556; DeepSeek-V3.2-Exp before it): multi-head latent
attention (``mla``) whose softmax each query takes over only the ``index_topk`` keys a lightning
indexer scores highest (:mod:`zoo.attention.modules.lightning_indexer`).

For a query token ``t`` (the paper's equations 1 and 2)::

    I_t,s = sum_j w_t,j ReLU(q^I_t,j . k^I_s)                 the indexer, over the visible s
    S_t   = the index_topk positions s of highest I_t,s
    o_t,h = sum_{s in S_t} softmax_s(q_t,h . k_s,h / sqrt(dn + dr)) v_s,h      MLA, per head h
    y_t   = [o_t,1 ; ... ; o_t,H] W^O

MLA's latents, rotary sub-heads, forms (naive, absorbed) and short convolution are the ``mla``
layer's, unchanged (:mod:`zoo.attention.variants.mla`); the selection enters its kernels as a
boolean mask beside the padding mask, so the weights a heatmap asks for (``need_weights``) are
zero outside it. With no more keys than ``index_topk`` every key is selected and the layer computes
exactly what ``mla`` computes with the same weights (the indexer then only learns).

Training the indexer (the paper's section 2.1): the top-k choice passes no gradient, so the
indexer learns from ``L^I = KL(p_t || softmax(I_t))`` alone, ``p_t`` the main attention's
weights summed over heads, over the selected keys (all keys while ``T <= index_topk``: the
paper's dense warm-up loss), its input detached from the model's (the paper's sparse stage). The
zoo's tasks minimize one loss, so the layer ties ``index_loss_weight * L^I`` to its output
(:func:`~zoo.attention.modules.auxiliary_loss.attach_auxiliary_loss`): the output is unchanged, and
a backward pass through it adds ``L^I``'s gradient to the indexer's parameters, and to nothing
else. It is computed whenever gradients are (forming the ``(B, H, L, L)`` weights once more);
``index_loss_weight=0`` leaves the indexer as initialized. Where the paper trains in stages (a
dense warm-up of the indexer alone with the model frozen, then both, sparse), the zoo trains
both together from the start.

Decoding caches MLA's latent and rotary key per position and the indexer's key
(:class:`IndexedLatentCache`, ``kv_lora_rank + qk_rope_head_dim + index_head_dim`` numbers a
position); a decoded token scores every cached index key and attends to its top ``index_topk``,
as DeepSeek-V3.2-Exp's ``inference/model.py`` does.

What follows DeepSeek-V3.2-Exp's ``inference/model.py`` and transformers' ``DeepseekV32Attention``:
the indexer's query read from MLA's normalized query latent ``c^Q`` (``q_lora_rank``), its one
LayerNorm'd key per token, its per-head weights from ``x``, the rotation of its leading
``qk_rope_head_dim`` features. Where the zoo differs: without ``q_lora_rank`` (the zoo's ``mla``
default) the index queries are read from ``x``; the defaults are sized for the zoo's widths
(``index_heads = max(num_heads // 2, 1)``, as V3.2's 64 index heads to 128; ``index_head_dim =
max(qk_nope_head_dim, qk_rope_head_dim)``, as its 128), ``index_topk`` is V3.2's 2048; the
indexer's precision, Hadamard transform and ties as :mod:`~zoo.attention.modules.lightning_indexer`
says. The indexer and its selection are dense ``O(L^2)`` products here (no FP8 kernel, no gather
of the selected latents), so the layer costs what ``mla`` costs plus the indexer: it shows what
the selection does, not its speed. Past :data:`QUERY_CHUNK` new positions (and where the weights
are not asked for) they run a chunk of queries at a time over the keys up to the last of them,
under activation checkpointing with gradients, the indexer's KL summed over the chunks and
divided once: one chunk's ``(Lq, Lk)`` grids in memory, so training at 16k tokens fits a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from typing_extensions import TypedDict, Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.cache import LatentCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import with_causal
from zoo.attention.kernels.chunking import QUERY_CHUNK
from zoo.attention.kernels.latent import latent_attention_weights
from zoo.attention.modules.auxiliary_loss import attach_auxiliary_loss
from zoo.attention.modules.lightning_indexer import LightningIndexer, indexer_kl_mean, indexer_kl_terms, top_k_selection
from zoo.attention.modules.row_blocks import checkpointed_blocks, rows_of
from zoo.attention.variants.mla import LatentMode, MultiHeadLatentAttention
from zoo.positions import PositionScheme

__all__ = ["DeepSeekSparseAttention", "IndexedLatentCache", "LatentOptions"]


class LatentOptions(TypedDict, total=False):
    """``mla``'s options, which DSA takes as they are (see :class:`MultiHeadLatentAttention`)."""

    kv_lora_rank: int | None
    q_lora_rank: int | None
    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    v_head_dim: int | None
    rope: bool
    rope_base: float
    mode: LatentMode
    conv_size: int
    position: PositionScheme | None


@dataclass(frozen=True)
class IndexedLatentCache:
    """DSA's positions seen so far: MLA's :class:`~zoo.attention.contract.cache.LatentCache` and
    the indexer's key of each position ``(B, L, index_head_dim)`` (rotated at its position)."""

    latent: LatentCache
    index_keys: Tensor

    @property
    def length(self) -> int:
        return self.latent.length

    @property
    def nbytes(self) -> int:
        return self.latent.nbytes + self.index_keys.nbytes

    def extend(self, latent: Tensor, rope_key: Tensor, index_keys: Tensor) -> IndexedLatentCache:
        """This cache followed by new positions' latents, rotary keys and index keys."""
        return IndexedLatentCache(
            self.latent.extend(latent, rope_key), torch.cat([self.index_keys, index_keys], dim=-2)
        )

    def select(self, index: Tensor) -> IndexedLatentCache:
        return IndexedLatentCache(self.latent.select(index), self.index_keys.index_select(0, index))


@register_attention_layer("dsa", aliases=("deepseek_sparse_attention",))
class DeepSeekSparseAttention(MultiHeadLatentAttention):
    """DeepSeek Sparse Attention: ``mla`` over the top ``index_topk`` keys of a lightning indexer
    (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Query heads of the latent attention.
        index_topk: Keys each query attends to (V3.2's 2048).
        index_heads: The indexer's heads ``H_I``; None: ``max(num_heads // 2, 1)``.
        index_head_dim: Each index head's width ``d_I`` (at least ``qk_rope_head_dim`` when the layer
            rotates); None: ``max(qk_nope_head_dim, qk_rope_head_dim)``.
        index_loss_weight: The weight of the indexer's KL loss in every backward pass through the
            layer (0: the indexer does not learn).
        **options: ``mla``'s options (:class:`LatentOptions`).

    Parameters: ``mla``'s, and the indexer's (``indexer.q_proj``, ``indexer.k_proj``,
    ``indexer.k_norm``, ``indexer.weights_proj``).
    """

    family = "sparse selection"
    cost = "L²"
    cache_type = IndexedLatentCache

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        index_topk: int = 2048,
        index_heads: int | None = None,
        index_head_dim: int | None = None,
        index_loss_weight: float = 1.0,
        **options: Unpack[LatentOptions],
    ) -> None:
        super().__init__(embed_dim, num_heads, **options)
        name = type(self).__name__
        heads = max(num_heads // 2, 1) if index_heads is None else index_heads
        width = max(self.qk_nope_head_dim, self.qk_rope_head_dim) if index_head_dim is None else index_head_dim
        self.require_positive(index_topk=index_topk, index_heads=heads, index_head_dim=width)
        rope_dim = self.qk_rope_head_dim if self.rotary is not None else 0
        if width < rope_dim:
            raise ValueError(
                f"{name}: index_head_dim must be at least qk_rope_head_dim ({rope_dim}) to rotate its leading "
                f"features; got {width}."
            )
        if not index_loss_weight >= 0:
            raise ValueError(
                f"{name}: index_loss_weight must be 0 or more (0: the indexer does not learn); got {index_loss_weight!r}."
            )
        self.index_topk, self.index_loss_weight = index_topk, float(index_loss_weight)
        query_dim = embed_dim if self.q_lora_rank is None else self.q_lora_rank
        self.indexer = LightningIndexer(embed_dim, query_dim, heads, width, rope_dim)

    @property
    def cache_width(self) -> int:
        """Numbers a decoder caches per position: ``kv_lora_rank + qk_rope_head_dim + index_head_dim``."""
        return super().cache_width + self.indexer.head_dim

    def _sparse(
        self, x: Tensor, queries: Tensor, latent: Tensor, rope_key: Tensor, index_keys: Tensor, offset: int,
        context: AttentionContext, absorbed: bool,
    ) -> AttentionOutput:  # fmt: skip
        """MLA's attention of the new positions ``x`` (their down-projected ``queries``) over the
        top ``index_topk`` of every position's ``latent``, ``rope_key`` and ``index_keys``, with the
        indexer's loss attached when gradients are computed. Past :data:`QUERY_CHUNK` new positions,
        where the weights are not asked for, :data:`QUERY_CHUNK` queries at a time over the keys up
        to the last of them (under activation checkpointing with gradients), each chunk's index
        scores alone in memory and the indexer's KL summed over the chunks, divided once."""
        learning = self.index_loss_weight > 0 and torch.is_grad_enabled()
        num_queries, num_keys = x.shape[1], index_keys.shape[-2]
        if context.need_weights or num_queries <= QUERY_CHUNK:
            output, terms = self._select(x, queries, latent, rope_key, index_keys, offset, context, absorbed, learning)
        else:
            earlier = num_keys - num_queries

            def run(start: int, end: int) -> tuple[Tensor, Tensor | None]:
                keys = slice(0, earlier + end)
                part, chunk = rows_of(context, start, end, earlier=earlier), slice(start, end)
                output, terms = self._select(
                    x[:, chunk], queries[:, chunk], latent[:, keys], rope_key[:, keys], index_keys[:, keys],
                    offset + start, part, absorbed, learning,
                )  # fmt: skip
                return output.output, terms

            outputs, chunk_terms = zip(*checkpointed_blocks(run, num_queries, QUERY_CHUNK), strict=True)
            output = AttentionOutput(torch.cat(outputs, 1), None)
            terms = torch.stack(chunk_terms).sum(0) if learning else None
        if terms is None:
            return output
        loss = self.index_loss_weight * indexer_kl_mean(terms)
        return AttentionOutput(attach_auxiliary_loss(output.output, loss), output.weights)

    def _select(
        self, x: Tensor, queries: Tensor, latent: Tensor, rope_key: Tensor, index_keys: Tensor, offset: int,
        context: AttentionContext, absorbed: bool, learning: bool,
    ) -> tuple[AttentionOutput, Tensor | None]:  # fmt: skip
        """One call of :meth:`_sparse`: the output, and while ``learning`` the indexer's KL summed over
        the queries and their count ``(2,)``
        (:func:`~zoo.attention.modules.lightning_indexer.indexer_kl_terms`), else None."""
        selecting = index_keys.shape[-2] > self.index_topk
        if not (selecting or learning):
            return self._attend(queries, latent, rope_key, offset, context, absorbed), None
        source = x if self.q_lora_rank is None else self.q_norm(queries)
        scores = self.indexer.scores(x.detach(), source.detach(), index_keys, self.rotary, offset, context)
        num_queries, num_keys = scores.shape[-2:]
        visible = context.mask
        if context.is_causal:
            visible = with_causal(visible, num_queries, num_keys, x.device)
        if visible is not None and visible.dim() == 4:  # a key any head sees: (B or 1, Lq or 1, Lk)
            visible = visible.any(dim=1)
        mask = context.mask
        if selecting:
            chosen = top_k_selection(scores, visible, self.index_topk)
            mask = chosen if mask is None else mask & chosen
        sparse = context.replace(mask=mask)
        output = self._attend(queries, latent, rope_key, offset, sparse, absorbed)
        if not learning:
            return output, None
        attention = output.weights
        if attention is None:
            with torch.no_grad():
                qn, qr = self._queries(queries, offset, context)
                options = {"is_causal": context.is_causal, "scale": self.scale}
                attention = latent_attention_weights(qn, qr, latent, rope_key, self._up()[0], mask, **options)
        allowed = torch.ones_like(scores, dtype=torch.bool) if visible is None else visible.expand_as(scores)
        if selecting:
            allowed = allowed & chosen.squeeze(1)
        return output, indexer_kl_terms(scores, attention, allowed)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        queries, down, _ = self._down(x, context, None)
        latent, rope_key = self._latents(down, context.offset, context)
        index_keys = self.indexer.keys(x.detach(), self.rotary, context.offset, context)
        absorbed = self.mode == "absorbed"
        return self._sparse(x, queries, latent, rope_key, index_keys, context.offset, context, absorbed)

    def _hold(  # type: ignore[override]  (DSA's cache holds the index keys too)
        self,
        held: IndexedLatentCache | None,
        x: Tensor,
        latent: Tensor,
        rope_key: Tensor,
        offset: int,
        context: AttentionContext,
    ) -> IndexedLatentCache:
        """``held`` extended by the new positions' latents, rotary keys and index keys."""
        index_keys = self.indexer.keys(x.detach(), self.rotary, offset, context)
        if held is None:
            return IndexedLatentCache(LatentCache(latent, rope_key), index_keys)
        return held.extend(latent, rope_key, index_keys)

    def _read(  # type: ignore[override]
        self,
        x: Tensor,
        queries: Tensor,
        held: IndexedLatentCache,
        offset: int,
        context: AttentionContext,
        absorbed: bool,
    ) -> Tensor:
        cached = held.latent
        return self._sparse(
            x, queries, cached.latent, cached.rope_key, held.index_keys, offset, context, absorbed
        ).output

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", index_topk={self.index_topk}, index_heads={self.indexer.num_heads}, "
            f"index_head_dim={self.indexer.head_dim}, index_loss_weight={self.index_loss_weight}"
        )
