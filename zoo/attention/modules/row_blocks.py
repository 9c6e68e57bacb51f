"""Long inputs a block of queries at a time, for attentions whose weights are each query's own.

An attention that scores every pair and maps a query's scores to its weights without looking at
other queries' (a sigmoid, softpick, stick-breaking) holds a ``(*batch, Lq, Lk)`` score grid and
its weights, and autograd keeps both for the backward pass: at 8k tokens and 8 heads each is
2 GiB in float32, and the forward and backward of one layer ran this 24 GiB machine out of memory
(``docs/results/matrix.md``, the speed column). :class:`RowBlocked` runs such an attention over
blocks of :data:`~zoo.attention.kernels.chunking.QUERY_CHUNK` queries once the grid passes
:data:`ROW_BLOCK_ELEMENTS`, each block under activation checkpointing
(:func:`torch.utils.checkpoint.checkpoint`) when gradients are on: a block's scores are recomputed
in the backward pass instead of kept, so memory holds one block's grid, at the price of one more
forward of the scores. A causal block scores only the keys up to its last query, which keeps it
aligned bottom-right (a weight rule that reads a query's position, stick-breaking's, sees the
same one) and leaves out the grid's hidden half. The result is the same computation, a block of
rows at a time (tests, float64).

Left whole: a call that asks for the weights (they are the grid) or adds a position bias (its grid
is laid out for the whole query axis).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, TypeVar

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from zoo.attention.contract.base import Attention, AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.chunking import QUERY_CHUNK

__all__ = ["ROW_BLOCK_ELEMENTS", "RowBlocked", "checkpointed_blocks", "rows_of"]

Block = TypeVar("Block")

ROW_BLOCK_ELEMENTS = 2**27
"""Scores past which the grid runs in blocks of queries: 512 MiB in float32 (8 heads at 4k tokens)."""


def checkpointed_blocks(run: Callable[[int, int], Block], length: int, size: int) -> list[Block]:
    """``run(start, end)`` over consecutive blocks of ``size`` of ``length`` queries, in order: each
    block under activation checkpointing when gradients are on, so that the backward pass recomputes
    a block's grid rather than keeping every block's (for layers that form their scores themselves;
    :class:`RowBlocked` does this for the attentions that score per query)."""
    recompute = torch.is_grad_enabled()
    return [
        checkpoint(run, start, min(start + size, length), use_reentrant=False)
        if recompute
        else run(start, min(start + size, length))
        for start in range(0, length, size)
    ]


def rows_of(context: AttentionContext, start: int, end: int, *, earlier: int = 0) -> AttentionContext:
    """``context`` for the queries ``start .. end - 1`` of a causal call's new positions over the
    keys up to the last of them, ``earlier + end`` (``earlier``: the positions before the new ones,
    a cache's): a mask's query rows (where it has them) and key columns cut to those."""
    mask = context.mask
    if mask is None:
        return context
    rows = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., start:end, :]
    return context.replace(mask=rows[..., : earlier + end] if rows.shape[-1] > 1 else rows)


def _rows(tensor: Tensor | None, rows: slice) -> Tensor | None:
    """``tensor``'s query rows ``rows`` (its axis -2), or itself where it broadcasts over them."""
    return tensor if tensor is None or tensor.shape[-2] == 1 else tensor[..., rows, :]


class RowBlocked(Attention):
    """An attention whose :meth:`score` and :meth:`weigh` read each query alone, run a block of
    queries at a time past :data:`ROW_BLOCK_ELEMENTS` scores (see the module docstring). A mixin:
    list it before the attention's base, ``class SigmoidAttention(RowBlocked, ScaledDotScores)``.
    A call with a position bias runs whole, through the base's :meth:`attend`, so the mixin takes
    one as the base class's score path does; a variant that does not declares it False itself."""

    supports_position_bias: ClassVar[bool] = True
    #: recompute each block's scores in the backward pass rather than keep them; False for an
    #: attention whose score function keeps little already (``additive`` recomputes its hidden layer)
    checkpoint_row_blocks: ClassVar[bool] = True

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        num_queries, num_keys = queries.shape[-2], keys.shape[-2]
        grid = math.prod(torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2])) * num_queries * num_keys
        if grid <= ROW_BLOCK_ELEMENTS or context.need_weights or context.position_bias is not None:
            return super().attend(queries, keys, values, context)
        recompute = self.checkpoint_row_blocks and torch.is_grad_enabled()
        outputs = []
        for start in range(0, num_queries, QUERY_CHUNK):
            rows = slice(start, start + QUERY_CHUNK)
            # causal: the keys up to the block's last query, so the block stays aligned bottom-right
            seen = min(start + QUERY_CHUNK, num_queries) + num_keys - num_queries if context.is_causal else num_keys
            mask = None if context.mask is None else _rows(context.mask, rows)[..., :seen]
            block = context.replace(mask=mask)

            def run(q: Tensor, k: Tensor, v: Tensor, block: AttentionContext = block) -> Tensor:
                return super(RowBlocked, self).attend(q, k, v, block).output

            part = (queries[..., rows, :], keys[..., :seen, :], values[..., :seen, :])
            outputs.append(checkpoint(run, *part, use_reentrant=False) if recompute else run(*part))
        return AttentionOutput(torch.cat(outputs, dim=-2), None)
