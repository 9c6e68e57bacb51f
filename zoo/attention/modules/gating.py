"""What the recurrent families share besides their recurrence: the per-head output norm with its
gate (:class:`HeadNorm`), Mamba-2's data-dependent decay (:class:`StepDecay`), the delta rule's
write strength (:class:`WriteStrength`) and the map of a decay onto ``(-1, 1]``
(:func:`positive_and_negative`).

The last two are the ``negative_eigenvalues`` option of Grazzi et al. (2025, "Unlocking
State-Tracking in Linear RNNs Through Negative Eigenvalues"): a transition whose eigenvalues lie in
``[0, 1]`` cannot track parity in one layer, one whose eigenvalues reach ``[-1, 1]`` can. For the
delta rule, ``I - beta_t k_t^T k_t`` with ``|k_t| = 1`` has the eigenvalues ``1`` and ``1 - beta_t``:
``beta_t`` in ``(0, 2)`` (``2 sigmoid``) takes the second to ``(-1, 1)``. For a scalar decay the
paper maps ``a_t`` to ``2 a_t - 1`` (its Mamba's ``positive_and_negative`` scan).

:mod:`zoo.attention.modules.recurrent` re-exports both, where the families and plugins have imported them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DT_FLOOR", "DT_RANGE", "HeadNorm", "StepDecay", "WriteStrength", "positive_and_negative", "step_bias"]

#: where Mamba's step sizes start, log-uniform, and their floor (``mamba_ssm``'s ``dt_min``,
#: ``dt_max``, ``dt_init_floor``)
DT_RANGE, DT_FLOOR = (1e-3, 1e-1), 1e-4


def step_bias(count: int, dt_range: tuple[float, float] = DT_RANGE, dt_floor: float = DT_FLOOR) -> Tensor:
    """``count`` step-size biases as Mamba initializes them: the inverse softplus of step sizes drawn
    log-uniform in ``dt_range`` (at least ``dt_floor``), so ``softplus(bias) = dt`` starts small and the
    heads (or channels) cover several time scales (``mamba_ssm``'s ``dt_min``, ``dt_max``, ``dt_init_floor``)."""
    if not 0 < dt_range[0] <= dt_range[1]:
        raise ValueError(f"dt_range is (low, high) with 0 < low <= high, got {tuple(dt_range)}.")
    low, high = (math.log(bound) for bound in dt_range)
    dt = (torch.rand(count) * (high - low) + low).exp().clamp(min=dt_floor)
    return dt + torch.log(-torch.expm1(-dt))


class HeadNorm(nn.Module):
    """RMSNorm over each head's features with a learned scale, then, when a gate is given, times
    ``silu(gate)``: the per-head output norm of RetNet (its GroupNorm), GLA and the DeltaNets,
    fused with the output gate as flash-linear-attention's ``FusedRMSNormGated`` computes it.

    Args:
        head_dim: Features per head.
        eps: Added to the mean square.
    """

    def __init__(self, head_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(head_dim))
        self.eps = eps

    def forward(self, x: Tensor, gate: Tensor | None = None) -> Tensor:
        """``x`` ``(..., head_dim)`` normalized (in its dtype), times ``silu(gate)`` if given."""
        normalized = F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)
        return normalized if gate is None else normalized * F.silu(gate.to(x.dtype))


class StepDecay(nn.Module):
    """Mamba-2's data-dependent decay: a step size per head and token from the layer's input,
    ``dt_t = softplus(x_t w + dt_bias)``, and a decay ``a_t = exp(-dt_t A)`` with ``A = exp(A_log) > 0``
    learned per head (Mamba-2's ``A_h``; Gated DeltaNet's ``alpha_t``).

    Initialized as Mamba-2 and flash-linear-attention do: ``A`` uniform in ``a_range``, ``dt_bias``
    the inverse softplus of step sizes log-uniform in ``dt_range`` (at least ``dt_floor``), so
    that the first steps are small and the heads cover several time scales.

    Args:
        embed_dim: The layer's width.
        num_heads: Heads, one decay each.
        a_range: Where ``A`` starts, uniform (Mamba-2: ``(1, 16)``; Gated DeltaNet: ``(0, 16)``).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        a_range: tuple[float, float],
        dt_range: tuple[float, float] = DT_RANGE,
        dt_floor: float = DT_FLOOR,
    ) -> None:
        super().__init__()
        if not 0 <= a_range[0] <= a_range[1]:
            raise ValueError(f"StepDecay: a_range is (low, high) with 0 <= low <= high, got {tuple(a_range)}.")
        self.proj = nn.Linear(embed_dim, num_heads, bias=False)
        self.dt_bias = nn.Parameter(step_bias(num_heads, dt_range, dt_floor))
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(*a_range).log())

    def forward(self, layer_input: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The step sizes and log decays ``log a_t = -dt_t A``, both ``(B, H, T)`` in ``dtype``."""
        dt = F.softplus(self.proj(layer_input).to(dtype) + self.dt_bias.to(dtype)).transpose(-1, -2)
        return dt, -dt * self.A_log.to(dtype).exp().unsqueeze(-1)


class WriteStrength(nn.Linear):
    """The delta rule's write strength per head (and step) from the layer's input: ``beta_t =
    sigmoid(x_t w)`` in ``(0, 1)``, or with ``negative_eigenvalues`` ``beta_t = 2 sigmoid(x_t w)`` in
    ``(0, 2)`` (Grazzi et al.; see the module docstring), as flash-linear-attention's
    ``allow_neg_eigval`` doubles it. A linear map without a bias (stored as ``weight``, whichever
    the range), so a model saved with either range loads into the other.

    Args:
        embed_dim: The layer's width.
        count: Write strengths per token (heads, times Householder steps for DeltaProduct).
        negative_eigenvalues: ``beta`` in ``(0, 2)`` rather than ``(0, 1)``.
    """

    def __init__(self, embed_dim: int, count: int, negative_eigenvalues: bool) -> None:
        super().__init__(embed_dim, count, bias=False)
        self.negative_eigenvalues = negative_eigenvalues

    def strengths(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor:
        """``beta`` ``(B, T, count)`` in ``dtype``."""
        beta = self(layer_input).to(dtype).sigmoid()
        return 2 * beta if self.negative_eigenvalues else beta

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, negative_eigenvalues={self.negative_eigenvalues}"


def positive_and_negative(log_decay: Tensor) -> tuple[Tensor, Tensor]:
    """A decay ``a_t = exp(log_decay_t)`` in ``(0, 1]`` mapped to ``2 a_t - 1`` in ``(-1, 1]`` (Grazzi
    et al.'s ``positive_and_negative``), as the decay kernels take a signed decay: its log
    magnitude and where it is negative (:mod:`zoo.attention.kernels.decay`).

    ``log|2 a - 1|`` is ``log1p(2 expm1(log a))`` where ``a >= 1/2`` and ``log1p(-2 a)`` below, exact
    to rounding near ``|2 a - 1| = 1``. A magnitude below the dtype's resolution (``a`` at ``1/2``,
    where it is 0 and its log ``-inf``) is taken as that resolution, ``finfo(dtype).eps``, so the
    kernels and gradients stay finite; such a step keeps ``eps`` of the state, below its rounding.
    """
    negative = log_decay < -math.log(2.0)
    below_one = torch.where(negative, -2 * log_decay.exp(), 2 * torch.expm1(log_decay))  # |2 a - 1| - 1
    floor = torch.finfo(log_decay.dtype).eps - 1
    return torch.log1p(below_one.clamp_min(floor)), negative
