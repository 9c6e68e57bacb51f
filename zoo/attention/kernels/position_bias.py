"""A bias positional scheme laid on the score grid: what the kernels and the score path add.

A bias scheme (``alibi``, ``t5``; :mod:`zoo.positions`) maps integer query and key positions to
a float bias per head. Queries align bottom-right, as causal masks do: with ``Lq`` queries over
``Lk`` keys, query ``i`` sits at position ``Lk - Lq + i`` (a cached decoding step is the last).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["PositionBias", "is_relative", "position_bias_grid"]

PositionBias = Callable[[Tensor, Tensor], Tensor]
"""A bias positional scheme: integer query and key positions that broadcast together to ``S``
-> a float bias ``(heads, *S)`` added to the scores (see :mod:`zoo.positions`). One whose bias
depends on ``key - query`` alone sets a true ``relative`` attribute
(:attr:`zoo.positions.PositionScheme.relative`)."""


def is_relative(position_bias: PositionBias) -> bool:
    """Whether the scheme's bias depends on ``key - query`` alone (it says so), so that its values
    over the distances are its whole bias: a row laid out as a grid here, a table FlexAttention reads."""
    return bool(getattr(position_bias, "relative", False))


def position_bias_grid(position_bias: PositionBias, num_queries: int, num_keys: int, device: torch.device) -> Tensor:
    """``position_bias`` on the full grid ``(heads, Lq, Lk)``: query ``i`` at ``Lk - Lq + i``
    (bottom-right, as causal masks align), key ``j`` at ``j``.

    A ``relative`` scheme is evaluated once per distance ``key - query``, from ``-(Lk - 1)`` to
    ``Lq - 1``, and the grid is that row laid out as a Toeplitz matrix (row ``i`` is the window
    starting at ``Lq - 1 - i``): the scheme's own intermediates then cost ``Lq + Lk - 1`` entries
    instead of ``Lq Lk`` each (at 16k tokens, T5's buckets over the full grid held about 18 GB).
    """
    if is_relative(position_bias):
        distances = torch.arange(-(num_keys - 1), num_queries, device=device)
        row = position_bias(distances.new_zeros(()), distances)  # (heads, Lq + Lk - 1), d = key - query
        return row.unfold(-1, num_keys, 1).flip(-2)
    keys = torch.arange(num_keys, device=device)
    queries = torch.arange(num_queries, device=device) + (num_keys - num_queries)
    return position_bias(queries.unsqueeze(-1), keys)
