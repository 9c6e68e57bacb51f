"""Local (sliding-window) attention: each query attends only to the keys in a window around it.

Which keys ``j`` a query at position ``p`` sees:

* non-causal: ``|p - j| <= window // 2``, the query's own position and ``window // 2`` keys on
  each side (``window + 1`` keys for an even ``window``, as in Longformer);
* causal: ``0 <= p - j < window``, its own position and the ``window - 1`` before it.

The computation is blockwise, so time and memory grow as ``O(L * window)``, never as ``L x L``:
queries are cut into blocks of ``block_size``; the keys one block can reach (``block_size`` plus
the window's width minus one) are cut out of the zero-padded keys as ``unfold`` views; the blocks
then form one batch of small attention problems, each masked to the exact window, for the fused
:func:`~torch.nn.functional.scaled_dot_product_attention` (an explicit softmax when weights are
asked for). On CPU its flash kernel keeps one log-sum-exp per query and recomputes the block
scores in backward, so nothing of size ``O(L * span)`` is kept: forward and backward took half
the time of a hand-written recomputing kernel here and grew linearly to 16k tokens
(``docs/results/speed.md``, every variant over 1k to 16k tokens). A learned bias (``relative_bias``,
``t5``) needs its gradient, which sends SDPA to its math path; that path still beat the hand-written
kernel by 1.8x at 16k. When the window spans nearly the whole sequence, one block costs less and is
used instead. Padding masks are read at the scored (query, key) pairs only
(:func:`~zoo.attention.contract.masking.mask_at`); a caller's own ``(Lq, Lk)`` mask is read the same
way, though building it cost the caller ``O(L^2)``.

Positions: causal query ``i`` of ``Lq`` sits at key position ``i + Lk - Lq`` (bottom-right, as
everywhere in the zoo), so a decoder step over cached keys (``Lq = 1``) scores only the last
``window`` keys. A non-causal window needs queries and keys of one sequence (``Lq == Lk``): a
window over the positions of *another* sequence has no meaning, so ``local`` cannot serve as
cross-attention (:attr:`~zoo.Attention.supports_cross_attention` is False).

Relative position bias (``relative_bias=True``): a learned scalar per head and per query-key
distance the window holds is added to the scaled scores, as in T5 and Swin. It starts at zero
(plain local attention) and gives a model without positional encoding a sense of direction: a
symmetric window otherwise reads a word's neighbours as a bag, the same on either side. Inside a
multi-head layer the layer passes its ``num_heads``; the bias then needs the head axis at ``-3``
of the queries, as the layer lays them out.

A positional bias scheme (``position_bias``: ``alibi``, ``t5``) is evaluated at the scored
(query, key) positions of each block only, never on the ``L x L`` grid.

With ``need_weights=True`` the block weights are also scattered into a dense ``(*batch, Lq, Lk)``
tensor (for heatmaps): that costs ``O(Lq * Lk)`` memory, so ask for it on short inputs only.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import (
    AttentionOutput,
    PositionBias,
)
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import mask_at, masked_softmax
from zoo.attention.kernels import block_attention, flex, rows_from
from zoo.attention.modules.flex_variant import FlexVariant
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["LocalAttention"]


@register_attention("local", aliases=("sliding_window",))
class LocalAttention(FlexVariant, ScaledDotScores):
    """Scaled dot-product attention within a sliding window (see the module docstring).

    Args:
        window: Width of the window: a causal query sees itself and the ``window - 1`` keys
            before it; a non-causal one ``window // 2`` keys on each side of itself.
        block_size: Queries per block; ``None`` takes half the window. Smaller blocks score fewer
            keys outside the window; larger ones make fewer, bigger matrix products.
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
        relative_bias: Learn a bias per head and per query-key distance (see the module docstring).
        num_heads: Heads the bias is learned for; a multi-head layer passes its own.
    """

    family = "sparse"
    cost = "L"

    supports_cross_attention: ClassVar[bool] = False
    has_fused_path: ClassVar[bool] = True
    supports_position_bias: ClassVar[bool] = True

    def __init__(
        self,
        window: int = 128,
        block_size: int | None = None,
        dropout: float = 0.0,
        scale: float | None = None,
        relative_bias: bool = False,
        num_heads: int = 1,
    ) -> None:
        super().__init__(dropout, scale)
        self.require_positive(window=window, block_size=block_size, num_heads=num_heads)
        self.window, self.block_size = window, block_size
        # distances query - key from -(window // 2) (non-causal, ahead) to window - 1 (causal, behind)
        self.relative_bias = nn.Parameter(torch.zeros(num_heads, window // 2 + window)) if relative_bias else None

    @property
    def causal_reach(self) -> int:
        """A causal query reads itself and the ``window - 1`` positions before it: a multi-head
        layer decodes from a cache of the last ``window - 1`` (:meth:`zoo.attention.modules.headed.HeadedAttention.attend_cached`)."""
        return self.window

    def check_layout(self, queries: Tensor, keys: Tensor, is_causal: bool) -> None:
        """A non-causal window needs ``Lq == Lk``, and a bias learned for several heads needs them
        at dimension -3."""
        self.check_one_sequence(queries, keys, is_causal, "window")
        heads = 0 if self.relative_bias is None else len(self.relative_bias)
        if heads > 1 and (queries.dim() < 3 or queries.shape[-3] != heads):
            raise ValueError(
                f"LocalAttention: the relative bias is learned for {heads} heads, so queries need "
                f"them at dimension -3, as (batch, heads, length, d); got shape {tuple(queries.shape)}. "
                "Use the layer's own head count, or num_heads=1 to share one bias across a batch."
            )

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """FlexAttention where the backend takes it (:mod:`zoo.attention.modules.flex_variant`); else
        blockwise attention within the window, ``mask`` and ``position_bias`` read only at the
        scored pairs."""
        if (flexed := self.attend_flex(queries, keys, values, context)) is not None:
            return flexed
        mask, is_causal, need_weights, position_bias = (
            context.mask,
            context.is_causal,
            context.need_weights,
            context.position_bias,
        )
        before, after = (self.window - 1, 0) if is_causal else (self.window // 2, self.window // 2)
        return self._attend_blocks(queries, keys, values, mask, before, after, need_weights, position_bias)

    def _attend_blocks(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None,
        before: int,
        after: int,
        need_weights: bool,
        position_bias: PositionBias | None,
    ) -> AttentionOutput:
        """Attend from each block of queries over the keys from ``before`` positions before its
        first query to ``after`` positions after its last one."""
        num_queries, num_keys = queries.shape[-2], keys.shape[-2]
        offset = num_keys - num_queries  # key position of query 0 (bottom-right alignment)
        block = min(self.block_size or max(1, (before + after + 1) // 2), num_queries)
        if math.ceil(num_queries / block) * block * (block + before + after) >= num_queries * num_keys:
            block = num_queries  # the window spans (nearly) everything: one block scores less
        num_blocks = math.ceil(num_queries / block)
        span = block + before + after  # keys one block can reach
        first = offset - before  # key position of block 0's first key
        if num_blocks == 1:  # a single block reaches every key from `first` on: score only those
            first = max(first, 0)
            span = num_keys - first

        device = queries.device
        starts = torch.arange(num_blocks, device=device).unsqueeze(-1) * block  # (nb, 1)
        query_index = (starts + torch.arange(block, device=device)).unsqueeze(-1)  # (nb, block, 1)
        key_pos = (first + starts + torch.arange(span, device=device)).unsqueeze(-2)  # (nb, 1, span)
        distance = query_index + offset - key_pos  # query position - key position
        keep = (distance <= before) & (distance >= -after) & (key_pos >= 0) & (key_pos < num_keys)
        key_index = key_pos.clamp(0, num_keys - 1)
        if mask is not None:
            keep = keep & mask_at(mask, query_index.clamp(max=num_queries - 1), key_index)

        padded_q = rows_from(queries, 0, num_blocks * block)  # (*batch, nb * block, d)
        padded_k, padded_v = (rows_from(t, first, (num_blocks - 1) * block + span) for t in (keys, values))
        scale = self.dot_scale(queries)
        bias = self._bias_at(distance, queries.dtype)
        if position_bias is not None:  # (heads, nb, block, span): at the block's scored pairs only
            scheme_bias = position_bias(query_index + offset, key_pos).to(queries.dtype)
            bias = scheme_bias if bias is None else bias + scheme_bias
        q = padded_q.unflatten(-2, (num_blocks, block))  # (*batch, nb, block, d)
        k = padded_k.unfold(-2, span, block)  # (*batch, nb, d, span): views, no copy
        v = padded_v.unfold(-2, span, block).transpose(-2, -1)  # (*batch, nb, span, dv)
        if not need_weights:  # the blocks are ordinary attention problems for the fused kernel
            attn_mask = keep if bias is None else torch.where(keep, bias, float("-inf"))
            heads = block_attention(q, k.transpose(-2, -1), v, attn_mask, dropout_p=self.active_dropout, scale=scale)
            return AttentionOutput(heads.flatten(-3, -2)[..., :num_queries, :], None)
        scores = torch.matmul(q, k) * scale
        weights = masked_softmax(scores if bias is None else scores + bias, mask=keep)  # (*batch, nb, block, span)
        output = torch.matmul(self.dropout(weights), v).flatten(-3, -2)[..., :num_queries, :]
        # out-of-range keys have weight 0, so adding them onto a clamped column changes nothing
        dense = weights.new_zeros((*weights.shape[:-1], num_keys)).scatter_add(
            -1, key_index.expand_as(weights), weights
        )
        return AttentionOutput(output, dense.flatten(-3, -2)[..., :num_queries, :])

    def flex_pattern(self, num_keys: int, is_causal: bool, device: torch.device) -> flex.FlexMask:
        """The window, on positions."""
        return flex.sliding_window(self.window, is_causal=is_causal)

    def flex_scores(self, length: int, device: torch.device) -> list[flex.ScoreMod]:
        """The learned relative bias, a table over the distance ``p - j`` (its column
        ``p - j + window // 2``, clamped as :meth:`_bias_at` reads it)."""
        if self.relative_bias is None:
            return []
        columns = (self.window // 2 - flex.relative_distances(length, device)).clamp(0, self.relative_bias.shape[1] - 1)
        return [flex.bucketed_bias(self.relative_bias, columns)]

    def _bias_at(self, distance: Tensor, dtype: torch.dtype) -> Tensor | None:
        """The learned bias at each (block, query, key) ``distance``: ``(heads, nb, block, span)``
        for several heads, ``(nb, block, span)`` for one; distances outside the window are masked
        anyway and read a clamped entry."""
        if self.relative_bias is None:
            return None
        index = (distance + self.window // 2).clamp(0, self.relative_bias.shape[1] - 1)
        bias = self.relative_bias[:, index].to(dtype)
        return bias.squeeze(0) if len(self.relative_bias) == 1 else bias

    def extra_repr(self) -> str:
        block = f", block_size={self.block_size}" if self.block_size is not None else ""
        scale = f", scale={self.scale}" if self.scale is not None else ""
        relative = (
            f", relative_bias=True, num_heads={len(self.relative_bias)}" if self.relative_bias is not None else ""
        )
        return f"window={self.window}{block}{scale}{relative}"
