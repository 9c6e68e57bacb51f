"""Sparse attention patterns computed blockwise: the shared machinery of ``longformer``, ``bigbird`` and ``sparse``.

A pattern says which key positions ``j`` a query at position ``p`` may see. Such patterns have
two parts, and a subclass of :class:`SparsePatternAttention` states both:

* :meth:`~SparsePatternAttention.candidates`: for each block of ``block_size`` query positions,
  a short list of key positions that holds every key any query of the block may see (a window
  around the block, global positions, random or summary positions). Its length ``S`` sets the
  cost: time and memory ``O(L / block_size * block_size * S)``, never ``L x L``.
* :meth:`~SparsePatternAttention.allowed`: the exact rule, evaluated only on those candidates.
* Optionally :meth:`~SparsePatternAttention.global_queries`: positions that see every key; their
  rows are computed densely (``O(g L)``).

The base class cuts queries into blocks aligned on key positions (query ``i`` sits at key
position ``i + Lk - Lq``, bottom-right, as everywhere in the zoo), gathers each block's candidate
keys, drops out-of-range and repeated candidates, applies the rule, causality (``j <= p``) and the
padding mask read at the scored pairs only (:func:`~zoo.attention.contract.masking.mask_at`), and runs each
block through the fused :func:`~torch.nn.functional.scaled_dot_product_attention` (an explicit
masked softmax when weights are asked for, scattered into a dense ``(Lq, Lk)`` tensor: ask for
those on short inputs only).

A pattern is defined by positions within one sequence: these variants take queries and keys of
one sequence (``Lq == Lk``; fewer queries only when causal, as in cached decoding).

Decoding: a pattern that states which positions its later causal queries can still read
(``causal_keeps(positions, length)``, ``sparse``'s current block and summaries) lets a multi-head
layer drop the rest from its cache (:class:`~zoo.attention.contract.cache.PatternCache`); the held
keys are then not contiguous, and :meth:`~SparsePatternAttention.attend_at` reads them at their
positions, the rule applied densely over the few held.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import mask_at, masked_softmax
from zoo.attention.kernels import block_attention, rows_from
from zoo.attention.kernels.sdpa import masked_sdpa
from zoo.attention.modules.flex_variant import FlexVariant
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["SparsePatternAttention"]


class SparsePatternAttention(FlexVariant, ScaledDotScores):
    """Scaled dot-product attention restricted to a sparse pattern of positions (see the module docstring).

    Args:
        block_size: Query positions per block (a block shares one list of candidate keys).
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    supports_cross_attention: ClassVar[bool] = False
    supports_position_bias: ClassVar[bool] = False
    has_fused_path: ClassVar[bool] = True

    def __init__(self, block_size: int, dropout: float = 0.0, scale: float | None = None) -> None:
        super().__init__(dropout, scale)
        self.require_positive(block_size=block_size)
        self.block_size = block_size

    # -- what a pattern states -------------------------------------------------------------------

    def candidates(self, blocks: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        """Key positions ``(nb, S)`` holding every key the queries of each block may see.

        ``blocks`` holds block indices: block ``b`` covers positions ``b * block_size`` to
        ``(b + 1) * block_size - 1``. Positions outside ``[0, num_keys)`` and repeats are ignored.
        """
        raise NotImplementedError

    def allowed(self, query_pos: Tensor, key_pos: Tensor, num_keys: int, is_causal: bool) -> Tensor:
        """Whether a query at ``query_pos`` may see the key at ``key_pos`` (broadcasting tensors).

        Causality (``key_pos <= query_pos``) is applied by the base class on top of this rule."""
        raise NotImplementedError

    def global_queries(self, num_keys: int, device: torch.device) -> Tensor | None:
        """Positions whose queries see every key (dense rows), or None."""
        return None

    # -- the computation -------------------------------------------------------------------------

    def check_layout(self, queries: Tensor, keys: Tensor, is_causal: bool) -> None:
        """A non-causal pattern needs queries and keys of one sequence."""
        self.check_one_sequence(queries, keys, is_causal, "pattern")

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """FlexAttention where the backend takes it (:mod:`zoo.attention.modules.flex_variant`); else
        blockwise attention over each block's candidate keys, then the dense global rows."""
        if (flexed := self.attend_flex(queries, keys, values, context)) is not None:
            return flexed
        mask, is_causal, need_weights = context.mask, context.is_causal, context.need_weights
        num_queries, num_keys = queries.shape[-2], keys.shape[-2]
        offset = num_keys - num_queries  # key position of query 0 (bottom-right)
        block = self.block_size
        lead = offset % block  # query rows before query 0 that align blocks on key positions
        num_blocks = math.ceil((lead + num_queries) / block)
        device = queries.device
        blocks = torch.arange(num_blocks, device=device) + (offset - lead) // block
        key_pos = self._unique(self.candidates(blocks, num_keys, is_causal), num_keys)  # (nb, S), -1 = none
        query_pos = (blocks.unsqueeze(-1) * block + torch.arange(block, device=device)).unsqueeze(-1)  # (nb, block, 1)
        query_index = query_pos - offset  # row of each query, out of [0, Lq) for the alignment rows
        key_pos = key_pos.unsqueeze(-2)  # (nb, 1, S)
        keep = (key_pos >= 0) & (query_index >= 0) & (query_index < num_queries)
        keep = keep & self.allowed(query_pos, key_pos, num_keys, is_causal)
        if is_causal:
            keep = keep & (key_pos <= query_pos)
        key_index = key_pos.clamp(0, num_keys - 1)
        if mask is not None:
            keep = keep & mask_at(mask, query_index.clamp(0, num_queries - 1), key_index)

        q = rows_from(queries, -lead, num_blocks * block).unflatten(-2, (num_blocks, block))  # (*batch, nb, block, d)
        k, v = keys[..., key_index.squeeze(-2), :], values[..., key_index.squeeze(-2), :]  # (*batch, nb, S, d)
        scale = self.dot_scale(queries)
        if need_weights:
            weights = masked_softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, mask=keep)  # (*batch, nb, block, S)
            output = torch.matmul(self.dropout(weights), v)
            # candidates that are not kept have weight 0, so adding them onto a clamped column changes nothing
            dense = weights.new_zeros((*weights.shape[:-1], num_keys)).scatter_add(
                -1, key_index.expand_as(weights), weights
            )
            dense = dense.flatten(-3, -2)[..., lead : lead + num_queries, :]
        else:
            output = block_attention(q, k, v, keep, dropout_p=self.active_dropout, scale=scale)
            dense = None
        output = output.flatten(-3, -2)[..., lead : lead + num_queries, :]
        rows = self.global_queries(num_keys, device)
        if rows is not None:
            output, dense = self._global_rows(
                queries, keys, values, mask, rows - offset, offset, is_causal, scale, output, dense
            )
        return AttentionOutput(output, dense)

    def _global_rows(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None,
        rows: Tensor,
        offset: int,
        is_causal: bool,
        scale: float,
        output: Tensor,
        dense: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        """Recompute the rows of global queries over every key (``O(g L)``) and put them in place."""
        rows = rows[(rows >= 0) & (rows < queries.shape[-2])]
        if rows.numel() == 0:
            return output, dense
        key_pos = torch.arange(keys.shape[-2], device=keys.device)
        keep = torch.ones(len(rows), keys.shape[-2], dtype=torch.bool, device=keys.device)
        if is_causal:
            keep = key_pos <= (rows + offset).unsqueeze(-1)
        if mask is not None:
            keep = keep & mask_at(mask, rows.unsqueeze(-1), key_pos)
        q = queries[..., rows, :]
        weights = masked_softmax(torch.matmul(q, keys.transpose(-2, -1)) * scale, mask=keep)  # (*batch, g, Lk)
        output = output.index_copy(-2, rows, torch.matmul(self.dropout(weights), values).to(output.dtype))
        if dense is not None:
            dense = dense.index_copy(-2, rows, weights.to(dense.dtype))
        return output, dense

    def attend_at(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        query_pos: Tensor,
        key_pos: Tensor,
        context: AttentionContext,
    ) -> Tensor:
        """Causal attention of queries at ``query_pos`` ``(Lq,)`` over keys held at ``key_pos``
        ``(S,)`` (a decoder's cache that dropped what the pattern no longer reads): the rule and
        causality on those positions, dense over the held keys. The context's mask broadcasts to
        ``(*batch, Lq, S)``; returns the output ``(*batch, Lq, dv)``."""
        keys, values = self._expand_groups(queries, keys, values)
        query_pos, key_pos = query_pos.unsqueeze(-1), key_pos.unsqueeze(-2)
        keep = self.allowed(query_pos, key_pos, int(query_pos.max()) + 1, True) & (key_pos <= query_pos)
        if context.mask is not None:
            keep = keep & context.mask
        return masked_sdpa(queries, keys, values, keep, dropout_p=self.active_dropout, scale=self.dot_scale(queries))

    @staticmethod
    def _unique(positions: Tensor, num_keys: int) -> Tensor:
        """``positions`` sorted per row, with repeats and positions out of ``[0, num_keys)`` set to -1."""
        positions = torch.where((positions >= 0) & (positions < num_keys), positions, -1).sort(-1).values
        repeat = torch.zeros_like(positions, dtype=torch.bool)
        repeat[..., 1:] = positions[..., 1:] == positions[..., :-1]
        return positions.masked_fill(repeat, -1)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}" + (f", scale={self.scale}" if self.scale is not None else "")
