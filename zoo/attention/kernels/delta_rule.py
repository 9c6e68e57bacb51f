"""The delta rule: DeltaNet (Schlag et al., 2021) and Gated DeltaNet (Yang et al., 2024).

In the papers' orientation (a ``(dv, dk)`` state ``S``, column vectors, ``o_t = S_t q_t``) a step is
``S_t = a_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T``: the state's old value for key
``k_t`` is moved a fraction ``beta_t`` towards ``v_t``, after a decay ``a_t`` (``a_t = 1``:
DeltaNet). Here the state is its transpose, ``(dk, dv)``, with row vectors and ``o_t = q_t S_t``::

    S_t = (I - beta_t k_t^T k_t) a_t S_{t-1} + beta_t k_t^T v_t
        = a_t S_{t-1} + k_t^T u_t,        u_t = beta_t (v_t - k_t a_t S_{t-1})

Three forms compute it, equal up to rounding:

* :func:`delta_rule_recurrent`: one step at a time from a state; the form for decoding.
* :func:`delta_rule_chunkwise`: chunks of ``chunk_size`` steps with the WY (UT) representation of
  the products of the Householder-like factors (Yang et al., 2024). In a chunk entered with state
  ``S_0``, with ``b`` the chunk's cumulative log decays and ``gamma_i = exp(b_i)``, the new values
  ``u`` solve a unit lower triangular system::

      (I + L) u = diag(beta) (V - diag(gamma) K S_0),
      L_ij = beta_i exp(b_i - b_j) (k_i . k_j) for j < i, else 0

  so with ``T = (I + L)^{-1} diag(beta)`` (``torch.linalg.solve_triangular``),
  ``W = T diag(gamma) K`` and ``U = T V``: ``u = U - W S_0``. Then ``o_i = gamma_i q_i S_0 + sum_{j <= i} exp(b_i - b_j)
  (q_i . k_j) u_j`` and ``S_c = gamma_c S_0 + sum_j exp(b_c - b_j) k_j^T u_j``. ``T``, ``W``, ``U``
  and the in-chunk scores are formed for all chunks at once; only ``u = U - W S_0`` and the state
  update run in the loop over chunks. ``O(T * chunk_size)`` memory: the form for training.
* the parallel form, :func:`delta_rule_chunkwise` with ``chunk_size=None``: the whole input as one
  chunk; :func:`delta_rule_weights` gives its ``(T, T)`` weight matrix ``tril(Q K^T * decays) @ T``
  (``output = weights @ v`` from a zero state). The solve makes it cubic in ``T``: for short
  inputs and for looking at the weights.

Each starts from a given state and returns the final state, so any form can continue another.

Conventions: queries and keys ``(*batch, T, dk)``, values ``(*batch, T, dv)``, ``beta`` and
``log_decay`` ``(*batch, T)`` (or broadcastable), state ``(*batch, dk, dv)`` read as
``o_t = q_t S_t``, outputs ``(*batch, T, dv)``; ``*batch`` holds the heads too. Nothing is scaled
or normalized here: callers L2-normalize the keys (the rule assumes ``|k_t| = 1``), pass betas in
``(0, 1)`` (or ``(0, 2)``) and scale the queries. ``mask`` ``(*batch, T)`` is True at real tokens;
a padded step is an identity step (zero key and beta: no write, no decay) with a zero output.

Numerics: log decays are summed within a chunk only, and only differences ``b_i - b_j <= 0``
are exponentiated (masked to ``-inf`` above the diagonal before ``exp``); ``gamma`` and
``exp(b_c - b_j)`` are at most 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.attention.kernels.chunk_scan import chunk_scan
from zoo.attention.kernels.chunking import (
    causal_decay,
    chunk_length,
    from_chunks,
    initial_or_zeros,
    to_chunks,
    zero_padding,
)
from zoo.attention.kernels.stepwise import step_by_step

__all__ = ["delta_rule_chunkwise", "delta_rule_recurrent", "delta_rule_weights"]


def _prepare(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """Broadcast ``beta`` and ``log_decay`` (None stays None: no decay) to ``(*batch, T)``; zero the padding."""
    beta = torch.broadcast_to(beta, q.shape[:-1])
    if log_decay is None:
        q, k, v, beta = zero_padding(mask, q, k, v, beta)
        return q, k, v, beta, None
    q, k, v, beta, log_decay = zero_padding(mask, q, k, v, beta, torch.broadcast_to(log_decay, q.shape[:-1]))
    return q, k, v, beta, log_decay


def _chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None,
    chunk_size: int,
    initial_state: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The chunkwise computation on prepared inputs (``log_decay`` None: DeltaNet, whose decay
    terms are all ones and are left out rather than multiplied in).

    Returns:
        Outputs ``(*batch, T, dv)``, each chunk's decayed causal scores ``tril(Q K^T * decays)`` and
        ``T = (I + L)^{-1} diag(beta)`` (both ``(*batch, N, c, c)``), and the final state
        ``(*batch, dk, dv)``.
    """
    length = q.shape[-2]
    state = initial_or_zeros(initial_state, k, v)
    q, k, v = (to_chunks(x, chunk_size) for x in (q, k, v))
    beta = to_chunks(beta.unsqueeze(-1), chunk_size).squeeze(-1)
    lower, scores = beta.unsqueeze(-1) * (k @ k.mT), q @ k.mT
    if log_decay is None:
        lower, scores, gamma, decayed_k, chunk_decay = lower.tril(-1), scores.tril(), None, k, None
    else:
        cum = to_chunks(log_decay.unsqueeze(-1), chunk_size).squeeze(-1).cumsum(-1)  # (*batch, N, c)
        cum_end = cum[..., -1:]
        decay = causal_decay(cum)  # exp(b_i - b_j), j <= i
        lower, scores = (lower * decay).tril(-1), scores * decay
        gamma = cum.exp().unsqueeze(-1)
        decayed_k = k * (cum_end - cum).exp().unsqueeze(-1)  # written at the chunk's end
        chunk_decay = cum_end.exp().unsqueeze(-1)

    eye = torch.eye(chunk_size, dtype=q.dtype, device=q.device)
    transform = torch.linalg.solve_triangular(eye + lower, torch.diag_embed(beta), upper=False, unitriangular=True)
    w = transform @ (k if gamma is None else k * gamma)
    u = transform @ v
    entering, state, new_values = chunk_scan(state, chunk_decay, values=u, from_state=-w, written=decayed_k.mT)
    output = (q if gamma is None else q * gamma) @ entering + scores @ new_values
    return from_chunks(output, length), scores, transform, state


