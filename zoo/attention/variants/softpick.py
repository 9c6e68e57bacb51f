"""Softpick (Zuhri et al., 2025, "Softpick: No Attention Sink, No Massive Activations with
Rectified Softmax"): the softmax with its numerator rectified and its denominator of absolute
values.

    softpick(z)_j = ReLU(exp(z_j) - 1) / (sum_l |exp(z_l) - 1| + eps),    z_j = q . k_j / sqrt(d)

A key whose score is at most 0 gets no weight, and a query whose scores are all at most 0 gets
none at all (its output is zero), so a head need not park its weight on a first token (the
attention sink) to do nothing; the weights sum to at most one (``normalized_weights`` is False).
The gradient still reaches the negative scores through the denominator.

Computed as the paper's reference code does, stably: with ``m`` the largest visible score,
numerator and denominator are both multiplied by ``exp(-m)`` (``exp(z - m) - exp(-m)``); here
``m`` is clamped at 0, which leaves the ratio as it was and keeps ``exp(-m)`` from overflowing
when every score is very negative. ``eps`` is the reference code's ``1e-8``, added to the
rescaled denominator as there. Masked keys are left out of both sums. Rotary and bias positions
act on the scores as for ``dot_product`` (the paper trains with rotary positions). The paper's
fused kernel is FlashAttention-2's with the two sums kept; this is the explicit form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.modules.row_blocks import RowBlocked
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["SoftpickAttention"]

#: added to the rescaled denominator, as in the paper's reference code
EPS = 1e-8


@register_attention("softpick", aliases=("softpick_attention",))
class SoftpickAttention(RowBlocked, ScaledDotScores):
    """Attention whose weights are the softpick of the scaled dot products (see the module docstring).

    Args:
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "softmax alternative"
    cost = "L²"

    normalized_weights = False

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        """Softpick over the visible keys, in float32 at least; zero on hidden keys."""
        z = scores.to(torch.promote_types(scores.dtype, torch.float32))
        visible = torch.ones_like(z, dtype=torch.bool) if mask is None else mask.expand_as(z)
        z = z.masked_fill(~visible, float("-inf"))  # before exp: a hidden score may be anything
        top = z.amax(-1, keepdim=True).clamp(min=0.0)
        shifted = (torch.exp(z - top) - torch.exp(-top)).masked_fill(~visible, 0.0)  # exp(-m) (exp(z) - 1)
        weights = F.relu(shifted) / (shifted.abs().sum(-1, keepdim=True) + EPS)
        return weights.to(scores.dtype)
