"""Prefix sums along a sequence axis, as chunked linear-time attentions use them."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["sums_before"]


def sums_before(x: Tensor, dim: int) -> Tensor:
    """The sum of the entries before each index along ``dim`` (an exclusive cumulative sum)."""
    preceding = x.cumsum(dim).narrow(dim, 0, x.shape[dim] - 1)
    return torch.cat([torch.zeros_like(x.narrow(dim, 0, 1)), preceding], dim)