def delta_rule_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None = None,
    *,
    chunk_size: int | None = 64,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The WY form over chunks of ``chunk_size`` steps with a state passed between them (with
    ``chunk_size=None``, one chunk: the parallel form).

    Args:
        q: Queries ``(*batch, T, dk)``, already scaled.
        k: Keys ``(*batch, T, dk)``, L2-normalized.
        v: Values ``(*batch, T, dv)``.
        beta: Write strengths, broadcastable to ``(*batch, T)``.
        log_decay: ``log a_t <= 0``, broadcastable to ``(*batch, T)``; None for DeltaNet (no decay).
        chunk_size, initial_state, mask: As :func:`~zoo.attention.kernels.decay.decay_chunkwise`'s.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``.
    """
    q, k, v, beta, log_decay = _prepare(q, k, v, beta, log_decay, mask)
    output, _, _, final_state = _chunked(q, k, v, beta, log_decay, chunk_length(chunk_size, q.shape[-2]), initial_state)
    return output, final_state


def delta_rule_weights(
    q: Tensor, k: Tensor, beta: Tensor, log_decay: Tensor | None = None, *, mask: Tensor | None = None
) -> Tensor:
    """The parallel form's ``(*batch, T, T)`` weights, for heatmaps: lower triangular, with the
    output of :func:`delta_rule_chunkwise` from a zero state equal to ``weights @ v``.

    Args as :func:`delta_rule_chunkwise`.
    """
    q, k, v, beta, log_decay = _prepare(q, k, k, beta, log_decay, mask)
    _, scores, transform, _ = _chunked(q, k, v, beta, log_decay, q.shape[-2], None)
    return (scores @ transform).squeeze(-3)


def delta_rule_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None = None,
    *,
    state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form, one step at a time (``T >= 1`` steps).

    Args as :func:`delta_rule_chunkwise`, with ``state`` ``(*batch, dk, dv)`` (zeros if None) the
    state before the first step: a decoder's cache.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``, whatever ``T``.
    """
    q, k, v, beta, log_decay = _prepare(q, k, v, beta, log_decay, mask)
    decays = (None,) * q.shape[-2] if log_decay is None else log_decay.exp().unbind(-1)
    return step_by_step(q, k, v, state, _delta_step, beta.unbind(-1), decays)


def _delta_step(state: Tensor, k_t: Tensor, v_t: Tensor, beta_t: Tensor, a_t: Tensor | None) -> Tensor:
    """``S_t = a_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t`` (no decay where ``a_t`` is None)."""
    if a_t is not None:
        state = a_t[..., None, None] * state
    new_value = beta_t.unsqueeze(-1) * (v_t - (k_t.unsqueeze(-2) @ state).squeeze(-2))
    return state + k_t.unsqueeze(-1) * new_value.unsqueeze(-2)
