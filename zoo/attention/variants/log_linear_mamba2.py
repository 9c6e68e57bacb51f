"""Log-linear Mamba-2 (Guo, Yang, Goel, Xing, Dao and Kim, 2025, "Log-Linear Attention", arXiv
2506.04761): Mamba-2's state-space dual with its one state replaced by a Fenwick tree of states,
``ceil(log2 T) + 1`` of them, each read with its own weight per token.

Mamba-2 (:mod:`zoo.attention.variants.mamba2`) unrolls to ``y = (L * C B^T) (dt x) + D x``, with
``L_ij = a_{j+1} ... a_i`` the decay. Log-linear Mamba-2 multiplies that matrix by the hierarchical
mask ``M^H_ij = lambda_i^(level(i, j))``, ``level(i, j) = bit_length(i XOR j)`` the Fenwick level
of the bucket that holds ``j`` in ``i``'s prefix::

    y = (L * C B^T * M^H) (dt x) + D x,        lambda_t^(l) = softplus(L_{h,l} (u_t W_l)_h)

Recurrently (``S^(l)`` the state of the level-``l`` bucket of position ``t``'s prefix)::

    (before t: the binary counter's carry, levels 0 .. m into m + 1, m the trailing ones of t - 1)
    S^(l)_t = a_t S^(l)_{t-1}  for l > 0,        S^(0)_t = B_t^T (dt_t x_t)
    y_t = sum_l lambda_t^(l) C_t S^(l)_t + D x_t

With every ``lambda`` one, this is Mamba-2. Everything else is Mamba-2's (subclassed: its
projections, convolution, step sizes, ``D`` skip and gated RMSNorm); the kernels are
:mod:`zoo.attention.kernels.log_linear` over the scalar-decay kernels.

Follows flash-linear-attention's ``fla/layers/log_linear_mamba2.py`` and
``fla/ops/log_linear_attn/naive.py``: ``lambda`` from a projection of the input (fla's ``dl``
slice of ``in_proj``) times a learned scale per head and level ``L`` (starting at one), through
softplus; fifteen levels by default (fla's for 16k tokens; ``num_levels``). Departures: the level
projection is its own linear map (``levels.proj``) as Mamba-2's projections are here; ``B`` and
``C`` shared by a group of heads are repeated per head for the tree's kernels; the chunk is any power
of two (fla's Triton kernel takes 64 only); ``negative_eigenvalues`` is refused (the tree's kernels
take a decay in ``(0, 1]``, as fla's do).
"""

from __future__ import annotations

from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.log_linear_layer import NUM_LEVELS, LogLinearLayer
from zoo.attention.modules.recurrent import RecurrentOptions
from zoo.attention.variants.mamba2 import Mamba2Attention

__all__ = ["LogLinearMamba2Attention", "Mamba2Options"]


class Mamba2Options(RecurrentOptions, total=False):
    """Mamba-2's arguments beside every family's (:class:`~zoo.attention.variants.mamba2.Mamba2Attention`
    documents them and holds their defaults)."""

    expand: float
    d_state: int
    ngroups: int
    negative_eigenvalues: bool


@register_attention_layer("log_linear_mamba2", aliases=("loglinear_mamba2",))
class LogLinearMamba2Attention(LogLinearLayer, Mamba2Attention):
    """Log-linear Mamba-2 (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads.
        num_levels: Level weights per token and head: inputs up to ``2 ** (num_levels - 1)``
            positions.
        options: :class:`~zoo.attention.variants.mamba2.Mamba2Attention`'s (``expand``, ``d_state``,
            ``ngroups``, and every recurrent family's); ``negative_eigenvalues`` is refused.

    Parameters of its own, beside Mamba-2's: ``levels`` (a projection ``embed_dim -> num_heads *
    num_levels`` and the scale ``L`` per head and level).
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, num_levels: int = NUM_LEVELS, **options: Unpack[Mamba2Options]
    ) -> None:
        if options.get("negative_eigenvalues"):
            raise ValueError(
                "LogLinearMamba2Attention: negative_eigenvalues is not supported (its tree's kernels take decays in "
                "(0, 1]); drop the option or use mamba2."
            )
        super().__init__(embed_dim, num_heads, num_levels=num_levels, **options)
