"""Sigmoid attention (Ramapuram et al., 2024, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention"): each weight a sigmoid of its own score, with no normalization over the keys.

    a_ij = sigmoid(q_i . k_j / sqrt(d) + b),    o_i = sum_j a_ij v_j,    b = -log n

The paper derives the bias ``b = -log n`` from the sequence length ``n``: it starts every weight
near ``1 / n``, so the output's norm starts near a softmax's instead of growing with the number
of keys, which the paper finds needed for stable training. The bias is a constant, set from the
training length (the reference configurations write ``-ln 2048 = -7.62`` for 2,048 tokens; the
FlashSigmoid kernel takes it as ``sigmoid_bias``), not from the length of each call, so a
decoded token gets the weights it would get in a full forward: ``seq_len`` sets it here, by
default 256, the Shakespeare GPU recipe's block (give the recipe's ``block_size``).

Positions: the paper trains with rotary positions (queries and keys rotated before their dot
product) and with ALiBi (a bias added to the scores, before the sigmoid); both go through here
as they do for ``dot_product``. Left out: the paper's other stabilizers, LayerScale and a norm on
the attention's output (hybrid-norm), which sit in the block, not in the attention; and a fused
kernel (a weight is independent of the other keys, so FlashSigmoid needs no running maximum; on
the CPU the explicit form here forms the ``(Lq, Lk)`` weights). Weights: masked keys weigh 0 and
the others sum to anything (``normalized_weights`` is False).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.modules.row_blocks import RowBlocked
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["SigmoidAttention"]


@register_attention("sigmoid", aliases=("sigmoid_attention",))
class SigmoidAttention(RowBlocked, ScaledDotScores):
    """Sigmoid attention, ``sigmoid(q k^T * scale - log seq_len) v`` (see the module docstring).

    Args:
        seq_len: The training sequence length ``n`` of the bias ``-log n``.
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "softmax alternative"
    cost = "L²"

    normalized_weights: ClassVar[bool] = False

    def __init__(self, seq_len: int = 256, dropout: float = 0.0, scale: float | None = None) -> None:
        super().__init__(dropout, scale)
        self.require_positive(seq_len=seq_len)
        self.seq_len = seq_len
        self.bias = -math.log(seq_len)

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        """``sigmoid(scores + b)``, in float32 at least; zero on hidden keys."""
        weights = torch.sigmoid(scores.to(torch.promote_types(scores.dtype, torch.float32)) + self.bias)
        return (weights if mask is None else weights.masked_fill(~mask, 0.0)).to(scores.dtype)

    def extra_repr(self) -> str:
        scale = f", scale={self.scale}" if self.scale is not None else ""
        return f"seq_len={self.seq_len} (bias {self.bias:.3f}){scale}"
