"""Sequence rows by position, for attentions that never form the full ``(Lq, Lk)`` score matrix.

Blockwise variants (``local``, ``linear``'s causal chunks) line keys up with blocks of queries
whose reach starts before the first key or ends after the last. :func:`rows_from` returns such a
range of positions as one tensor, zero where no key exists, so blocks can be cut out of it as
views (``unfold``) instead of by Python loops.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

__all__ = ["rows_from"]


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
