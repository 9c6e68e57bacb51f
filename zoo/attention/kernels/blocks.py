"""Sequence rows by position, for attentions that never form the full ``(Lq, Lk)`` score matrix.

Blockwise variants (``local``, ``linear``'s causal chunks) line keys up with blocks of queries
whose reach starts before the first key or ends after the last. :func:`rows_from` returns such a
range of positions as one tensor, zero where no key exists, so blocks can be cut out of it as
views (``unfold``) instead of by Python loops. :func:`block_attention` then runs all blocks as one
batch through the fused kernel, laid out as it needs.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.sdpa import masked_sdpa

__all__ = ["block_attention", "rows_from"]


def rows_from(x: Tensor, first: int, length: int) -> Tensor:
    """Rows ``first, ..., first + length - 1`` of ``x`` along its sequence axis (-2).

    Positions before 0 or past the end of ``x`` are rows of zeros. The range must reach the end
    of ``x`` (``first <= L <= first + length``), which is how blockwise attention uses it: the
    last block of queries always reaches the last key.

    Args:
        x: ``(*batch, L, features)``.
        first: Position of the first row returned; may be negative.
        length: Number of rows returned.

    Returns:
        ``(*batch, length, features)``.
    """
    size = x.shape[-2]
    if not first <= size <= first + length:
        raise ValueError(f"rows_from: positions {first} to {first + length - 1} do not reach the end of {size} rows.")
    return F.pad(x[..., max(first, 0) :, :], (0, 0, max(-first, 0), first + length - size))


def block_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    attn_mask: Tensor | None,
    *,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Tensor:
    """Softmax attention of each block of queries over its own keys, all blocks in one call of
    :func:`~torch.nn.functional.scaled_dot_product_attention`.

    PyTorch's fused CPU (flash) kernel takes 4-D inputs and a 2-D or 4-D mask only: a 5-D batch
    of blocks, or a 3-D mask shared by the blocks, sends it to the math path, which materializes
    every block's scores and weights (measured here: 1.8x the time at 16k tokens). So the leading
    axes are flattened into one and the mask is given the same four axes, broadcast where it can
    stay so (a mask shared across the batch is not copied).

    Args:
        queries: ``(*batch, nb, block, d)``.
        keys: ``(*batch, nb, S, d)``.
        values: ``(*batch, nb, S, dv)``.
        attn_mask: Boolean (True = attend) or float, broadcastable to ``(*batch, nb, block, S)``.
        dropout_p: Dropout on the weights.
        scale: Multiplier of the dot products; ``None``: ``1 / sqrt(d)``.

    Returns:
        ``(*batch, nb, block, dv)``.
    """
    batch, grid = queries.shape[:-3], queries.shape[-3:-1]
    flat = lambda t: t.reshape(-1, *t.shape[-3:])  # noqa: E731
    if attn_mask is not None:
        mask = attn_mask.reshape((1,) * (len(batch) + 3 - attn_mask.dim()) + attn_mask.shape)
        mask = mask.expand(*mask.shape[:-3], *grid, keys.shape[-2])
        if any(size != 1 for size in mask.shape[:-3]):
            mask = mask.expand(*batch, *mask.shape[-3:])
        attn_mask = flat(mask)
    output = masked_sdpa(flat(queries), flat(keys), flat(values), attn_mask, dropout_p=dropout_p, scale=scale)
    return output.unflatten(0, batch) if batch else output.squeeze(0)
