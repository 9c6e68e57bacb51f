"""Gated DeltaProduct (Siems et al., 2025, "DeltaProduct: Improving State-Tracking in Linear RNNs
via Householder Products"): Gated DeltaNet with ``n`` delta-rule steps per token.

Per head, in the papers' orientation (a ``(dv, dk)`` state, column vectors, ``o_t = S_t q_t``)::

    H_{t,0} = a_t S_{t-1},
    H_{t,j} = H_{t,j-1} (I - beta_{t,j} k_{t,j} k_{t,j}^T) + beta_{t,j} v_{t,j} k_{t,j}^T,   j = 1..n
    S_t = H_{t,n}

so each token multiplies the state by a product of ``n`` generalized Householder matrices
(``n = 1``: Gated DeltaNet). With ``beta`` in ``(0, 2)`` their eigenvalues reach ``[-1, 1]``: the
product can reflect and rotate, and the paper shows that more steps track more of a group's
state (permutations). The kernels keep the transposed state with row vectors
(:mod:`zoo.attention.kernels.delta_product`), which lays the ``n`` steps of each token out as the
delta rule over ``n * T`` steps.

What the layer reads, as the paper and flash-linear-attention's ``fla/layers/gated_deltaproduct.py``:

* a query and ``n`` keys and values per token and head (the key and value projections ``n`` times
  as wide), through a short causal convolution (kernel 4) and SiLU; queries and keys
  L2-normalized, queries scaled by ``dk ** -0.5``;
* ``beta_{t,j} = 2 sigmoid(x_t w_{b,j})`` per head and step (``negative_eigenvalues``, the
  paper's and fla's default; ``False``: ``sigmoid``, eigenvalues in ``[0, 1]``;
  :class:`~zoo.attention.modules.gating.WriteStrength`, as DeltaNet's and KDA's option);
* Gated DeltaNet's decay per head and token, Mamba-2's ``a_t = exp(-softplus(x_t w_a + dt_bias) A)``
  (:class:`~zoo.attention.modules.gating.StepDecay`), applied once, before the token's first step;
* the output: each head's RMSNorm times ``silu(x W_g)``, then the output projection.

Where the zoo differs: the heads are the stack's (fla defaults to 6 heads of 256); values are the
block's width (``expand_v``; fla doubles them); grouped value heads are left out. A rotary scheme
rotates each of a token's ``n`` keys at the token's position. The chunkwise form is the delta
rule's WY form over the interleaved steps (exact; on CUDA with the ``fla`` extra, fla's delta-rule kernel runs the
same interleaving, as its ``chunk_gated_delta_product`` does: :mod:`~zoo.attention.kernels.fla`). The weights
(``need_weights``) sum each token's ``n`` steps: a heatmap, which the ``n`` values per token keep
from being the matrix that multiplies them.

On MQAR's (256, 16) cell at width 64 (``docs/results/recall.md``, Gated DeltaProduct's plateau, rate
sweep and 5,000 steps) it stayed at chance for 1,500 steps at each of three rates (1e-3, 3e-3,
1e-2), where Gated DeltaNet left the plateau at about step 850; with a 5,000-step schedule it left
it between steps 1,000 and 1,500 and reached 0.935 (Gated DeltaNet 0.991). The two Householder steps
with ``beta`` in ``(0, 2)``, chosen for state tracking, delay recall in this cell; they do not
prevent it (one seed).

On the group word problems (``docs/results/state_tracking.md``, S3 and A5; width 64, 2 layers,
6,000 batches of 32 words at lengths 3-40) two steps a token learn S3, the smallest non-abelian
group, where one step does not: over three seeds 1.000 against 0.672 at length 40 and 0.812
against 0.369 at 256. A5 (60 elements) stays at chance at one, two and three steps on that budget;
the paper tracks it with more steps per token and far longer training, so there the zoo's cells
disagree with it, on a CPU's budget.
"""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.kernels.l2_norm import l2_normalize
from zoo.attention.modules.gating import HeadNorm, StepDecay, WriteStrength
from zoo.attention.modules.recurrence import ProductRecurrence
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions

__all__ = ["GatedDeltaProductAttention"]


@register_attention_layer("gated_deltaproduct", aliases=("gated_delta_product", "deltaproduct"))
class GatedDeltaProductAttention(RecurrentLayer):
    """Gated DeltaProduct (see the module docstring).

    Args:
        embed_dim: The block's width: what the gates are projected from.
        num_heads: Heads.
        householder_steps: Delta-rule steps per token, ``n`` (the paper's ``n_h``; 1 is Gated DeltaNet).
        negative_eigenvalues: ``beta`` in ``(0, 2)`` (True, the paper's) or ``(0, 1)``.
        expand_v: The value width, in multiples of ``embed_dim``.
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4; ``chunk_size``
            counts tokens, each ``n`` steps of the delta rule).

    Parameters of its own: ``beta`` (``embed_dim -> num_heads * n``, no bias); ``decay`` (a
    projection ``embed_dim -> num_heads`` and, per head, ``A_log`` and ``dt_bias``); ``gate``
    (``embed_dim -> value width``, no bias), the swish output gate; ``norm``, the per-head RMSNorm's scale.
    """

    #: SiLU on queries, keys and values, as Gated DeltaNet's
    silu = "always"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        householder_steps: int = 2,
        negative_eigenvalues: bool = True,
        expand_v: float = 1.0,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        self.require_positive(householder_steps=householder_steps)
        value_dim = int(embed_dim * expand_v)
        super().__init__(
            embed_dim, num_heads, key_dim=embed_dim, value_dim=value_dim, writes=householder_steps, **options
        )
        self.beta = WriteStrength(embed_dim, num_heads * householder_steps, negative_eigenvalues)
        self.decay = StepDecay(embed_dim, num_heads, a_range=(0.0, 16.0))
        self.gate = nn.Linear(embed_dim, value_dim, bias=False)
        self.norm = HeadNorm(self.head_dim)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> ProductRecurrence:
        q = l2_normalize(queries, self.key_head_dim**-0.5)
        k = l2_normalize(keys.unflatten(-1, (self.writes, -1)))  # (B, H, T, n, dk)
        v = values.unflatten(-1, (self.writes, -1))
        beta = self.split_heads(self.beta.strengths(layer_input, queries.dtype))  # (B, H, T, n)
        return ProductRecurrence(q, k, v, beta, self.decay(layer_input, queries.dtype)[1])

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output, self.split_heads(self.gate(layer_input)))
