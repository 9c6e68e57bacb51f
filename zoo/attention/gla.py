"""Gated linear attention (Yang et al., 2023, GLA): linear attention whose state decays per key
dimension, by a gate that depends on the data.

Per head, with row vectors and a ``(dk, dv)`` state::

    S_t = Diag(a_t) S_{t-1} + k_t^T v_t,        o_t = q_t S_t,        q_t scaled by dk ** -0.5

The gate ``a_t`` in ``(0, 1)^dk`` comes from a low-rank projection of the layer's input ``x_t``,
as in the paper and flash-linear-attention::

    log a_t = logsigmoid(x_t W_1 W_2 + b) / 16        W_1: (embed_dim, 16), W_2: (16, H * dk)

The rank (16) keeps the gate's parameters few; dividing the log-sigmoid by 16 (the paper's
normalizer ``tau``) keeps the gates near 1 at the start, so the state remembers over tens of
tokens rather than a few. The decay per key dimension is what the kernels sum in log space
within 16-step sub-chunks (:mod:`zoo.attention.kernels.decay`).

The output of each head is normalized (RMSNorm) and multiplied by a swish gate of the layer's
input, ``silu(x W_g)``, before the layer's output projection: the paper's
``LayerNorm(o) * swish(x W_r)`` as flash-linear-attention fuses it.

Left out, and why:

* The halved key width (``expand_k = 0.5``): the layer's query and key projections set it.
* A feature map on queries and keys and short convolutions: both off in the paper's and
  flash-linear-attention's GLA by default.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.factory import register_attention
from zoo.attention.recurrent import HeadNorm, Mode, Recurrence, RecurrentAttention

__all__ = ["GatedLinearAttention"]


@register_attention("gla", aliases=("gated_linear_attention",))
class GatedLinearAttention(RecurrentAttention):
    """Gated linear attention (see the module docstring).

    Args:
        embed_dim: The layer's width (filled by the layer): what the gates are projected from.
        num_heads: The layer's heads (filled by the layer).
        gate_rank: Rank of the decay gate's projection (the paper's 16).
        gate_normalizer: What the gate's log-sigmoid is divided by (the paper's 16).
        mode, chunk_size: The form (see :mod:`zoo.attention.recurrent`).

    Parameters of its own: ``decay_gate`` (``embed_dim -> gate_rank -> embed_dim``, a bias on the
    second), the decay per key dimension; ``gate`` (``embed_dim -> embed_dim``, no bias), the swish
    output gate; ``norm``, the per-head RMSNorm's scale.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        gate_rank: int = 16,
        gate_normalizer: float = 16.0,
        mode: Mode = "auto",
        chunk_size: int = 64,
    ) -> None:
        super().__init__(embed_dim, num_heads, mode=mode, chunk_size=chunk_size)
        self.require_positive(gate_rank=gate_rank)
        if gate_normalizer <= 0:
            raise ValueError(f"GatedLinearAttention: gate_normalizer must be positive, got {gate_normalizer}.")
        self.gate_normalizer = gate_normalizer
        self.decay_gate = nn.Sequential(nn.Linear(embed_dim, gate_rank, bias=False), nn.Linear(gate_rank, embed_dim))
        self.gate = nn.Linear(embed_dim, embed_dim, bias=False)
        self.norm = HeadNorm(self.head_dim)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor | None) -> Recurrence:
        logits = self.split_heads(self.decay_gate(layer_input)).to(queries.dtype)  # (B, H, T, dk)
        log_decay = F.logsigmoid(logits) / self.gate_normalizer
        return Recurrence(queries * self.head_dim**-0.5, keys, values, log_decay)

    def finish(self, output: Tensor, layer_input: Tensor | None) -> Tensor:
        return self.norm(output, self.split_heads(self.gate(layer_input)))
