"""The generalized delta rule: a state whose transition is a diagonal decay plus a rank-one
correction (Kimi Delta Attention, 2025; RWKV-7, Peng et al., 2025).

Row vectors and a ``(dk, dv)`` state read as ``o_t = q_t S_t``, as every kernel here::

    S_t = (Diag(exp(g_t)) + a_t^T b_t) S_{t-1} + k_t^T v_t

``g_t`` (``dk``) is a log decay per key dimension (``<= 0``); ``b_t`` reads the old state
(``b_t S_{t-1}``, a ``dv`` row), ``a_t`` says where that read is written back (with its sign); the
new pair ``k_t, v_t`` is written as in linear attention. Two families are this recurrence:

* Kimi Delta Attention, ``S_t = (I - beta_t k_t^T k_t) Diag(alpha_t) S_{t-1} + beta_t k_t^T v_t``:
  ``g = log alpha``, ``a = -beta k``, ``b = k * alpha``, and ``beta k`` as the written key;
* RWKV-7, ``S_t = (Diag(w_t) - (a_t * kappa_t)^T kappa_t) S_{t-1} + k_t^T v_t`` (the transpose of the
  paper's ``wkv``): ``g = log w``, ``a = -(a_t * kappa_t)``, ``b = kappa_t``.

Three forms compute it, equal up to rounding:

* :func:`dplr_recurrent`: one step at a time from a state; the form for decoding.
* :func:`dplr_chunkwise`: chunks of ``chunk_size`` steps. In a chunk entered with state ``S_0``,
  with ``c_i`` the cumulative log decays up to and including step ``i`` (per key dimension) and
  ``c'_i = c_{i-1}`` (``c'_0 = 0``), the reads ``u_i = b_i S_{i-1}`` solve a unit lower triangular
  system::

      (I - A_ba) u = A_bk V + (B * exp(c')) S_0,
      A_xy[i, j] = sum_d x_id y_jd exp(c'_id - c_jd)   for j < i, else 0

  and then::

      o_i = (q_i * exp(c_i)) S_0 + sum_{j <= i} (Q_qa[i, j] u_j + Q_qk[i, j] v_j),
      Q_xy[i, j] = sum_d x_id y_jd exp(c_id - c_jd)     for j <= i
      S_c = Diag(exp(c_c)) S_0 + sum_j Diag(exp(c_c - c_j)) (a_j^T u_j + k_j^T v_j)

  The four in-chunk matrices are formed for all chunks at once by the per-dimension decay
  kernel's :func:`~zoo.attention.kernels.decay.chunk_weight_grid`, which forms the decays'
  factors once for the four (the ``A`` ones as its inclusive
  matrix of the next step's ``b`` moved down a row, so only non-positive exponents are ever
  formed), and the system is solved for all chunks at once (``torch.linalg.solve_triangular``):
  ``u = U + W S_0`` with ``U`` and ``W`` fixed per chunk. Only ``u`` and the state update run in
  the loop over chunks. ``O(T * chunk_size)`` memory: the form for training.
* the parallel form, :func:`dplr_chunkwise` with ``chunk_size=None``; :func:`dplr_weights` gives its
  ``(T, T)`` weights ``Q_qk + Q_qa (I - A_ba)^{-1} A_bk`` (``output = weights @ v`` from a zero
  state). Cubic in ``T`` (the solve): for short inputs and heatmaps.

flash-linear-attention's ``fla/ops/generalized_delta_rule/dplr`` writes the same recurrence (its
``alpha`` is the zoo's ``b``, its ``beta`` the zoo's ``a``); its naive chunked form builds the same
four matrices, token by token. Written here from the recurrence above, and checked against a
per-token loop in float64 (``tests/attention/kernels/test_dplr.py``) and against fla's naive
files (``benchmarks/fla_reference.py``).

Conventions: ``q``, ``k``, ``a``, ``b``, ``log_decay`` ``(*batch, T, dk)``, ``v`` ``(*batch, T,
dv)``, state ``(*batch, dk, dv)``. Nothing is scaled or normalized here. ``mask`` ``(*batch, T)``
(or broadcastable with as many dimensions) is True at real tokens; a padded step is an identity
step (no decay, no correction, no write) with a zero output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.chunk_scan import chunk_scan
from zoo.attention.kernels.chunking import chunk_length, from_chunks, initial_or_zeros, to_chunks, zero_padding
from zoo.attention.kernels.decay import chunk_weight_grid
from zoo.attention.kernels.stepwise import step_by_step

__all__ = ["dplr_chunkwise", "dplr_recurrent", "dplr_weights"]


def _below(weights: Tensor) -> Tensor:
    """Rows moved down by one (the first row zero): an inclusive matrix of the next step's reads
    as the strictly lower one of this step's."""
    return F.pad(weights[..., :-1, :], (0, 0, 1, 0))


def _next(x: Tensor) -> Tensor:
    """Each chunk's steps moved up by one (``x_{i+1}`` at ``i``; zero at the chunk's last step)."""
    return F.pad(x[..., 1:, :], (0, 0, 0, 1))


