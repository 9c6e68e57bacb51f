"""Random inputs, padding masks and comparisons shared by the kernel tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

BATCH = (2, 3)
"""Batch and heads of the random inputs."""

TOLERANCE = 1e-10
"""How closely the float64 forms must agree with the per-token references."""


def randn(*shape: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """Standard normal samples from ``generator``."""
    return torch.randn(*shape, generator=generator, dtype=dtype)


def uniform(*shape: int, low: float, high: float, generator: torch.Generator) -> Tensor:
    """Float64 samples uniform in ``[low, high)``."""
    return low + (high - low) * torch.rand(*shape, generator=generator, dtype=torch.float64)


def qkv(length: int, dk: int, dv: int, generator: torch.Generator, *, unit_keys: bool = False) -> tuple[Tensor, ...]:
    """Float64 queries, keys (L2-normalized if ``unit_keys``) and values, ``(2, 3, T, d)``."""
    q = randn(*BATCH, length, dk, generator=generator)
    k = randn(*BATCH, length, dk, generator=generator)
    v = randn(*BATCH, length, dv, generator=generator)
    return q, F.normalize(k, dim=-1) if unit_keys else k, v


def padding_mask(length: int) -> Tensor:
    """``(2, 3, T)``: the first row right-padded, the second left-padded, a third of ``T`` each."""
    pad = length // 3 + 1 if length > 1 else 0
    steps = torch.arange(length)
    right = steps < length - pad
    left = steps >= pad
    return torch.stack([right, left]).unsqueeze(1).expand(*BATCH, length)


def assert_matches(actual: Tensor, expected: Tensor, atol: float = TOLERANCE) -> None:
    """Equal up to ``atol``, whatever the magnitudes."""
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


def assert_close_relative(actual: Tensor, expected: Tensor, tolerance: float) -> None:
    """Finite, and within ``tolerance`` of ``expected``'s largest magnitude everywhere."""
    assert torch.isfinite(actual).all()
    error = (actual.double() - expected).abs().max()
    assert error <= tolerance * expected.abs().max(), f"largest error {error:.3g}, scale {expected.abs().max():.3g}"
