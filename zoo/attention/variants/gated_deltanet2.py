"""Gated DeltaNet-2 (Hatamizadeh, Choi and Kautz, 2026, "Gated DeltaNet-2: Decoupling Erase and Write
in Linear Attention", arXiv:2605.22791): Kimi Delta Attention whose one write strength per head is
split into an erase gate per key channel and a write gate per value channel.

The paper writes, per head, with a ``(dk, dv)`` state and column vectors::

    S_t = (I - k_t (b_t * k_t)^T) Diag(alpha_t) S_{t-1} + k_t (w_t * v_t)^T,        o_t = S_t^T q_t

``alpha_t`` in ``(0, 1)^dk`` forgets each key channel at its own rate (KDA's gate); the erase gate
``b_t`` in ``(0, 1)^dk`` says which channels of the decayed state are read at ``k_t`` and removed,
the write gate ``w_t`` in ``(0, 1)^dv`` which channels of ``v_t`` are committed. With ``b_t = w_t =
beta_t`` (one scalar) it is KDA; with a scalar decay too, Gated DeltaNet. The kernels keep the same
``(dk, dv)`` state with row vectors (``o_t = q_t S_t``): the transition is the diagonal
``Diag(alpha_t)`` plus the rank-one ``-k_t^T ((b_t * k_t) * alpha_t)``, which the generalized delta
rule runs in three forms (:mod:`zoo.attention.kernels.dplr`: ``a = -k``, ``b = b_t * k * alpha``,
the written key ``k`` and value ``w_t * v``), so no kernel of its own is needed.

What the layer reads, as flash-linear-attention's ``fla/layers/gdn2.py`` (NVIDIA's reference
adapted) and its recurrence ``fla/ops/gdn2/naive.py``:

* queries, keys and values through a short causal convolution (kernel 4) and SiLU; queries and keys
  L2-normalized per head, queries then scaled by ``dk ** -0.5`` (fla's ``use_qk_l2norm_in_kernel``);
* ``b_t = sigmoid(x_t W_b)`` (``embed_dim -> key width``) and ``w_t = sigmoid(x_t W_w)`` (``embed_dim
  -> value width``), no biases; with ``negative_eigenvalues`` (off by default) ``b_t = 2 sigmoid(x_t
  W_b)``, fla's ``allow_neg_eigval`` (Grazzi et al., 2025): with ``|k_t| = 1`` the erase factor
  ``I - k_t (b_t * k_t)^T`` has the eigenvalues 1 and ``1 - sum_d b_d k_d^2``, a mean of the
  ``1 - b_d`` weighted by ``k_d^2``, in ``(-1, 1)``. Unlike KDA's, the factor is not symmetric where
  ``b_t`` differs across channels, so this bounds its eigenvalues, not its norm;
* the decay and the output exactly as KDA's (:class:`~zoo.attention.variants.kda.ChannelDecay`:
  ``log alpha_t = -exp(A_log_h) softplus(x_t W_1 W_2 + dt_bias)``, rank ``gate_rank``; each head's
  RMSNorm times ``sigmoid(x_t W_3 W_4 + b)``), and KDA's ``decay_lower_bound`` (fla's bounded gate,
  off by default) with it: the layer is a :class:`~zoo.attention.variants.kda.KimiDeltaAttention`
  whose ``beta`` is the erase gate, one per key channel rather than per head, with the write gate
  beside it.

Where the zoo differs: fla's grouped value heads (``num_v_heads``) are left out, as for KDA; the
key width is the block's (fla sets it by ``head_dim``). The chunkwise form is the generalized delta
rule's; fla's ``naive_chunk_gdn2`` and ``chunk_gdn2`` build a WY form of their own, whose erasing
keys ``b_t * k_t`` differ from the written ``k_t``; both compute the same recurrence
(``benchmarks/fla_reference.py`` prints the differences).
"""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.kernels.l2_norm import l2_normalize
from zoo.attention.modules.gating import WriteStrength
from zoo.attention.modules.recurrence import LowRankRecurrence
from zoo.attention.variants.deltanet import DeltaNetOptions
from zoo.attention.variants.kda import KimiDeltaAttention

__all__ = ["GatedDeltaNet2Attention", "KimiDeltaOptions"]


class KimiDeltaOptions(DeltaNetOptions, total=False):
    """Kimi Delta Attention's arguments beside every family's, which Gated DeltaNet-2 takes as they are."""

    gate_rank: int | None
    decay_lower_bound: float | None


@register_attention_layer("gated_deltanet2", aliases=("gated_delta_net2", "gdn2"))
class GatedDeltaNet2Attention(KimiDeltaAttention):
    """Gated DeltaNet-2 (see the module docstring).

    Args:
        embed_dim: The block's width: what the gates are projected from.
        num_heads: Heads.
        options: :class:`~zoo.attention.variants.kda.KimiDeltaAttention`'s (``expand_v``,
            ``gate_rank``, ``decay_lower_bound``, ``negative_eigenvalues``: the erase gate in
            ``(0, 2)``) and :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4).

    Parameters beside KDA's: ``beta`` is the erase gate (``embed_dim -> key width``, no bias), one
    per key channel; ``write`` the write gate (``embed_dim -> value width``, no bias).
    """

    def __init__(self, embed_dim: int, num_heads: int, **options: Unpack[KimiDeltaOptions]) -> None:
        super().__init__(embed_dim, num_heads, **options)
        self.beta = WriteStrength(embed_dim, self.q_proj.out_features, self.beta.negative_eigenvalues)
        self.write = nn.Linear(embed_dim, self.v_proj.out_features, bias=False)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> LowRankRecurrence:
        q = l2_normalize(queries, self.key_head_dim**-0.5)
        k = l2_normalize(keys)
        erase = self.split_heads(self.beta.strengths(layer_input, queries.dtype))  # (B, H, T, dk)
        write = self.split_heads(self.write(layer_input).to(queries.dtype).sigmoid())  # (B, H, T, dv)
        log_alpha = self.decay(layer_input, queries.dtype)
        return LowRankRecurrence(q, k, write * values, -k, erase * k * log_alpha.exp(), log_alpha)
