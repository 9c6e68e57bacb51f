"""Comba (Hu, Pan, Du, Lan, Tang, Wen, Liang and Sun, 2025, "Comba: Improving Bilinear RNNs with
Closed-loop Control", arXiv:2506.02475): Gated DeltaNet whose transition is a scalar decay minus a
rank-one term, read through its own key, with a correction of the query by that key.

In the paper's orientation (a ``(dv, dk)`` state, column vectors), as flash-linear-attention's
kernels compute it::

    S_t = S_{t-1} (a_t I - b_t p_t k_t^T) + b_t v_t k_t^T,        o_t = S_t (q_t - d p_t)

The state's value at the read key ``p_t`` (``S_{t-1} p_t``, before the decay: state feedback) is
replaced by ``v_t`` at the written key ``k_t``, a fraction ``b_t`` of the way, while the rest of the
state decays by ``a_t``; the query subtracts ``d`` times the read key (output feedback). Gated
DeltaNet is ``S_{t-1} a_t (I - b_t k_t k_t^T)``: Comba's eigenvalue along the key is ``a_t - b_t``
where Gated DeltaNet's is ``a_t (1 - b_t)``, so it reaches ``(-1, 1)`` with ``b_t`` in ``(0, 1)``
already. There is no ``negative_eigenvalues`` option: with ``b_t`` in ``(0, 2)``, ``a_t - b_t``
could fall below -1 and the state grow (fla has none either).

The kernels keep the transposed ``(dk, dv)`` state with row vectors (``o_t = q_t S_t``)::

    S_t = (a_t I - b_t k_t^T p_t) S_{t-1} + b_t k_t^T v_t

a diagonal (the scalar decay on every key dimension) plus a rank-one correction: the generalized
delta rule runs it in three forms (:mod:`zoo.attention.kernels.dplr`: ``a = -b_t k``, ``b = p``,
the written key ``b_t k``, the log decay ``log a_t`` on every dimension), so it needs no kernel of its own.

What the layer reads, as flash-linear-attention's ``fla/layers/comba.py`` and
``fla/ops/comba/{fused_recurrent,chunk}.py``:

* queries, keys and values through a short causal convolution (kernel 4) and SiLU;
* the read key ``p_t = k_t sigmoid(lambda_h)``, ``lambda`` per head (fla's inner decay, ones at the
  start), and the corrected query ``q_t - d_h p_t``, ``d`` per head (fla's ``D``, starting at
  ``correction_factor``); then queries, keys and read keys L2-normalized per head (fla's
  ``use_qk_l2norm_in_kernel``) and the queries scaled by ``dk ** -0.5``. The normalization takes the
  positive ``sigmoid(lambda_h)`` out of ``p_t``, so ``p_t`` is the key's direction and ``lambda``
  acts through the correction alone: the zoo passes the normalized key as ``p``;
* ``b_t = sigmoid(x_t w_b)`` per head and Gated DeltaNet's decay ``a_t = exp(-softplus(x_t w_a +
  dt_bias) A)`` per head (``A`` uniform in ``(0, 16)`` at the start), as Gated DeltaNet's
  (:class:`~zoo.attention.variants.deltanet.GatedDeltaNetAttention`, of which this is a subclass);
* the output: each head's RMSNorm times ``sigmoid(x_t W_g)`` (fla's ``FusedRMSNormGated`` with a
  sigmoid, where Gated DeltaNet's gate is a swish), then the output projection.

Where the zoo differs: fla's ``naive_recurrent_comba`` decays the state before it reads ``p_t``
(``S_{t-1} a_t (I - b_t p_t k_t^T)``) while its Triton kernels and ``naive_chunk_comba`` read it
first, as above: the zoo follows the kernels (what fla's models train with) and
``benchmarks/fla_reference.py`` prints both differences. fla's switches (``use_output_gate``,
``use_output_correction``, ``use_inner_decay``) are left at their defaults, on; ``correction_factor``
defaults to fla's 1 (fla's warning says 0.02 sometimes works better for small models); grouped
value heads are left out; the key width is the block's and ``expand_v`` 1, as Gated DeltaNet's here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.recurrence import LowRankRecurrence
from zoo.attention.modules.recurrent import RecurrentOptions
from zoo.attention.variants.deltanet import GatedDeltaNetAttention

__all__ = ["CombaAttention", "CombaOptions"]


class CombaOptions(RecurrentOptions, total=False):
    """The arguments of Gated DeltaNet that Comba takes: every family's and the value width
    (``negative_eigenvalues`` is not one: see the module docstring)."""

    expand_v: float


@register_attention_layer("comba")
class CombaAttention(GatedDeltaNetAttention):
    """Comba (see the module docstring).

    Args:
        embed_dim: The block's width: what ``b_t`` and ``a_t`` are projected from.
        num_heads: Heads.
        correction_factor: Where the output correction ``d`` starts, every head (fla's default, 1).
        options: ``expand_v`` and :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s
            (``conv_size`` 4).

    Parameters beside Gated DeltaNet's (``beta``, ``decay``, ``gate``, ``norm``): ``inner_decay``
    (``lambda``, per head) and ``correction`` (``d``, per head).
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, correction_factor: float = 1.0, **options: Unpack[CombaOptions]
    ) -> None:
        super().__init__(embed_dim, num_heads, **options)
        if isinstance(correction_factor, bool) or not (
            isinstance(correction_factor, (int, float)) and math.isfinite(correction_factor)
        ):
            raise ValueError(
                f"CombaAttention: correction_factor must be a finite number (1 as fla, or 0.02), got {correction_factor!r}."
            )
        self.inner_decay = nn.Parameter(torch.ones(num_heads))
        self.correction = nn.Parameter(torch.full((num_heads,), float(correction_factor)))

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> LowRankRecurrence:
        dtype = queries.dtype
        feedback = (self.correction * self.inner_decay.sigmoid()).to(dtype)[:, None, None]  # d sigmoid(lambda)
        q = self.l2_normalize(queries - feedback * keys, self.key_head_dim**-0.5)
        k = self.l2_normalize(keys)  # the written key and, normalized, the read key p
        beta = self.beta.strengths(layer_input, dtype).transpose(-1, -2).unsqueeze(-1)  # (B, H, T, 1)
        log_decay = self.log_decay(layer_input, dtype).unsqueeze(-1).expand_as(k)
        return LowRankRecurrence(q, beta * k, values, -beta * k, k, log_decay)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output) * self.split_heads(self.gate(layer_input)).to(output.dtype).sigmoid()
