"""The tree over the chunks of log-linear attention's chunkwise form (:mod:`zoo.attention.kernels.log_linear`):
what the earlier chunks add to each chunk's outputs, from each chunk's action on a state as linear
maps (its reads ``P``, its write ``w`` and its transition ``A``: a state ``S`` entering chunk ``c``
adds ``P_c S`` to its outputs and leaves it as ``A_c S + w_c``).

Chunk ``c'`` is at chunk-level ``l = bit_length(c XOR c')`` from chunk ``c``: both in one block of
``2^l`` chunks, ``c'`` in its first half and ``c`` in its second. The level-``l`` state chunk ``c``
reads is the first half's writes carried to ``c``::

    S^(l)_c = A_{c-1} ... A_mid F^(l),      F^(l) = sum_{c' in the first half} A_{mid-1} ... A_{c'+1} w_c'
    o_c += lambda_c^(l) P_c S^(l)_c                                  (c in a second half only)

(``mid`` the block's middle chunk). Two ways to form it, ``n = bit_length(N - 1)`` levels:

* a scalar decay (``A_c = a_c I``, log-linear Mamba-2): up the tree, level by level. ``F^(l)`` is
  the state of a level-``(l-1)`` block, and a block's state is its second half's plus its first
  half's times the second half's decay; the carry to ``c`` is a product of chunk decays. ``2N``
  states in all, ``O(log N)`` batched steps;
* a matrix (the delta rule): a recurrence a level over the chunks, a first half writing, every chunk
  carrying the state through ``A_c``, the state emptied at each block's end; the levels run side by
  side in one :func:`~zoo.attention.kernels.chunk_scan.chunk_scan`, ``n N`` states.

Either way the reads cover the ``(level, chunk)`` pairs of a second half only, about half of ``n N``,
and no Python work is done a chunk (the scan's loop aside). The paper's chunk-level scan merges the level states
as a binary counter at each chunk instead (as the recurrent form does at each step); both give the
same states.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.chunk_scan import chunk_scan

__all__ = ["tree_over_chunks"]


def tree_over_chunks(reads: Tensor, written: Tensor, transition: Tensor, level_weights: Tensor) -> Tensor:
    """What the earlier chunks add to each chunk's outputs ``(*batch, N, C, dv)`` (see the module
    docstring).

    Args:
        reads: ``P`` ``(*batch, N, C, dk)``.
        written: ``w`` ``(*batch, N, dk, dv)``.
        transition: ``A`` ``(*batch, N, dk, dk)``, or ``(*batch, N, 1, 1)`` for a number times ``I``
            (a scalar decay).
        level_weights: ``lambda`` of chunk-levels ``1 .. n`` ``(*batch, N, C, n)``, ``n = bit_length(N - 1)``.
    """
    if transition.shape[-1] == 1:
        return _decayed_tree(reads, written, transition[..., 0, 0], level_weights)
    return _scanned_tree(reads, written, transition, level_weights)


def _decayed_tree(reads: Tensor, written: Tensor, decay: Tensor, level_weights: Tensor) -> Tensor:
    """:func:`tree_over_chunks` for a scalar decay ``a_c`` a chunk ``(*batch, N)``, level by level up
    the tree, with no state a chunk: a block's state (from empty, at its end) is its second half's
    plus its first half's decayed over the second half, and the second half of a level-``l`` block
    reads its first half's state decayed from the block's middle (a product of chunk decays, each at
    most one). The chunks are padded to ``2^n`` (empty, undecaying), so that every level's blocks are
    whole and its second halves are ``2^(n-1)`` chunks; those of every level are gathered once (one
    copy, and one gradient, not one a level)."""
    chunks, levels = written.shape[-3], level_weights.shape[-1]
    pad, size = (1 << levels) - chunks, 1 << (levels - 1)
    reads, state, level_weights = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (reads, written, level_weights))
    block_decay = decay = F.pad(decay, (0, pad), value=1.0)  # block_decay: a block's, as state is
    level = torch.arange(levels).repeat_interleave(size)  # level - 1 of each second half's chunks, level by level
    nth, half = torch.arange(levels * size) % size, 1 << level  # the chunk's place among its level's
    index = (nth // half * 2 * half + half + nth % half).to(reads.device)  # block start, its middle, the offset
    queries = reads.index_select(-3, index).split(size, -3)  # per level (*batch, 2^(n-1), C, dk)
    weights = level_weights.movedim(-1, -3)[..., level.to(reads.device), index, :].split(size, -2)
    since_middle = decay.index_select(-1, index).split(size, -1)  # the decays of each second half's chunks
    contributions = []
    for below, (q, w, a) in enumerate(zip(queries, weights, since_middle)):  # below: level - 1
        blocks, half = size >> below, 1 << below
        first, second = state.unflatten(-3, (blocks, 2)).unbind(-3)  # (*batch, blocks, dk, dv)
        carried = F.pad(a.unflatten(-1, (blocks, half))[..., :-1].cumprod(-1), (1, 0), value=1.0).flatten(-2)
        read = (q.unflatten(-3, (blocks, half)).flatten(-3, -2) @ first).unflatten(-2, (half, -1)).flatten(-4, -3)
        contributions.append((w * carried.unsqueeze(-1)).unsqueeze(-1) * read)  # (*batch, 2^(n-1), C, dv)
        before, after = block_decay.unflatten(-1, (blocks, 2)).unbind(-1)
        state, block_decay = after[..., None, None] * first + second, before * after
    output = reads.new_zeros(*reads.shape[:-1], written.shape[-1])  # (*batch, 2^n, C, dv)
    return output.index_add(-3, index, torch.cat(contributions, -3))[..., :chunks, :, :]


def _scanned_tree(reads: Tensor, written: Tensor, transition: Tensor, level_weights: Tensor) -> Tensor:
    """:func:`tree_over_chunks` for a matrix transition ``A_c`` ``(*batch, N, dk, dk)``: the levels'
    recurrences side by side in one scan, ``n N`` states, then the reads of the ``(level, chunk)``
    pairs of a second half."""
    chunks, dk, dv = written.shape[-3], written.shape[-2], written.shape[-1]
    c, level = torch.arange(chunks), torch.arange(1, level_weights.shape[-1] + 1).unsqueeze(-1)  # (N), (n, 1)
    second_half = (c >> (level - 1)) & 1 == 1  # (n, N), on the CPU: its pairs listed without a device sync
    level_of, chunk_of = (index.to(written.device) for index in second_half.nonzero(as_tuple=True))
    kept = (c + 1) % (1 << level) != 0  # the state passes on to the next chunk in its block
    second_half, kept = (x.to(written.device, written.dtype)[..., None, None] for x in (second_half, kept))
    update = written.unsqueeze(-4) * (1 - second_half)  # (*batch, n, N, dk, dv): the first halves write
    eye = torch.eye(dk, dtype=written.dtype, device=written.device).expand(chunks, dk, dk)
    # the scan's S <- D S + I (U + W S) with D = 0, U the write and W the kept transition
    entering, _, _ = chunk_scan(
        written.new_zeros(dk, dv),
        written.new_zeros(chunks, 1, 1),
        values=update,
        from_state=transition.unsqueeze(-4) * kept,
        written=eye,
    )
    # the reads: only the (level, chunk) pairs of a second half, about half of them
    weights = level_weights.movedim(-1, -3)[..., level_of, chunk_of, :]  # (*batch, pairs, C)
    read = weights.unsqueeze(-1) * (reads[..., chunk_of, :, :] @ entering[..., level_of, chunk_of, :, :])
    return read.new_zeros(*read.shape[:-3], chunks, *read.shape[-2:]).index_add(-3, chunk_of, read)
