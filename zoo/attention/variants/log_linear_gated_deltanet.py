"""Log-linear Gated DeltaNet (Guo, Yang, Goel, Xing, Dao and Kim, 2025, "Log-Linear Attention",
arXiv 2506.04761): Gated DeltaNet with its one state replaced by a Fenwick tree of states,
``ceil(log2 T) + 1`` of them, each read with its own weight per token.

Gated DeltaNet (:mod:`zoo.attention.variants.deltanet`) unrolls to ``O = W V`` with the delta
rule's matrix ``W = (Q K^T * L)(I + K K^T * (L - I))^{-1}`` (``beta`` folded into the keys, ``L``
the decays ``a_{j+1} ... a_i``). The paper's log-linear Gated DeltaNet multiplies that whole matrix
by the hierarchical mask, ``M^H_ij = lambda_i^(level(i, j))`` with ``level(i, j) = bit_length(i XOR
j)`` the Fenwick level of the bucket that holds ``j`` in ``i``'s prefix::

    O = (W * M^H) V

which is what is implemented here. Recurrently, in the kernels' orientation (``(dk, dv)`` states,
row vectors), each level's state takes the whole gated delta-rule transition of every step, erasing
along ``k_t`` what that level holds, and only level 0 (the token itself) takes the write::

    (before t: the binary counter's carry, levels 0 .. m into m + 1, m the trailing ones of t - 1)
    S^(l)_t = (I - b_t k_t^T k_t) a_t S^(l)_{t-1}    for l > 0,        S^(0)_t = b_t k_t^T v_t
    o_t = sum_l lambda_t^(l) q_t S^(l)_t

The level states sum to Gated DeltaNet's state (the transition is linear), so with every ``lambda``
one this is Gated DeltaNet. ``lambda_t^(l) = softplus(L_{h,l} (x_t W_l)_h)``, as for log-linear
Mamba-2. Everything else is Gated DeltaNet's (subclassed: its projections, convolution, SiLU and L2
norms, write strengths, decay, output norm and gate, ``negative_eigenvalues``); the kernels are
:mod:`zoo.attention.kernels.log_linear` over the delta-rule kernels.

flash-linear-attention has no log-linear Gated DeltaNet (only ``fla/layers/log_linear_mamba2.py``);
the level weights follow that layer, and the chunkwise form the paper's chunk-level scan over the
zoo's delta-rule kernels (the paper's own Triton kernel is not followed).
"""

from __future__ import annotations

from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.log_linear_layer import NUM_LEVELS, LogLinearLayer
from zoo.attention.variants.deltanet import DeltaNetOptions, GatedDeltaNetAttention

__all__ = ["LogLinearGatedDeltaNetAttention"]


@register_attention_layer("log_linear_gated_deltanet", aliases=("loglinear_gated_deltanet",))
class LogLinearGatedDeltaNetAttention(LogLinearLayer, GatedDeltaNetAttention):
    """Log-linear Gated DeltaNet (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads.
        num_levels: Level weights per token and head: inputs up to ``2 ** (num_levels - 1)``
            positions.
        options: :class:`~zoo.attention.variants.deltanet.GatedDeltaNetAttention`'s.

    Parameters of its own, beside Gated DeltaNet's: ``levels`` (a projection ``embed_dim ->
    num_heads * num_levels`` and the scale ``L`` per head and level).
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, num_levels: int = NUM_LEVELS, **options: Unpack[DeltaNetOptions]
    ) -> None:  # the options named, so that a misspelt one is refused with the accepted ones
        super().__init__(embed_dim, num_heads, num_levels=num_levels, **options)
