"""DeltaNet (Schlag et al., 2021; Yang et al., 2024) and Gated DeltaNet (Yang et al., 2024): the
delta rule, which corrects the state's value for a key instead of only adding to it.

In the papers' orientation (a ``(dv, dk)`` state, column vectors, ``o_t = S_t q_t``)::

    DeltaNet:        S_t = S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T
    Gated DeltaNet:  S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T

The state's old value for ``k_t`` (``S_{t-1} k_t``) moves a fraction ``b_t`` of the way to ``v_t``
(and, gated, the whole state first decays by ``a_t``). The kernels keep the transposed state,
``(dk, dv)`` with row vectors (:mod:`zoo.attention.kernels.delta_rule`).

What the variants read, as in the papers and flash-linear-attention:

* queries and keys through SiLU, then L2-normalized per head (the rule assumes ``|k_t| = 1``, and
  ``I - b_t k_t k_t^T`` then has eigenvalues in ``[1 - b_t, 1]``: the state never grows); the
  queries then scaled by ``dk ** -0.5``; values through SiLU (flash-linear-attention applies it
  after its short convolution, or without one);
* the write strength ``b_t = sigmoid(x_t w_b)`` per head, from the layer's input;
* Gated DeltaNet's decay ``a_t = exp(-softplus(x_t w_a + dt_bias) A)`` per head, Mamba-2's
  (:class:`~zoo.attention.recurrent.StepDecay`, ``A`` starting uniform in ``(0, 16)``).

Outputs: each head's RMSNorm (DeltaNet), times a swish gate ``silu(x W_g)`` of the layer's input
(Gated DeltaNet), before the layer's output projection.

Left out, and why:

* Short convolutions over queries, keys and values (on by default in flash-linear-attention):
  a causal depthwise convolution in front of the layer's projections, which this layer does not
  own; a decoder would then also carry its window in the cache. The model's positions (learned,
  or ``rope`` on queries and keys) tell tokens apart here.
* Gated DeltaNet's doubled value width: the layer's value projection sets it.
* Negative eigenvalues (``b_t`` in ``(0, 2)``): an extension after the papers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.factory import register_attention
from zoo.attention.recurrent import HeadNorm, Mode, Recurrence, RecurrentAttention, StepDecay

__all__ = ["DeltaNetAttention", "GatedDeltaNetAttention"]


@register_attention("deltanet", aliases=("delta_net",))
class DeltaNetAttention(RecurrentAttention):
    """DeltaNet (see the module docstring).

    Args:
        embed_dim: The layer's width (filled by the layer): what ``b_t`` is projected from.
        num_heads: The layer's heads (filled by the layer).
        mode, chunk_size: The form (see :mod:`zoo.attention.recurrent`; the parallel form solves a
            ``(T, T)`` triangular system, so ``auto`` keeps it to ``chunk_size`` steps).

    Parameters of its own: ``beta`` (``embed_dim -> num_heads``, no bias), the write strengths;
    ``norm``, the per-head RMSNorm's scale.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, mode: Mode = "auto", chunk_size: int = 64) -> None:
        super().__init__(embed_dim, num_heads, mode=mode, chunk_size=chunk_size)
        self.beta = nn.Linear(embed_dim, num_heads, bias=False)
        self.norm = HeadNorm(self.head_dim)

    def log_decay(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor | None:
        """``log a_t`` ``(B, H, T)``; None: DeltaNet does not decay."""
        return None

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor | None) -> Recurrence:
        q = F.normalize(F.silu(queries), dim=-1) * self.head_dim**-0.5
        k = F.normalize(F.silu(keys), dim=-1)
        beta = self.beta(layer_input).to(queries.dtype).sigmoid().transpose(-1, -2)  # (B, H, T)
        return Recurrence(q, k, F.silu(values), self.log_decay(layer_input, queries.dtype), beta)

    def finish(self, output: Tensor, layer_input: Tensor | None) -> Tensor:
        return self.norm(output)


@register_attention("gated_deltanet", aliases=("gated_delta_net",))
class GatedDeltaNetAttention(DeltaNetAttention):
    """Gated DeltaNet: DeltaNet with Mamba-2's decay and a swish output gate (see the module docstring).

    Args as :class:`DeltaNetAttention`'s.

    Parameters of its own, beside DeltaNet's: ``decay`` (a projection ``embed_dim -> num_heads``
    and, per head, ``A_log`` and ``dt_bias``); ``gate`` (``embed_dim -> embed_dim``, no bias),
    the swish output gate.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, mode: Mode = "auto", chunk_size: int = 64) -> None:
        super().__init__(embed_dim, num_heads, mode=mode, chunk_size=chunk_size)
        self.decay = StepDecay(embed_dim, num_heads, a_range=(0.0, 16.0))
        self.gate = nn.Linear(embed_dim, embed_dim, bias=False)

    def log_decay(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor:
        return self.decay(layer_input, dtype)[1]

    def finish(self, output: Tensor, layer_input: Tensor | None) -> Tensor:
        return self.norm(output, self.split_heads(self.gate(layer_input)))
