"""Kimi Delta Attention (KDA; Kimi Team, 2025, "Kimi Linear"): Gated DeltaNet whose decay is one
gate per key dimension instead of one per head.

The Kimi Linear report writes, per head, with a ``(dk, dv)`` state and column vectors::

    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,        o_t = S_t^T q_t

``alpha_t`` in ``(0, 1)^dk`` forgets each key dimension at its own rate (GLA's gate), then the
delta rule moves the state's value for ``k_t`` a fraction ``beta_t`` of the way to ``v_t``. The
kernels keep the same ``(dk, dv)`` state with row vectors (``o_t = q_t S_t``); the transition is
a diagonal plus a rank-one matrix, ``Diag(alpha_t) - beta_t k_t^T (k_t * alpha_t)``, which the
generalized delta rule runs in three forms (:mod:`zoo.attention.kernels.dplr`: ``a = -beta k``,
``b = k * alpha``, the written key ``beta k``).

What the layer reads, as the report and flash-linear-attention's ``fla/layers/kda.py``:

* queries, keys and values through a short causal convolution (kernel 4) and SiLU; queries and
  keys L2-normalized per head (``|k_t| = 1``: the transition's eigenvalues stay in ``[0, 1]``),
  queries then scaled by ``dk ** -0.5``;
* ``beta_t = sigmoid(x_t w_b)`` per head, or with ``negative_eigenvalues`` (off by default)
  ``2 sigmoid(x_t w_b)`` in ``(0, 2)``: Grazzi et al.'s extension (2025, "Unlocking State-Tracking
  in Linear RNNs Through Negative Eigenvalues"), fla's ``allow_neg_eigval``, which lets
  ``I - beta_t k_t k_t^T`` reflect (its eigenvalue ``1 - beta_t`` reaches ``(-1, 1)``) and one
  layer track parity (:class:`~zoo.attention.modules.gating.WriteStrength`);
* the decay per key dimension from a low-rank projection of the layer's input, in Mamba-2's form
  per channel: ``log alpha_t = -exp(A_log_h) * softplus(x_t W_1 W_2 + dt_bias)``, ``W_1`` of rank
  ``gate_rank``, ``A_log`` per head (``A`` uniform in ``(1, 16)`` at the start) and ``dt_bias`` per
  channel (the inverse softplus of step sizes log-uniform in ``(0.001, 0.1)``), as fla initializes them;
* the output: each head's RMSNorm times ``sigmoid(x_t W_3 W_4 + b)``, a low-rank gate (rank
  ``gate_rank``, a bias on the second map), then the output projection.

``decay_lower_bound`` (off by default) is fla's bounded gate (``chunk_kda``'s ``lower_bound`` with
``safe_gate``, -5 recommended there): ``log alpha_t = lower_bound * sigmoid(exp(A_log_h) * (x_t W_1
W_2 + dt_bias))``, in ``[lower_bound, 0)`` at every step. fla bounds it so that its kernel can take
16-token sub-chunks on tensor cores; here it does the same for the decay kernel on the CPU: a
gate that forgets at most ``|lower_bound|`` a step keeps every ``SPAN_LIMIT / |lower_bound|``
steps in one sub-chunk (8 at -5), where trained unbounded gates can send the kernel down to
one-step sub-chunks (:mod:`zoo.attention.kernels.decay`; ``docs/results/copying.md``, KDA cut short;
``docs/results/recall.md``, MQAR (256, 16) at width 128). Trained on MQAR's (256, 16) cell
(``docs/results/recall.md``, the bounded gate at widths 128 and 64), the report's gate ended with 2-
to 4-step sub-chunks and the bounded one with 8 and 16: at width 128 the same recall (0.999 and
1.000), 1.39x faster a step; at width 64 0.882 / 0.950 against 0.9994 / 0.973 over two seeds, 1.30x
/ 1.03x faster. In Kimi Linear's 3:1 stack with MLA (``docs/results/recall.md``, the six production
recipes and two recipes at chance; one seed) the bound decides recall: 0.993 in 1,000 steps with it,
chance in 1,500 with the report's gate.

``head_dim`` (None by default: ``embed_dim // num_heads``) sets each head's key width apart from
the block's, as fla's ``head_dim`` does: queries and keys ``num_heads * head_dim`` wide, values
``expand_v`` times that (Kimi Linear's 32 heads of 128, 4096 wide, in a block of 2304).
``gate_bias`` (True by default, as fla) keeps the bias on the output gate's second map;
transformers' ``KimiLinearDeltaAttention`` has none (:mod:`zoo.integrations.hf_layers.kimi_linear`).

Where the zoo differs: ``gate_rank`` defaults to the value head size (fla's choice too); fla's
option of grouped value heads is left out.
The chunkwise form is the zoo's own (quadratic inside chunks, exact to rounding); on CUDA
with the ``fla`` extra it runs in flash-linear-attention's DPLR kernel
(:mod:`~zoo.attention.kernels.fla` says why not ``chunk_kda``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.kernels.l2_norm import l2_normalize
from zoo.attention.modules.gating import HeadNorm, WriteStrength
from zoo.attention.modules.recurrence import LowRankRecurrence
from zoo.attention.modules.recurrent import RecurrentLayer, RecurrentOptions

__all__ = ["ChannelDecay", "KimiDeltaAttention"]


class ChannelDecay(nn.Module):
    """A decay per head and key dimension from a low-rank map of the layer's input:
    ``log alpha = -exp(A_log_h) * softplus(x W_1 W_2 + dt_bias)`` (Kimi Delta Attention's gate;
    Mamba-2's step size per channel), or with ``lower_bound``
    ``log alpha = lower_bound * sigmoid(exp(A_log_h) * (x W_1 W_2 + dt_bias))`` (fla's bounded gate).

    Args:
        embed_dim: The layer's width.
        num_heads: Heads, one ``A`` each.
        head_dim: Key dimensions per head, one ``dt_bias`` each.
        rank: Rank of the map.
        a_range: Where ``A`` starts, uniform.
        dt_range: Step sizes ``softplus(dt_bias)`` start log-uniform in it.
        lower_bound: The lowest log decay of a step (negative); None: unbounded.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        head_dim: int,
        rank: int,
        a_range: tuple[float, float] = (1.0, 16.0),
        dt_range: tuple[float, float] = (1e-3, 1e-1),
        dt_floor: float = 1e-4,
        lower_bound: float | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.lower_bound = lower_bound
        self.proj = nn.Sequential(
            nn.Linear(embed_dim, rank, bias=False), nn.Linear(rank, num_heads * head_dim, bias=False)
        )
        low, high = (math.log(bound) for bound in dt_range)
        dt = (torch.rand(num_heads * head_dim) * (high - low) + low).exp().clamp(min=dt_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(*a_range).log())

    def forward(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor:
        """``log alpha`` ``(B, H, T, head_dim)`` in ``dtype``."""
        inner = self.proj(layer_input).to(dtype) + self.dt_bias.to(dtype)
        inner = inner.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)
        scale = self.A_log.to(dtype).exp()[:, None, None]
        if self.lower_bound is None:
            return -F.softplus(inner) * scale
        return self.lower_bound * torch.sigmoid(inner * scale)


@register_attention_layer("kda", aliases=("kimi_delta_attention",))
class KimiDeltaAttention(RecurrentLayer):
    """Kimi Delta Attention (see the module docstring).

    Args:
        embed_dim: The block's width: what the gates are projected from.
        num_heads: Heads.
        head_dim: Each head's key width (fla's ``head_dim``); None: ``embed_dim // num_heads``.
        expand_v: The value width, in multiples of the key width (``embed_dim`` by default).
        gate_rank: Rank of the decay's and the output gate's projections; None: the value head size.
        decay_lower_bound: The lowest log decay a step may take, fla's ``lower_bound`` (-5 there);
            None: the report's unbounded gate (see the module docstring).
        negative_eigenvalues: ``beta`` in ``(0, 2)`` (Grazzi et al.) rather than ``(0, 1)``.
        gate_bias: A bias on the output gate's second map (fla's); False: none (transformers').
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 4).

    Parameters of its own: ``beta`` (``embed_dim -> num_heads``, no bias); ``decay``
    (:class:`ChannelDecay`); ``gate`` (``embed_dim -> gate_rank -> value width``, a bias on the
    second with ``gate_bias``), the sigmoid output gate; ``norm``, the per-head RMSNorm's scale.
    """

    #: SiLU on queries, keys and values, as Kimi Linear's
    silu = "always"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        expand_v: float = 1.0,
        gate_rank: int | None = None,
        decay_lower_bound: float | None = None,
        negative_eigenvalues: bool = False,
        gate_bias: bool = True,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        if head_dim is not None and (not isinstance(head_dim, int) or head_dim < 1):
            raise ValueError(f"KimiDeltaAttention: head_dim must be a positive integer or None, got {head_dim!r}.")
        key_dim = embed_dim if head_dim is None else num_heads * head_dim
        value_dim = int(key_dim * expand_v)
        super().__init__(embed_dim, num_heads, key_dim=key_dim, value_dim=value_dim, **options)
        rank = self.head_dim if gate_rank is None else gate_rank
        if not isinstance(rank, int) or rank < 1:
            raise ValueError(f"KimiDeltaAttention: gate_rank must be a positive integer or None, got {gate_rank!r}.")
        if decay_lower_bound is not None and not (
            isinstance(decay_lower_bound, (int, float)) and -math.inf < decay_lower_bound < 0
        ):
            raise ValueError(
                "KimiDeltaAttention: decay_lower_bound must be a negative number (fla recommends -5) or None, "
                f"got {decay_lower_bound!r}."
            )
        self.beta = WriteStrength(embed_dim, num_heads, negative_eigenvalues)
        self.decay = ChannelDecay(embed_dim, num_heads, self.key_head_dim, rank, lower_bound=decay_lower_bound)
        self.gate = nn.Sequential(nn.Linear(embed_dim, rank, bias=False), nn.Linear(rank, value_dim, bias=gate_bias))
        self.norm = HeadNorm(self.head_dim)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> LowRankRecurrence:
        q = l2_normalize(queries, self.key_head_dim**-0.5)
        k = l2_normalize(keys)
        beta = self.beta.strengths(layer_input, queries.dtype).transpose(-1, -2).unsqueeze(-1)  # (B, H, T, 1)
        log_alpha = self.decay(layer_input, queries.dtype)
        return LowRankRecurrence(q, beta * k, values, -beta * k, k * log_alpha.exp(), log_alpha)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        return self.norm(output) * self.split_heads(self.gate(layer_input)).to(output.dtype).sigmoid()
