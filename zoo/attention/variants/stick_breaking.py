"""Stick-breaking attention (Tan et al., 2024, "Stick-breaking Attention"): each query breaks a
stick of length one over the keys before it, from the nearest backwards.

With ``z_ij = q_i . k_j / sqrt(d)`` and ``beta_ij = sigmoid(z_ij)``, the share of what is left
of the stick that key ``j`` takes, the weight of key ``j < i`` is what is left after the keys
between them took theirs:

    a_ij = beta_ij prod_{j < l < i} (1 - beta_il)
    log a_ij = logsigmoid(z_ij) + sum_{j < l < i} logsigmoid(-z_il)

so a query reads the nearest key that matches, whatever its distance, with no positional
encoding: order comes from the process itself (the paper's point, and its length
generalization). The sums over ``l`` are suffix sums of ``logsigmoid(-z)`` along the keys, in
log space as in the reference code, never a product of many numbers below one.

The stick left after every earlier key, ``prod_{l < i} (1 - beta_il)``, goes to the query's own
position: ``o_i = sum_{j<i} a_ij v_j + (1 - sum_{j<i} a_ij) v_i``. That is how the reference
repository's tests assemble the output from its kernel's two results (the output and the
remainder; the kernel's ``attend_current=False``, its default, lets the query break no stick at
its own key); the first position then reads its own value. A key hidden by a mask breaks nothing
(``beta = 0``); if the query's own position is hidden, the remainder goes nowhere.

Causal only: a query breaks the stick over the keys before it (``supports_bidirectional`` is
False), and with fewer queries than keys, query ``i`` sits at key ``Lk - Lq + i``, as in cached
decoding. Rotary positions may rotate the queries and keys (their dot products are still
scores), though the paper trains without; no bias scheme. The explicit form here holds the
``(Lq, Lk)`` weights (the paper's Triton kernel does not); the weights are no softmax's but do
sum to one when the query's own position is visible.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.modules.row_blocks import RowBlocked
from zoo.attention.modules.scaled_dot import ScaledDotScores

__all__ = ["StickBreakingAttention"]


@register_attention("stick_breaking", aliases=("stickbreaking",))
class StickBreakingAttention(RowBlocked, ScaledDotScores):
    """Stick-breaking attention over the keys before each query (see the module docstring).

    Args:
        dropout: Dropout on the attention weights during training.
        scale: Multiplier of the dot products; ``None`` means ``1 / sqrt(d)``.
    """

    family = "softmax alternative"
    cost = "L²"

    supports_bidirectional = False
    supports_position_bias = False
    normalized_weights = False

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        """The stick-breaking weights of ``scores`` ``(*batch, Lq, Lk)`` under ``mask`` (causality
        merged in, as a causal call has it), in float32 at least; zero on hidden keys."""
        num_queries, num_keys = scores.shape[-2:]
        z = scores.to(torch.promote_types(scores.dtype, torch.float32))
        rows = torch.arange(num_queries, device=z.device)[:, None] + (num_keys - num_queries)  # own key
        cols = torch.arange(num_keys, device=z.device)
        visible = cols <= rows if mask is None else mask & (cols <= rows)
        breaks = visible & (cols < rows)  # the keys before the query, which break the stick
        log_keep = F.logsigmoid(-z).masked_fill(~breaks, 0.0)  # log(1 - beta); 0 where nothing breaks
        suffix = log_keep.flip(-1).cumsum(-1).flip(-1)  # sum over keys l >= j
        later = torch.cat([suffix[..., 1:], torch.zeros_like(suffix[..., :1])], -1)  # over l > j
        weights = torch.exp(F.logsigmoid(z) + later).masked_fill(~breaks, 0.0)
        remainder = torch.exp(suffix[..., :1])  # what every earlier key left: the query's own share
        weights = weights + remainder * (visible & (cols == rows))
        return weights.to(scores.dtype)
