"""Attention with linear biases, ``alibi`` (Press et al., 2022, "Train Short, Test Long").

No positions enter the embeddings; each head instead subtracts ``slope * distance`` from its
scores, so far keys count less. The slopes form a geometric sequence fixed before training: for
``n`` heads (a power of two) ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``. For another head count the
paper's code takes the ``p`` slopes of the power of two ``p`` below it, then every other slope
of ``2p`` heads (the ones not among the first ``p``) until it has ``n``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.positions.base import PositionScheme, register_position

__all__ = ["ALiBi", "alibi_slopes"]


def alibi_slopes(num_heads: int) -> Tensor:
    """The paper's ``num_heads`` slopes, largest first, as float32 ``(num_heads,)``."""
    if num_heads < 1:
        raise ValueError(f"alibi needs at least one head, got {num_heads}.")
    power = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-8.0 * (i + 1) / power) for i in range(power)]
    # the odd-numbered slopes of 2 * power heads interleave between these: 2^(-8 (2k+1) / (2 power))
    slopes += [2.0 ** (-8.0 * (2 * k + 1) / (2 * power)) for k in range(num_heads - power)]
    return torch.tensor(slopes, dtype=torch.float32)


@register_position("alibi")
class ALiBi(PositionScheme):
    """Bias ``-slope_h * |i - j|`` per head; ``-slope_h * (i - j)`` for causal self-attention.

    The two agree on every pair a causal mask keeps (keys at or before the query); the causal
    form is the paper's. No parameters: the slopes are a non-persistent buffer.

    Args:
        num_heads: Heads, one slope each.
        causal: The stack's self-attention is causal (a decoder).
    """

    kind = "bias"
    relative = True

    def __init__(self, num_heads: int, causal: bool = False) -> None:
        super().__init__()
        self.num_heads, self.causal = num_heads, causal
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Integer positions that broadcast together to ``S``; returns ``(num_heads, *S)`` float32."""
        distance = (query_positions - key_positions).to(torch.float32)
        if not self.causal:
            distance = distance.abs()
        return -self.slopes.view(-1, *([1] * distance.dim())) * distance

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, causal={self.causal}"
