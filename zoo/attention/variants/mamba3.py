"""Mamba-3 (Lahoti, Li, Chen, Wang, Bick, Kolter, Dao and Gu, 2026, "Mamba-3: Improved Sequence
Modeling using State Space Principles", arXiv:2603.15569) as an attention layer, SISO and MIMO.

Mamba-2's selective state space (:mod:`zoo.attention.variants.mamba2`) changed in four ways:

* an exponential-trapezoidal discretization: the state reads the previous token's input as well
  as the current one's, mixed by ``lambda_t = sigmoid(u_t w_lambda)`` per head::

      h_t = alpha_t h_{t-1} + beta_t B_{t-1}^T x_{t-1} + gamma_t B_t^T x_t,        y_t = C_t h_t + D x_t
      alpha_t = exp(dt_t A_t),    beta_t = (1 - lambda_t) dt_t alpha_t,    gamma_t = lambda_t dt_t

  (``lambda_t = 1`` is Mamba-2's exponential-Euler rule); ``dt_t = softplus(u_t w_dt + dt_bias)`` and
  a data-dependent ``A_t = -max(f(u_t w_A), A_floor)`` per head, with the reference code's heavy-tailed
  ``f(z) = 1 + z`` for ``z >= 0`` and ``1 / (1 - z)`` below;
* a complex state, realized as rotary positions with data-dependent angles: ``B_t`` and ``C_t`` are
  rotated, pair by pair of their first ``rope_fraction * d_state`` features, by the angles
  ``theta_t = theta_{t-1} + pi tanh(u_t W_theta) dt_t`` (one set per head, summed over the tokens
  and kept modulo ``2 pi``); then ``C_i R(theta_i) (B_j R(theta_j))^T = C_i R(theta_i - theta_j) B_j^T``,
  the state of each pair turning by ``pi tanh(.) dt`` a step: a complex eigenvalue;
* ``B`` and ``C`` pass an RMSNorm (a scale per feature) and get a learned bias per head (and
  rank), starting at 1, before the rotation;
* no short convolution; the output is ``y * silu(z)``, then the output projection.

MIMO (``mimo_rank = R > 1``): each head writes and reads ``R`` ranks a step: ``B_t`` and ``C_t`` are
``R`` rows each, the value of rank ``r`` is ``x_t * m^x_r`` (a learned vector per head and rank,
starting at ``1 / R``); the state sums the ``R`` writes, ``h_t = ... + gamma_t sum_r B_{t,r}^T (x_t
* m^x_r)``; each rank reads ``y_{t,r} = C_{t,r} h_t + D x_t * m^x_r``, is gated by ``silu(z_t * m^z_r)``
(``m^z`` starting at 1) and the ranks are summed with weights ``m^o_r`` (starting at ``1 / R``).
``R = 1`` with no such vectors is SISO.

The recurrence runs on the scalar-decay kernels, ``C`` as queries, ``B`` as keys, ``x`` as values:
:class:`~zoo.attention.modules.trapezoid_recurrence.TrapezoidRecurrence` says how the kernels
keep the state without the current token's own write, each token's two writes completed one step
late (causal by construction), plus a term of the token alone, and the ``R`` writes of a token
``R`` steps, so the parallel, chunkwise and recurrent forms are the kernels' and agree to
rounding. (Appending the previous token's ``B x`` along the key dimension instead would need a
state twice as wide, and its two writes have different values.) A chunk of
``chunk_size`` counts the state's writes, ``chunk_size / R`` tokens, as the reference code
recommends 64 for SISO and ``64 / R`` tokens for MIMO: ``R`` must divide it. Decoding keeps, in a
:class:`~zoo.attention.contract.cache.StateCache`, the state, the last token's rotated ``B`` and
values (the next step's ``beta`` term reads them) and the angles' sum.

Parity needs no ``negative_eigenvalues`` option here: Mamba-2 tracks parity only if a decay may be
negative, and Mamba-3 gets the sign from the rotation: a step with ``pi tanh(.) dt_t = pi`` turns a
pair by ``pi``, ``R(pi) = -I``, so the transition of that pair is ``-alpha_t``, and summed angles
count the flips modulo ``2 pi`` (the paper's parity and modular arithmetic results rest on it).

Follows ``mamba_ssm/modules/mamba3.py`` (``state-spaces/mamba``; its pure-PyTorch step and
chunked references in ``tests/ops/triton/test_mamba3_siso.py`` and
``tests/ops/tilelang/test_mamba3_mimo.py``) and fla's ``fla/layers/mamba3.py``, which calls the
same kernels. The ``mamba3_simple.py`` the issue names is not in that snapshot. Where the zoo
differs: ``in_proj`` is separate maps (``q_proj`` for ``C``, ``k_proj`` for ``B``, ``v_proj`` for
``x``, ``gate`` for ``z``, ``steps`` for ``dt``, ``A`` and ``lambda``, ``angles``), biased as the
stack says; the heads are the stack's ``num_heads`` (Mamba-3 fixes their size at 64); ``A``
follows ``mamba_ssm``'s heavy tail (fla uses ``softplus``); MIMO rotates pairs ``(2i, 2i + 1)`` as
SISO does, where the reference's MIMO kernel pairs ``i`` with ``i + N / 2`` (the same function up to
an order of the features); the optional output RMSNorm (``is_outproj_norm``, off by default there)
is left out. A padded token enters the trapezoid as zeros and turns no angle.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.cache import StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.gating import DT_RANGE, step_bias
from zoo.attention.modules.recurrent import CHUNK_SIZE, RecurrentLayer, RecurrentOptions
from zoo.attention.modules.trapezoid_recurrence import TrapezoidRecurrence

__all__ = ["Mamba3Attention", "heavy_tail", "rotate", "summed_angles"]

#: the smallest ``-A_t``: every step forgets a little
A_FLOOR = 1e-4
#: the RMSNorm's epsilon on ``B`` and ``C``
NORM_EPS = 1e-5
#: steps summed at once in the angles' sum (:func:`summed_angles`)
ANGLE_CHUNK = 64


def heavy_tail(z: Tensor) -> Tensor:
    """``1 + z`` for ``z >= 0``, ``1 / (1 - z)`` below: positive, continuous and smooth at 0."""
    return z.clamp(min=0) + 1 / (1 - z.clamp(max=0))


@register_attention_layer("mamba3", aliases=("mamba_3",))
class Mamba3Attention(RecurrentLayer):
    """Mamba-3 (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads: one state, ``dt``, ``A``, ``lambda`` and ``D`` each.
        expand: The inner width ``x`` (and ``z``), in multiples of ``embed_dim``.
        d_state: The state size per head: the width of ``B`` and ``C``.
        ngroups: Groups of heads that share ``B`` and ``C``'s projections (their biases are per head).
        mimo_rank: Ranks a head writes and reads a step (1: SISO).
        rope_fraction: The share of ``B`` and ``C``'s features the angles rotate (0.5 or 1, as Mamba-3).
        dt_range: Where the step sizes start, log-uniform (``mamba_ssm``'s ``dt_min``, ``dt_max``): the
            angles turn by ``pi tanh(.) dt`` a step, so steps that start small start near no rotation.
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s ``mode``, ``chunk_size``
            (writes per chunk: ``mimo_rank`` must divide it) and ``bias``; no convolution, no position scheme.

    Parameters of its own: ``steps`` (``embed_dim -> 3 num_heads``: ``dt``, ``A``, ``lambda``), ``dt_bias``;
    ``angles`` (``embed_dim -> rope_fraction * d_state / 2``, no bias); ``B_norm``, ``C_norm`` (scales,
    ``d_state``) and ``B_bias``, ``C_bias`` (``(num_heads, mimo_rank, d_state)``); ``D`` per head;
    ``gate`` (``z``); with MIMO, ``mimo_x``, ``mimo_z``, ``mimo_o`` (``(num_heads, mimo_rank, head_dim)``).
    """

    supports_rotary = False
    fla_refusal = "flash-linear-attention has no kernel for Mamba-3's trapezoid (its layer calls mamba_ssm's)"
    #: a state ``d_state`` wide, as Mamba-2's: 64 writes a chunk
    cpu_chunk_size = CHUNK_SIZE

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        expand: float = 2.0,
        d_state: int = 128,
        ngroups: int = 1,
        mimo_rank: int = 1,
        rope_fraction: float = 0.5,
        dt_range: tuple[float, float] = DT_RANGE,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        if options.pop("conv_size", 0):
            raise ValueError("Mamba3Attention has no short convolution; leave conv_size out.")
        self.require_positive(mimo_rank=mimo_rank, d_state=d_state)
        chunk = options.get("chunk_size") or CHUNK_SIZE
        if chunk % mimo_rank:
            raise ValueError(
                f"Mamba3Attention: mimo_rank ({mimo_rank}) must divide chunk_size ({chunk} writes a chunk, whole "
                "tokens of mimo_rank writes each); pick a rank that divides it or set chunk_size to a multiple."
            )
        if rope_fraction not in (0.5, 1.0) or int(d_state * rope_fraction) < 2:
            raise ValueError(
                f"Mamba3Attention: rope_fraction must be 0.5 or 1.0 of a d_state of 2 or more (at least one pair "
                f"to rotate); got {rope_fraction} of {d_state}."
            )
        inner = int(embed_dim * expand)
        key_dim = ngroups * mimo_rank * d_state
        super().__init__(
            embed_dim, num_heads, key_dim=key_dim, value_dim=inner, qk_heads=ngroups, conv_size=0, **options
        )
        self.d_state, self.ngroups, self.mimo_rank = d_state, ngroups, mimo_rank
        self.steps = nn.Linear(embed_dim, 3 * num_heads, bias=False)
        self.angles = nn.Linear(embed_dim, int(d_state * rope_fraction) // 2, bias=False)
        self.dt_bias = nn.Parameter(step_bias(num_heads, tuple(dt_range)))  # softplus(dt_bias) = dt
        self.B_norm = nn.Parameter(torch.ones(d_state))
        self.C_norm = nn.Parameter(torch.ones(d_state))
        self.B_bias = nn.Parameter(torch.ones(num_heads, mimo_rank, d_state))
        self.C_bias = nn.Parameter(torch.ones(num_heads, mimo_rank, d_state))
        self.D = nn.Parameter(torch.ones(num_heads))
        self.gate = nn.Linear(embed_dim, inner, bias=False)
        if mimo_rank > 1:
            shape = (num_heads, mimo_rank, self.head_dim)
            self.mimo_x = nn.Parameter(torch.full(shape, 1 / mimo_rank))
            self.mimo_z = nn.Parameter(torch.ones(shape))
            self.mimo_o = nn.Parameter(torch.full(shape, 1 / mimo_rank))

    def chunk_length(self, device: torch.device) -> int:
        """Tokens per chunk: the chunk's writes over ``mimo_rank``."""
        return super().chunk_length(device) // self.mimo_rank

    def _gates(self, layer_input: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """``dt``, ``log alpha = dt A`` and ``lambda`` ``(B, H, T)`` in ``dtype``."""
        raw_dt, raw_a, raw_trap = self.steps(layer_input).to(dtype).transpose(-1, -2).chunk(3, dim=-2)
        dt = F.softplus(raw_dt + self.dt_bias.to(dtype)[:, None])
        a = heavy_tail(raw_a).clamp(min=A_FLOOR)
        return dt, -dt * a, raw_trap.sigmoid()

    def _ranked(self, projected: Tensor, bias: Tensor, weight: Tensor) -> Tensor:
        """``B`` or ``C`` ``(B, T, R * G * N)`` normalized and biased per head: ``(B, H, T, R, N)``."""
        ranks = projected.unflatten(-1, (self.mimo_rank, self.ngroups, self.d_state))
        normed = F.rms_norm(ranks, (self.d_state,), weight.to(ranks.dtype), NORM_EPS)
        per_head = normed.repeat_interleave(self.num_heads // self.ngroups, dim=-2)  # (B, T, R, H, N)
        return per_head.permute(0, 3, 1, 2, 4) + bias.to(ranks.dtype)[:, None]

    def _project(
        self, x: Tensor, context: AttentionContext, cache: StateCache | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
        """Queries ``C`` ``(B, H, T, R, N)``, keys ``B`` and values ``(B, H, T + 1, R, ...)`` (the token
        before first: the cache's, zeros without one), rotated by the angles summed from the cache's;
        the layer's input; the window: the last token's ``B`` and values and the angles' sum."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        steps = context.key_padding
        real = None if steps is None else steps.all(dim=1)  # (B, T)
        dt, _, _ = self._gates(x, dtype)
        turn = math.pi * torch.tanh(self.angles(x).to(dtype)).unsqueeze(1) * dt.unsqueeze(-1)  # (B, H, T, n)
        if real is not None:
            turn = turn * real[:, None, :, None]
        angles = summed_angles(turn, torch.zeros_like(turn[:, :, 0]) if cache is None else cache.extra[2])
        c = rotate(self._ranked(self.q_proj(x).to(dtype), self.C_bias, self.C_norm), angles)
        b = rotate(self._ranked(self.k_proj(x).to(dtype), self.B_bias, self.B_norm), angles)
        values = self.split_heads(self.v_proj(x).to(dtype)).unsqueeze(-2)  # (B, H, T, 1, P)
        if self.mimo_rank > 1:
            values = values * self.mimo_x.to(dtype)[:, None]
        if real is not None:
            keep = real[:, None, :, None, None]
            b, values = b * keep, values * keep
        if cache is None:
            previous_b, previous_v = torch.zeros_like(b[:, :, :1]), torch.zeros_like(values[:, :, :1])
        else:
            previous_b, previous_v = cache.extra[0].unsqueeze(2), cache.extra[1].unsqueeze(2)
        keys, values = torch.cat([previous_b, b], dim=2), torch.cat([previous_v, values], dim=2)
        return c, keys, values, x, (b[:, :, -1], values[:, :, -1], angles[:, :, -1])

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> TrapezoidRecurrence:
        dt, log_decay, trap = self._gates(layer_input, queries.dtype)
        skip = (self.D.to(values.dtype)[:, None, None, None] * values[:, :, 1:]).flatten(-2)
        return TrapezoidRecurrence(queries, keys, values, log_decay, trap * dt, (1 - trap) * dt, skip)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        z = self.split_heads(self.gate(layer_input)).to(output.dtype).unsqueeze(-2)  # (B, H, T, 1, P)
        reads = output.unflatten(-1, (self.mimo_rank, -1))  # (B, H, T, R, P)
        if self.mimo_rank == 1:
            return (reads * F.silu(z)).squeeze(-2)
        gated = reads * F.silu(z * self.mimo_z.to(output.dtype)[:, None])
        return (gated * self.mimo_o.to(output.dtype)[:, None]).sum(-2)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, d_state={self.d_state}, ngroups={self.ngroups}, mimo_rank={self.mimo_rank}"


def summed_angles(turn: Tensor, before: Tensor) -> Tensor:
    """``theta_t = before + turn_1 + ... + turn_t`` modulo ``2 pi``, ``(..., T, n)`` from ``turn`` ``(..., T, n)``
    and ``before`` ``(..., n)``: summed within chunks of :data:`ANGLE_CHUNK` steps in ``turn``'s dtype, and
    over the chunks' totals (a 64th of the elements) in float64. One float32 sum over 16k steps of turns
    near 1 grows to about 1e4, where float32 rounds to 1e-3 (``tests/attention/test_mamba3.py``)."""
    steps = turn.shape[-2]
    chunks = F.pad(turn, (0, 0, 0, -steps % ANGLE_CHUNK)).unflatten(-2, (-1, ANGLE_CHUNK))  # (..., N, c, n)
    inside = chunks.cumsum(-2)
    entering = torch.cat([before.unsqueeze(-2), inside[..., :-1, -1, :]], dim=-2).double().cumsum(-2)
    summed = torch.remainder(entering, 2 * math.pi).to(turn.dtype).unsqueeze(-2) + inside
    return torch.remainder(summed, 2 * math.pi).flatten(-3, -2)[..., :steps, :]


def rotate(x: Tensor, angles: Tensor) -> Tensor:
    """``x`` ``(B, H, T, R, N)`` with its first ``2 n`` features turned pair by pair ``(2i, 2i + 1)`` by
    ``angles`` ``(B, H, T, n)`` (the same for every rank); the rest as they are."""
    pairs = 2 * angles.shape[-1]
    first, second = x[..., :pairs:2], x[..., 1:pairs:2]
    cos, sin = angles.cos().unsqueeze(-2), angles.sin().unsqueeze(-2)
    turned = torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)
    return torch.cat([turned, x[..., pairs:]], dim=-1)
