"""What the recurrent families share besides their recurrence: the per-head output norm with its
gate (:class:`HeadNorm`) and Mamba-2's data-dependent decay (:class:`StepDecay`).

:mod:`zoo.attention.modules.recurrent` re-exports both, where the families and plugins have imported them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["HeadNorm", "StepDecay"]


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
        dt_range: tuple[float, float] = (1e-3, 1e-1),
        dt_floor: float = 1e-4,
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(embed_dim, num_heads, bias=False)
        low, high = (math.log(bound) for bound in dt_range)
        dt = (torch.rand(num_heads) * (high - low) + low).exp().clamp(min=dt_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(*a_range).log())

    def forward(self, layer_input: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The step sizes and log decays ``log a_t = -dt_t A``, both ``(B, H, T)`` in ``dtype``."""
        dt = F.softplus(self.proj(layer_input).to(dtype) + self.dt_bias.to(dtype)).transpose(-1, -2)
        return dt, -dt * self.A_log.to(dtype).exp().unsqueeze(-1)
