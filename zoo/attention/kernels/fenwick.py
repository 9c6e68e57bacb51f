"""The Fenwick tree of log-linear attention (:mod:`zoo.attention.kernels.log_linear`): which level
of the tree holds key ``j`` for query ``i``, how many levels a length needs, the positions the tree
counts (real tokens only) and the hierarchical mask ``M^H_ij = lambda_i^(level(i, j))``::

    level(i, j) = bit_length(i XOR j)        (0 for j = i; ceil(log2 T) at most)
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.errors import ConfigurationError

__all__ = [
    "bit_length",
    "fenwick_levels",
    "hierarchical_mask",
    "level_count",
    "real_positions",
    "require_levels",
    "tree_length",
]


def level_count(length: int) -> int:
    """The Fenwick levels ``length`` positions reach: ``ceil(log2 length) + 1`` (1 for one position)."""
    return max(length - 1, 0).bit_length() + 1


def require_levels(length: int, available: int) -> None:
    """Refuse level weights too few for ``length`` positions.

    Raises:
        ConfigurationError: ``available`` is below :func:`level_count` of ``length`` (a ``ValueError``
            the command line shows as one line, exit status 2: a setting, not a bug).
    """
    needed = level_count(length)
    if needed > available:
        raise ConfigurationError(
            f"log-linear attention over {length} positions needs {needed} Fenwick levels, but num_levels is "
            f"{available}: raise num_levels to {needed} or more (or shorten the input)."
        )


def bit_length(x: Tensor) -> Tensor:
    """``bit_length`` of non-negative integers, elementwise."""
    length = torch.zeros_like(x)
    while bool((x > 0).any()):
        length = length + (x > 0).to(x.dtype)
        x = x >> 1
    return length


def fenwick_levels(query_positions: Tensor, key_positions: Tensor) -> Tensor:
    """``bit_length(i XOR j)`` ``(..., Tq, Tk)`` for query positions ``(..., Tq)`` and key positions
    ``(..., Tk)`` (integers): the level of key ``j``'s bucket for query ``i`` where ``j <= i``."""
    return bit_length(query_positions.unsqueeze(-1) ^ key_positions.unsqueeze(-2))


def real_positions(mask: Tensor | None, length: int, start: Tensor | None, device: torch.device) -> Tensor:
    """Each step's position among the real tokens ``(*batch or 1, T)``, counted from ``start``."""
    if mask is None:
        positions = torch.arange(length, device=device)
    else:
        positions = mask.long().cumsum(-1) - 1
    return positions if start is None else positions + start.unsqueeze(-1)


def tree_length(mask: Tensor | None, length: int, start: Tensor | None) -> int:
    """One past the largest real position: the length the tree must cover."""
    ends = torch.tensor(length) if mask is None else mask.long().sum(-1).cpu()
    if start is not None:
        ends = ends + start.cpu()
    return int(ends.max()) if ends.numel() else 0


def hierarchical_mask(level_weights: Tensor, positions: Tensor) -> Tensor:
    """``M^H_ij = lambda_i^(level(i, j))`` ``(*batch, T, T)`` (its causal part is the weights')."""
    levels = fenwick_levels(positions, positions).clamp(max=level_weights.shape[-1] - 1)
    shape = torch.broadcast_shapes(level_weights.shape[:-1] + (1,), levels.shape)
    return level_weights.expand(*shape[:-1], level_weights.shape[-1]).gather(-1, levels.expand(shape))
