"""What the RWKV time-mixing layers (RWKV-6, :mod:`~zoo.attention.variants.rwkv6`; RWKV-7,
:mod:`~zoo.attention.variants.rwkv7`) share: the token shift, the low-rank maps and the per-head
GroupNorm.

* The token shift pairs each token with the one before it, ``(x_t, x_{t-1})``, from which each
  input of the layer is mixed (RWKV-7 with a learned share per channel, RWKV-6 with a share that
  depends on the data as well). The token before a call's first is the cache's window (the last
  token the layer saw), zeros at the start; a padded token enters the shift as zeros, as it enters a
  short convolution in the other families, so left-padded prompts stay exact (:func:`shift_pair`).
* :class:`LowRankMap`: ``bias + activation(x W_1) W_2``, how both papers make their gates and
  mixing shares depend on the data cheaply (BlinkDL's "LoRA").
* :func:`head_group_norm`: a LayerNorm over each head's features with a scale and shift per head
  and feature (``torch.nn.GroupNorm`` with one group a head, as BlinkDL's ``ln_x``).
* :func:`refuse_convolution`: the token shift takes the place of the other families' short
  convolution, so both layers refuse a ``conv_size``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.modules.recurrent import RecurrentOptions

__all__ = ["LowRankMap", "head_group_norm", "refuse_convolution", "shift_pair"]


class LowRankMap(nn.Module):
    """``bias + activation(x W_1) W_2``, ``W_1`` of rank ``rank``, as RWKV-7 starts it: ``W_1`` zero and
    ``W_2`` orthogonal with gain 0.1, so the map starts at its bias and learns from there.

    Args:
        width: Input and output size.
        rank: Inner size.
        activation: Between the two maps (None: none).
        bias: The output's bias at the start; None: no bias.
    """

    def __init__(
        self, width: int, rank: int, activation: Callable[[Tensor], Tensor] | None, bias: Tensor | None
    ) -> None:
        super().__init__()
        self.down = nn.Linear(width, rank, bias=False)
        self.up = nn.Linear(rank, width, bias=False)
        self.activation = activation
        self.bias = None if bias is None else nn.Parameter(bias)
        with torch.no_grad():
            self.down.weight.zero_()
            nn.init.orthogonal_(self.up.weight, gain=0.1 * max(1.0, math.sqrt(rank / width)))

    def forward(self, x: Tensor) -> Tensor:
        inner = self.down(x)
        output = self.up(inner if self.activation is None else self.activation(inner))
        return output if self.bias is None else output + self.bias


def refuse_convolution(name: str, options: RecurrentOptions) -> None:
    """Take ``conv_size`` out of a layer's ``options``, refusing, under the layer's ``name``, any
    other than 0: its token shift mixes each token with the one before, in place of a convolution."""
    if options.pop("conv_size", 0):
        raise ValueError(
            f"{name} has no short convolution: its token shift mixes each token with the one before; "
            "leave conv_size out."
        )


def shift_pair(x: Tensor, steps: Tensor | None, before: Tensor | None) -> tuple[Tensor, Tensor]:
    """The token shift's input: ``x`` ``(B, T, C)`` as the pair ``(x_t, x_{t-1})`` ``(B, T, 2, C)``,
    padded tokens (``steps`` ``(B, 1 or H, T)`` False) as zeros and ``before`` ``(B, 1, C)`` (the
    cache's window; None: zeros) before the first; and the window after ``x``, its last token ``(B, 1, C)``."""
    if steps is not None:
        x = x * steps.all(dim=1).unsqueeze(-1).to(x.dtype)
    before = x.new_zeros(x.shape[0], 1, x.shape[2]) if before is None else before.to(x.dtype)
    return torch.stack([x, torch.cat([before, x[:, :-1]], dim=1)], dim=-2), x[:, -1:]


def head_group_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """``x`` ``(B, H, T, d)`` normalized over each head's ``d`` features (mean and variance), times
    ``weight`` plus ``bias`` (both ``(H, d)``), in ``x``'s dtype."""
    normed = F.layer_norm(x, (x.shape[-1],), eps=eps)
    return normed * weight.to(x.dtype)[:, None] + bias.to(x.dtype)[:, None]
