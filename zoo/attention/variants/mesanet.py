"""MesaNet (von Oswald et al., 2025, "MesaNet: Sequence Modeling by Locally Optimal Test-Time
Training", arXiv:2506.05233): each token reads the ridge regression of the values on the keys
seen so far, solved exactly (up to the solver's steps) rather than by one gradient step.

Per head, with row vectors and two running sums decayed by one gate::

    H_t = gamma_t H_{t-1} + beta_t k_t^T k_t,        G_t = gamma_t G_{t-1} + beta_t k_t^T v_t
    o_t = q_t (H_t + Lambda)^{-1} G_t

``Lambda = Diag(lam)`` a learned ridge per head and key dimension. The read is a linear system
per token, ``x_t (H_t + Lambda) = q_t``, solved by a fixed number of conjugate-gradient steps
(``cg_steps``, 30 as flash-linear-attention's), then ``o_t = x_t G_t``
(:mod:`zoo.attention.kernels.mesa`: the chunkwise form never forms ``H_t`` per token; the
recurrent form, for decoding, does). The decoding state is the two sums side by side, ``[H | G]``
``(dk, dk + dv)`` per head.

What the layer reads, as flash-linear-attention's ``fla/layers/mesa_net.py``:

* queries and keys through a short causal convolution (kernel 4) and SiLU, then L2-normalized
  (unscaled: the ridge sets the read's scale);
* ``beta_t = sigmoid(x_t w_b + b_b)`` and ``gamma_t = sigmoid(x_t w_a + b_a)`` per head (the log
  decay ``logsigmoid``), each a projection with a bias;
* ``lam = softplus(p) + lambda_lower_bound`` (0.25), ``p`` starting where ``lam = 1``;
* the output: each head's RMSNorm, times ``silu(x W_g)`` with ``output_gate`` (off by default, as
  fla's ``use_output_gate``), then the output projection.

Where the zoo departs: the values pass the convolution and SiLU too (the zoo's recurrent layer
convolves all three; fla's MesaNet projects its values only); the heads and widths are the
stack's (keys the block's width, values ``expand_v`` times it; fla's default heads are 128 wide); one
``cg_steps`` serves training and decoding (fla has one of each, and starts decoding's solver from
a Jacobi guess), so decoding from the cache equals the full forward; the solver's gradient is the
exact solution's, as fla's backward (:mod:`zoo.attention.kernels.conjugate_gradient`).
flash-linear-attention's Triton kernels are not called: every form is the zoo's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.kernels.l2_norm import l2_normalize
from zoo.attention.modules.gating import HeadNorm
from zoo.attention.modules.mesa_recurrence import MesaRecurrence
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions

__all__ = ["MesaNetAttention"]

LAMBDA_INITIAL = 1.0
"""The ridge every key dimension starts at (flash-linear-attention's)."""


@register_attention_layer("mesanet", aliases=("mesa_net",))
class MesaNetAttention(RecurrentLayer):
    """MesaNet (see the module docstring).

    Args:
        embed_dim: The block's width: what the gates are projected from.
        num_heads: Heads.
        expand_v: The value width, in multiples of ``embed_dim``.
        cg_steps: Conjugate-gradient steps of each token's read (fla's ``max_cg_step_training``).
        lambda_lower_bound: The ridge's floor, ``>= 0``, below :data:`LAMBDA_INITIAL`.
        output_gate: Multiply each head's normalized output by ``silu(x W_g)``.
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4).

    Parameters of its own: ``beta_proj`` and ``decay_proj`` (``embed_dim -> num_heads``, with a
    bias); ``lambda_params`` (one per key feature); ``norm``, the per-head RMSNorm's scale;
    ``gate`` (``embed_dim -> value width``, no bias) with ``output_gate``.
    """

    #: SiLU on queries, keys and values (fla: queries and keys)
    silu = "always"
    fla_refusal = "flash-linear-attention's MesaNet kernels are not wired into the zoo"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        expand_v: float = 1.0,
        cg_steps: int = 30,
        lambda_lower_bound: float = 0.25,
        output_gate: bool = False,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        self.require_positive(cg_steps=cg_steps)
        if not 0 <= lambda_lower_bound < LAMBDA_INITIAL:
            raise ValueError(
                f"MesaNetAttention: lambda_lower_bound must be in [0, {LAMBDA_INITIAL}), got {lambda_lower_bound!r}."
            )
        value_dim = int(embed_dim * expand_v)
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=value_dim, **options)
        self.cg_steps, self.lambda_lower_bound = cg_steps, lambda_lower_bound
        self.beta_proj = nn.Linear(embed_dim, num_heads)
        self.decay_proj = nn.Linear(embed_dim, num_heads)
        start = math.log(math.expm1(LAMBDA_INITIAL - lambda_lower_bound))  # softplus(start) + bound = LAMBDA_INITIAL
        self.lambda_params = nn.Parameter(torch.full((embed_dim,), start))
        self.gate = nn.Linear(embed_dim, value_dim, bias=False) if output_gate else None
        self.norm = HeadNorm(self.head_dim)

    def ridge(self, dtype: torch.dtype) -> Tensor:
        """``lam`` ``(num_heads, dk)``: ``softplus(lambda_params) + lambda_lower_bound``."""
        lam = F.softplus(self.lambda_params.to(dtype)) + self.lambda_lower_bound
        return lam.unflatten(0, (self.num_heads, -1))

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> MesaRecurrence:
        dtype = queries.dtype
        beta = self.beta_proj(layer_input).to(dtype).sigmoid().transpose(-1, -2)  # (B, H, T)
        log_decay = F.logsigmoid(self.decay_proj(layer_input).to(dtype)).transpose(-1, -2)
        q, k = l2_normalize(queries), l2_normalize(keys)
        return MesaRecurrence(q, k, values, beta, log_decay, self.ridge(dtype), self.cg_steps)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output, None if self.gate is None else self.split_heads(self.gate(layer_input)))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, cg_steps={self.cg_steps}, lambda_lower_bound={self.lambda_lower_bound}"
