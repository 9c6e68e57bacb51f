"""Attention over key blocks each query selects: the machinery of MoBA (Lu et al., 2025) and of
Native Sparse Attention's selection branch (Yuan et al., 2025).

Keys are cut into blocks of ``block_size`` positions from the first (block ``j`` holds positions
``j * block_size ..``); each query picks a few blocks by a score, and attends, by softmax, over
the keys of the blocks it picked, causally (a key after the query is never seen, in its own
block either). What is here:

* :func:`top_blocks`: the ``count`` best blocks per query from scores in which ``+inf`` marks a
  block that must be taken and ``-inf`` one that may not, ``-1`` where fewer are allowed;
* :func:`block_means`: each block's mean key over its real (unpadded) keys, MoBA's gate keys;
* :func:`overlap_sums`: scores of compressed tokens (blocks of ``length`` keys every ``stride``
  positions) summed onto the selection blocks they overlap, weighted by the overlap in strides
  (NSA's equation 9);
* :func:`selected_block_attention`: each query's softmax attention over the keys of its blocks,
  and the dense ``(Lq, Lk)`` weights for heatmaps on request.

Costs: up to :data:`DENSE_KEYS` keys the selection is a boolean mask over the dense scores, run
in the fused kernel (MoBA's reference's way, ``O(L^2 d)``); beyond it the blocks are gathered per
query. Gathering makes a query's attention cost ``O(n * block_size * d)`` for ``n`` blocks, so a
sequence costs ``O(L * n * block_size * d)`` in time and in the memory autograd keeps (the gathered
keys and values), not ``O(L^2)``. Whole blocks are gathered at once (advanced indexing over the
block axis, rows of ``block_size * d``: measured here 1.4 times faster than gathering key by
key), and queries are taken in chunks of at most :data:`GATHERED_KEYS` gathered keys a head,
which bounds the forward's temporary memory; the dense weights, when asked for, are
``O(Lq * Lk)``. The copies dominate on a CPU: MoBA's own reference, which masks the dense
``(L, L)`` scores, was faster at 1k and 4k tokens and slower at 8k (8 heads of 64, blocks of 64,
``top_k`` 3, one thread on a loaded 2-core machine: ``benchmarks/moba_reference.py --time``).

Conventions: queries ``(B, H, Lq, d)``, keys and values ``(B, G, Lk, d)`` with ``G`` dividing
``H`` (grouped heads: the ``H / G`` query heads of a group share its keys and its selection);
query ``i`` sits at position ``Lk - Lq + i`` (bottom-right, as in cached decoding); ``key_padding``
``(B, 1 or G, Lk)`` is True at real keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.contract.masking import masked_softmax
from zoo.attention.kernels.sdpa import masked_sdpa

__all__ = ["DENSE_KEYS", "GATHERED_KEYS", "block_means", "overlap_sums", "selected_block_attention", "top_blocks"]

DENSE_KEYS = 4096
"""Keys up to which the selection masks the dense scores instead of gathering blocks: the dense
form was the faster at 1k and 4k tokens and the slower at 8k (above), and at MQAR's 256 tokens
and batch 64 gathering made a MoBA step several times slower (``docs/results/speed.md``, block
selection's masked form)."""

GATHERED_KEYS = 1 << 16
"""Gathered keys per head and batch row in one chunk of queries (the chunk's temporary memory)."""


def top_blocks(scores: Tensor, count: int) -> Tensor:
    """The ``count`` highest-scoring blocks per query ``(..., count)`` (long), from ``scores``
    ``(..., N)`` in which ``+inf`` forces a block and ``-inf`` forbids one; ``-1`` fills the places
    of forbidden blocks when fewer than ``count`` are allowed."""
    values, indices = scores.topk(min(count, scores.shape[-1]), dim=-1)
    indices = torch.where(values == float("-inf"), indices.new_full((), -1), indices)
    return F.pad(indices, (0, count - indices.shape[-1]), value=-1)


def block_means(keys: Tensor, block_size: int, key_padding: Tensor | None) -> tuple[Tensor, Tensor]:
    """Each complete or partial block's mean key over its real keys ``(B, G, N, d)``, and whether
    it holds any ``(B, G, N)``; ``N = ceil(Lk / block_size)``."""
    length = keys.shape[-2]
    real = keys.new_ones(keys.shape[:-1]) if key_padding is None else key_padding.expand(keys.shape[:-1]).to(keys.dtype)
    pad = -length % block_size
    summed = F.pad(keys * real.unsqueeze(-1), (0, 0, 0, pad)).unflatten(-2, (-1, block_size)).sum(-2)
    counts = F.pad(real, (0, pad)).unflatten(-1, (-1, block_size)).sum(-1)
    return summed / counts.clamp(min=1).unsqueeze(-1), counts > 0


def overlap_sums(scores: Tensor, length: int, stride: int, block_size: int, num_blocks: int) -> Tensor:
    """Scores of compressed tokens ``(..., C)`` (token ``i`` over positions ``i * stride`` to
    ``i * stride + length - 1``) summed onto ``num_blocks`` selection blocks of ``block_size``
    positions, each token weighted by its overlap with the block in strides: ``(..., num_blocks)``.

    That is NSA's ``p_slc[j] = sum_m sum_n p_cmp[(l'/d) j + m - n]`` (``m < l'/d``, ``n < l/d``) with
    tokens indexed by their first stride; ``stride`` must divide ``length`` and ``block_size``.
    """
    spans, per_block = length // stride, block_size // stride
    # each stride unit u sums the tokens that cover it: tokens u - spans + 1 .. u
    covered = F.pad(scores, (spans - 1, 0)).unfold(-1, spans, 1).sum(-1)  # (..., C)
    units = num_blocks * per_block
    covered = F.pad(covered, (0, max(units - covered.shape[-1], 0)))[..., :units]
    return covered.unflatten(-1, (num_blocks, per_block)).sum(-1)


def selected_block_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    blocks: Tensor,
    *,
    block_size: int,
    key_padding: Tensor | None,
    scale: float,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Each query's softmax attention over the keys of its selected blocks, causally.

    Args:
        q: Queries ``(B, H, Lq, d)``.
        k: Keys ``(B, G, Lk, d)``.
        v: Values ``(B, G, Lk, dv)``.
        blocks: Each query's blocks ``(B, G, Lq, n)`` (long; ``-1``: none), shared by a group's heads.
        block_size: Positions per block.
        key_padding: ``(B, 1 or G, Lk)``, True at real keys; None: all real.
        scale: Multiplier of the dot products.
        need_weights: Also return the dense weights ``(B, H, Lq, Lk)``.

    Returns:
        The output ``(B, H, Lq, dv)`` (zero for a query that sees no key) and the weights or None.
    """
    if k.shape[2] <= DENSE_KEYS:  # the selection as a mask over the dense scores
        per_group = q.shape[1] // k.shape[1]
        seen = _selected_keys(blocks, block_size, k.shape[2], key_padding).repeat_interleave(per_group, dim=1)
        k, v = k.repeat_interleave(per_group, dim=1), v.repeat_interleave(per_group, dim=1)
        if need_weights:
            weights = masked_softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, mask=seen)
            return torch.matmul(weights, v), weights
        return masked_sdpa(q, k, v, seen, scale=scale), None
    batch, heads, num_queries, _ = q.shape
    groups, num_keys = k.shape[1], k.shape[2]
    selected = blocks.shape[-1] * block_size
    chunk = max(1, GATHERED_KEYS // max(selected, 1))
    pad = -num_keys % block_size
    key_blocks, value_blocks = (
        F.pad(t, (0, 0, 0, pad)).unflatten(2, (-1, block_size)) for t in (k, v)
    )  # (B, G, N, b, d)
    real = torch.ones(batch, groups, num_keys, dtype=torch.bool, device=q.device)
    if key_padding is not None:
        real = real & key_padding
    real_blocks = F.pad(real, (0, pad)).unflatten(-1, (-1, block_size))  # (B, G, N, b); the end's padding False
    rows = torch.arange(batch, device=q.device)[:, None, None, None]
    group_rows = torch.arange(groups, device=q.device)[None, :, None, None]
    offsets = torch.arange(block_size, device=q.device)
    outputs, dense = [], []
    for start in range(0, num_queries, chunk):
        picked = blocks[:, :, start : start + chunk]  # (B, G, c, n)
        safe = picked.clamp(min=0)
        # whole blocks are gathered by advanced indexing (contiguous rows), not key by key
        keys = key_blocks[rows, group_rows, safe].flatten(-3, -2)  # (B, G, c, n * b, d)
        values = value_blocks[rows, group_rows, safe].flatten(-3, -2)
        positions = (safe.unsqueeze(-1) * block_size + offsets).flatten(-2)  # (B, G, c, n * b)
        query_positions = torch.arange(start, start + picked.shape[2], device=q.device) + num_keys - num_queries
        valid = real_blocks[rows, group_rows, safe].flatten(-2) & positions.le(query_positions.unsqueeze(-1))
        valid = valid & picked.ge(0).repeat_interleave(block_size, dim=-1)
        queries = q[:, :, start : start + chunk].unflatten(1, (groups, -1))  # (B, G, R, c, d)
        scores = torch.einsum("bgrcd,bgcmd->bgrcm", queries, keys) * scale
        weights = masked_softmax(scores, mask=valid.unsqueeze(2))
        outputs.append(torch.einsum("bgrcm,bgcmd->bgrcd", weights, values).flatten(1, 2))
        if need_weights:
            target = weights.new_zeros(*weights.shape[:-1], num_keys + pad)
            index = positions.unsqueeze(2).expand_as(weights)
            dense.append(target.scatter_add(-1, index, weights)[..., :num_keys].flatten(1, 2))
    output = torch.cat(outputs, dim=2)
    return output, torch.cat(dense, dim=2) if need_weights else None


def _selected_keys(blocks: Tensor, block_size: int, num_keys: int, key_padding: Tensor | None) -> Tensor:
    """Which keys each query sees, ``(B, G, Lq, Lk)``: the real keys of its ``blocks`` up to its
    position (query ``i`` at ``Lk - Lq + i``)."""
    batch, groups, num_queries, _ = blocks.shape
    num_blocks = -(-num_keys // block_size)
    chosen = torch.zeros(batch, groups, num_queries, num_blocks + 1, dtype=torch.bool, device=blocks.device)
    chosen.scatter_(-1, blocks.masked_fill(blocks < 0, num_blocks), True)  # "-1" lands in the extra column
    seen = chosen[..., :num_blocks].repeat_interleave(block_size, dim=-1)[..., :num_keys]
    query_positions = torch.arange(num_queries, device=blocks.device) + num_keys - num_queries
    seen = seen & (torch.arange(num_keys, device=blocks.device) <= query_positions[:, None])
    return seen if key_padding is None else seen & key_padding.unsqueeze(-2)