def _matrices(q: Tensor, k: Tensor, a: Tensor, b: Tensor, cum: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The four in-chunk matrices ``A_ba``, ``A_bk``, ``Q_qa``, ``Q_qk`` ``(*batch, N, c, c)`` of
    chunked inputs and their cumulative log decays ``cum`` (see the module docstring)."""
    (read_reads, read_keys), (query_reads, query_keys) = chunk_weight_grid([_next(b), q], [a, k], cum)
    return _below(read_reads), _below(read_keys), query_reads, query_keys


def _unit_lower_solve(lower: Tensor, right: Tensor) -> Tensor:
    """``(I - lower)^{-1} right`` for strictly lower triangular ``lower`` ``(..., c, c)``."""
    eye = torch.eye(lower.shape[-1], dtype=lower.dtype, device=lower.device)
    return torch.linalg.solve_triangular(eye - lower, right, upper=False, unitriangular=True)


def _chunked(
    q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, log_decay: Tensor, chunk_size: int, state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The chunkwise computation on prepared inputs: outputs ``(*batch, T, dv)`` and the final state."""
    length, dv = q.shape[-2], v.shape[-1]
    state = initial_or_zeros(state, k, v)
    q, k, v, a, b, cum = (to_chunks(x, chunk_size) for x in (q, k, v, a, b, log_decay))
    cum = cum.cumsum(-2)  # c_i, (*batch, N, c, dk)
    before = F.pad(cum[..., :-1, :], (0, 0, 1, 0))  # c'_i = c_{i-1}
    cum_end = cum[..., -1:, :]
    read_reads, read_keys, query_reads, query_keys = _matrices(q, k, a, b, cum)
    solved = _unit_lower_solve(read_reads, torch.cat([read_keys @ v, b * before.exp()], dim=-1))
    values, from_state = solved[..., :dv], solved[..., dv:]  # u = U + W S_0
    to_end = (cum_end - cum).exp()
    written_a, written_k = (a * to_end).mT, (k * to_end).mT
    chunk_decay = cum_end.exp().mT  # (*batch, N, dk, 1)

    entering, state, reads = chunk_scan(
        state, chunk_decay, written_k @ v, values=values, from_state=from_state, written=written_a
    )
    output = (q * cum.exp()) @ entering + query_reads @ reads
    return from_chunks(output + query_keys @ v, length), state


def dplr_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    log_decay: Tensor,
    *,
    chunk_size: int | None = 64,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The chunkwise form (``chunk_size=None``: one chunk, the parallel form) from ``initial_state``.

    Args:
        q: Queries ``(*batch, T, dk)``, already scaled.
        k: Written keys ``(*batch, T, dk)``.
        v: Values ``(*batch, T, dv)``.
        a: Where each step writes its read back ``(*batch, T, dk)``.
        b: What each step reads of the old state ``(*batch, T, dk)``.
        log_decay: ``g_t <= 0`` per key dimension, ``(*batch, T, dk)``.
        chunk_size: Steps per chunk (``T`` need not be a multiple of it); None: ``T``.
        initial_state: ``(*batch, dk, dv)``; zeros if None.
        mask: ``(*batch, T)``, True at real tokens; padded steps are identity steps with zero outputs.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``.
    """
    q, k, v, a, b, log_decay = zero_padding(mask, q, k, v, a, b, log_decay)
    return _chunked(q, k, v, a, b, log_decay, chunk_length(chunk_size, q.shape[-2]), initial_state)


def dplr_weights(
    q: Tensor, k: Tensor, a: Tensor, b: Tensor, log_decay: Tensor, *, mask: Tensor | None = None
) -> Tensor:
    """The parallel form's ``(*batch, T, T)`` weights, for heatmaps: lower triangular, with the
    output of :func:`dplr_chunkwise` from a zero state equal to ``weights @ v``. Args as
    :func:`dplr_chunkwise`'s."""
    q, k, a, b, log_decay = zero_padding(mask, q, k, a, b, log_decay)
    read_reads, read_keys, query_reads, query_keys = _matrices(q, k, a, b, log_decay.cumsum(-2))
    return query_keys + query_reads @ _unit_lower_solve(read_reads, read_keys)


def dplr_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    log_decay: Tensor,
    *,
    state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form, one step at a time (``T >= 1`` steps) from ``state`` ``(*batch, dk, dv)``
    (zeros if None): a decoder's cache. Args and returns as :func:`dplr_chunkwise`'s."""
    q, k, v, a, b, log_decay = zero_padding(mask, q, k, v, a, b, log_decay)
    return step_by_step(q, k, v, state, _dplr_step, a.unbind(-2), b.unbind(-2), log_decay.exp().unbind(-2))


def _dplr_step(state: Tensor, k_t: Tensor, v_t: Tensor, a_t: Tensor, b_t: Tensor, w_t: Tensor) -> Tensor:
    """``S_t = (Diag(w_t) + a_t^T b_t) S_{t-1} + k_t^T v_t``, with ``w_t = exp(g_t)``."""
    read = (b_t.unsqueeze(-2) @ state).squeeze(-2)
    return w_t.unsqueeze(-1) * state + a_t.unsqueeze(-1) * read.unsqueeze(-2) + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
