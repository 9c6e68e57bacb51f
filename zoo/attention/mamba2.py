"""Mamba-2 (Dao and Gu, 2024) as attention: the state-space dual (SSD) of a selective state space.

Per head, a state ``h`` of shape ``(d_state, head_dim)`` decays by one scalar per step::

    a_t = exp(-dt_t A_h),        h_t = a_t h_{t-1} + B_t^T (dt_t x_t),        y_t = C_t h_t + D_h x_t

with ``dt_t = softplus(x_t w + dt_bias)`` a step size per head and token from the layer's input
and ``A_h = exp(A_log_h) > 0`` learned per head (:class:`~zoo.attention.recurrent.StepDecay`,
Mamba-2's initialization: ``A`` uniform in ``(1, 16)``, step sizes log-uniform in
``(0.001, 0.1)``). Unrolled, ``y = (L * C B^T) (dt x) + D x`` with ``L_ij = a_{j+1} ... a_i``: attention
under a 1-semiseparable mask, with ``C`` as queries, ``B`` as keys and ``x`` as values, which is
what the scalar-decay kernels compute (:mod:`zoo.attention.kernels.decay`). The parallel form is
that masked matrix; the chunkwise form is SSD's block decomposition.

Here ``C``, ``B`` and ``x`` are the layer's per-head queries, keys and values through SiLU (the
activation Mamba-2 applies after its convolution); the state size ``d_state`` is the head size.
Queries are not scaled (SSD has no temperature). The output, ``y`` times a swish gate ``silu(z)``
with ``z = x W_z`` from the layer's input, is normalized per head (RMSNorm with a scale per
feature: Mamba-2's gated RMSNorm, gate before the norm, over each group of heads that shares
``B`` and ``C``), then goes through the layer's output projection.

Left out, and why:

* The short causal convolution over ``x``, ``B`` and ``C``: it sits in front of the layer's
  projections, which this layer does not own, and a decoder would carry its window in the cache;
  its SiLU is kept.
* ``B`` and ``C`` shared by all heads (Mamba-2's ``ngroups = 1``): each head has its own, from the
  layer's query and key projections, so the norm's groups are the heads. ``expand`` (2) and the
  head size: the layer's width and heads set them.
* ``dt`` limits and learned initial states: off by default in Mamba-2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.factory import register_attention
from zoo.attention.recurrent import Mode, Recurrence, RecurrentAttention, StepDecay

__all__ = ["Mamba2Attention"]


@register_attention("mamba2", aliases=("mamba", "ssd"))
class Mamba2Attention(RecurrentAttention):
    """Mamba-2's state-space dual (see the module docstring).

    Args:
        embed_dim: The layer's width (filled by the layer): what ``dt`` and ``z`` are projected from.
        num_heads: The layer's heads (filled by the layer): one ``A``, ``dt_bias`` and ``D`` each.
        mode, chunk_size: The form (see :mod:`zoo.attention.recurrent`).

    Parameters of its own: ``decay`` (a projection ``embed_dim -> num_heads`` and, per head,
    ``A_log`` and ``dt_bias``); ``D`` per head (the skip, starting at 1); ``gate``
    (``embed_dim -> embed_dim``, no bias), ``z``; ``norm_weight`` ``(num_heads, 1, head_dim)``,
    the norm's scale per feature.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, mode: Mode = "auto", chunk_size: int = 64) -> None:
        super().__init__(embed_dim, num_heads, mode=mode, chunk_size=chunk_size)
        self.decay = StepDecay(embed_dim, num_heads, a_range=(1.0, 16.0))
        self.D = nn.Parameter(torch.ones(num_heads))
        self.gate = nn.Linear(embed_dim, embed_dim, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(num_heads, 1, self.head_dim))

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor | None) -> Recurrence:
        dt, log_decay = self.decay(layer_input, queries.dtype)  # (B, H, T) each
        x = F.silu(values)
        skip = self.D.to(x.dtype)[:, None, None] * x
        return Recurrence(F.silu(queries), F.silu(keys), x * dt.unsqueeze(-1), log_decay.unsqueeze(-1), skip=skip)

    def finish(self, output: Tensor, layer_input: Tensor | None) -> Tensor:
        gated = output * F.silu(self.split_heads(self.gate(layer_input)).to(output.dtype))
        return F.rms_norm(gated, (self.head_dim,), eps=1e-5) * self.norm_weight.to(output.dtype)
