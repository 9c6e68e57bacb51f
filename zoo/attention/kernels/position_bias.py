"""A bias positional scheme laid on the score grid: what the kernels and the score path add.

A bias scheme (``alibi``, ``t5``; :mod:`zoo.positions`) maps integer query and key positions to
a float bias per head. Queries align bottom-right, as causal masks do: with ``Lq`` queries over
``Lk`` keys, query ``i`` sits at position ``Lk - Lq + i`` (a cached decoding step is the last).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["PositionBias", "position_bias_grid"]

PositionBias = Callable[[Tensor, Tensor], Tensor]
"""A bias positional scheme: integer query and key positions that broadcast together to ``S``
-> a float bias ``(heads, *S)`` added to the scores (see :mod:`zoo.positions`)."""


def position_bias_grid(position_bias: PositionBias, num_queries: int, num_keys: int, device: torch.device) -> Tensor:
    """``position_bias`` on the full grid ``(heads, Lq, Lk)``: query ``i`` at ``Lk - Lq + i``
    (bottom-right, as causal masks align), key ``j`` at ``j``."""
    keys = torch.arange(num_keys, device=device)
    queries = torch.arange(num_queries, device=device) + (num_keys - num_queries)
    return position_bias(queries.unsqueeze(-1), keys)
