"""Long inputs a block of queries at a time, for attentions whose weights are each query's own.

An attention that scores every pair and maps a query's scores to its weights without looking at
other queries' (a sigmoid, softpick, stick-breaking) holds a ``(*batch, Lq, Lk)`` score grid and
its weights, and autograd keeps both for the backward pass: at 8k tokens and 8 heads each is
2 GiB in float32, and the forward and backward of one layer ran this 24 GiB machine out of memory
(``docs/results/matrix.md``, the speed column). :class:`RowBlocked` runs such an attention over
blocks of :data:`ROW_BLOCK_QUERIES` queries once the grid passes :data:`ROW_BLOCK_SCORES`, each
block under activation checkpointing (:func:`torch.utils.checkpoint.checkpoint`) when gradients are
on: a block's scores are recomputed in the backward pass instead of kept, so memory holds one
block's grid, at the price of one more forward of the scores. A causal block scores only the keys
up to its last query, which keeps it aligned bottom-right (a weight rule that reads a query's
position, stick-breaking's, sees the same one) and leaves out the grid's hidden half. The result is
the same computation, a block of rows at a time (tests, float64).

Its blocks hold :data:`ROW_BLOCK_QUERIES` queries and run last first, because of the heap the zoo's
commands keep (:mod:`zoo.allocator`: freed memory stays with the process and serves later
requests). A freed block's memory serves a later block only if that block is no larger; causal
blocks grow with their keys, so in blocks of 1,024 run first to last each took fresh memory, and
``softpick``'s forward and backward in a self-attention layer at 8k tokens and 8 heads held 9.6 GB
resident (``stick_breaking`` 11.4 GB) where its tensors peak at 2.4 GB, and 16k ran out of memory.
In blocks of 128, last first, the same steps hold 1.2 and 1.5 GB, 16k fits (2.4 and 3.1 GB), and a
step is 10-25% faster (``docs/results/speed.md``, the scoring attentions a block of 128 queries at
a time). Of the layers that form their own grids and call :func:`checkpointed_blocks` in blocks of
:data:`~zoo.attention.kernels.chunking.QUERY_CHUNK`, ``msa`` runs them last first too (a training
step at 8k held 5.5 GB where first to last held 9.5, and 16k fits); ``forgetting``,
``path_attention`` and ``dsa`` run first to last, where the order moved their peaks little, and
smaller blocks ran them slower.

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

__all__ = [
    "ROW_BLOCK_ELEMENTS",
    "ROW_BLOCK_QUERIES",
    "ROW_BLOCK_SCORES",
    "RowBlocked",
    "checkpointed_blocks",
    "rows_of",
]

Block = TypeVar("Block")

ROW_BLOCK_ELEMENTS = 2**27
"""Scores past which the layers that form their own grids (:func:`checkpointed_blocks`' callers) run
them in blocks of queries: 512 MiB in float32 (8 heads at 4k tokens)."""

ROW_BLOCK_SCORES = 2**24
"""Scores past which :class:`RowBlocked` runs in blocks: 64 MiB in float32 (8 heads at 1,448 tokens).
Its blocks ran faster than the whole grid past it: ``softpick`` at 8 heads, one sequence, 0.34 s
against 0.42 s at 2k tokens and 1.1 s against 1.6-4.6 s at 4k (in 0.8 GB where the whole grid
took 12); at the recall model's 64 sequences of 256 tokens and 2 heads (8.4 million scores) the
whole grid was 5% faster."""

ROW_BLOCK_QUERIES = 128
"""Queries a block of :class:`RowBlocked` (module docstring): 128 ran ``softpick`` at 8k tokens and 8
heads 10% faster than 1,024, and in less memory the smaller the blocks (64 less still, no faster)."""


def checkpointed_blocks(
    run: Callable[[int, int], Block], length: int, size: int, *, recompute: bool = True, last_first: bool = False
) -> list[Block]:
    """``run(start, end)`` over consecutive blocks of ``size`` of ``length`` queries, returned in
    order; each block under activation checkpointing when gradients are on and ``recompute``, so
    that the backward pass recomputes a block's grid rather than keeping every block's.
    ``last_first`` runs the last block first (:class:`RowBlocked`, ``msa``; the module docstring says why)."""
    checkpointed = recompute and torch.is_grad_enabled()
    starts = range(0, length, size)
    blocks = [
        checkpoint(run, start, min(start + size, length), use_reentrant=False)
        if checkpointed
        else run(start, min(start + size, length))
        for start in (reversed(starts) if last_first else starts)
    ]
    return blocks[::-1] if last_first else blocks


def rows_of(context: AttentionContext, start: int, end: int, *, earlier: int = 0) -> AttentionContext:
    """``context`` for the queries ``start .. end - 1`` of a causal call's new positions over the
    keys up to the last of them, ``earlier + end`` (``earlier``: the positions before the new ones,
    a cache's): a mask's query rows (where it has them) and key columns cut to those."""
    rows = _rows(context.mask, slice(start, end))
    if rows is None:
        return context
    return context.replace(mask=rows[..., : earlier + end] if rows.shape[-1] > 1 else rows)


def _rows(tensor: Tensor | None, rows: slice) -> Tensor | None:
    """``tensor``'s query rows ``rows`` (its axis -2), or itself where it broadcasts over them."""
    return tensor if tensor is None or tensor.dim() < 2 or tensor.shape[-2] == 1 else tensor[..., rows, :]


class RowBlocked(Attention):
    """An attention whose :meth:`score` and :meth:`weigh` read each query alone, run a block of
    queries at a time past :data:`ROW_BLOCK_SCORES` scores (see the module docstring). A mixin:
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
        if grid <= ROW_BLOCK_SCORES or context.need_weights or context.position_bias is not None:
            return super().attend(queries, keys, values, context)
        earlier = num_keys - num_queries

        def run(start: int, end: int) -> Tensor:
            if context.is_causal:  # the keys up to the block's last query: the block stays aligned bottom-right
                block, seen = rows_of(context, start, end, earlier=earlier), earlier + end
            else:
                block, seen = context.replace(mask=_rows(context.mask, slice(start, end))), num_keys
            part = (queries[..., start:end, :], keys[..., :seen, :], values[..., :seen, :])
            return super(RowBlocked, self).attend(*part, block).output

        blocks = checkpointed_blocks(
            run, num_queries, ROW_BLOCK_QUERIES, recompute=self.checkpoint_row_blocks, last_first=True
        )
        return AttentionOutput(torch.cat(blocks, dim=-2), None)
