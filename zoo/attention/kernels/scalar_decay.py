"""Linear attention with a scalar decay per step: RetNet's retention and Mamba-2's state-space dual.

The recurrence, with a state ``S`` of shape ``(dk, dv)`` and row vectors ``q_t, k_t`` (``dk``) and
``v_t`` (``dv``)::

    S_t = g_t S_{t-1} + k_t^T v_t,        o_t = q_t S_t,        g_t = exp(log_decay_t) <= 1

* Retention (Sun et al., 2023) is a fixed decay per head: pass ``log_decay`` of shape ``(H, 1)``
  (broadcast over batch and time), ``log(gamma_h)``.
* Mamba-2's SSD (Dao & Gu, 2024) is a decay per head and step (``log_decay = dt * A``), with ``C``
  as queries, ``B`` as keys and ``dt * x`` as values.

Unrolled, ``o_i = sum_{j <= i} exp(b_i - b_j) (q_i . k_j) v_j + exp(b_i) q_i S_0`` with ``b`` the
cumulative sum of the log decays. Three forms compute it, equal up to rounding:

* :func:`scalar_decay_parallel`: the whole ``(T, T)`` decayed, causally masked score matrix, which
  it also returns (``output = weights @ v`` plus the initial state's part). Quadratic in ``T``.
* :func:`scalar_decay_chunkwise`: chunks of ``chunk_size`` steps; the score matrix inside each
  chunk, and a state passed from chunk to chunk (the only Python loop). ``O(T * chunk_size)``
  memory: the form for training and prefill.
* :func:`scalar_decay_recurrent`: one step at a time from a state; the form for decoding.

Each takes an ``initial_state`` and returns the final state, so any form can continue another.

Conventions: queries and keys ``(*batch, T, dk)``, values ``(*batch, T, dv)``, state
``(*batch, dk, dv)`` read as ``o_t = q_t S_t``, outputs ``(*batch, T, dv)``; ``*batch`` holds the
heads too. Nothing is scaled or normalized here: callers scale the queries (by ``dk ** -0.5`` if
they want it). ``mask`` ``(*batch, T)`` is True at real tokens; a padded step is an identity step
(no write, no decay) with a zero output, which keeps left-padded batched decoding exact.

Numerics: log decays are summed (never decays multiplied), and only differences ``b_i - b_j <= 0``
are exponentiated, masked to ``-inf`` above the diagonal before ``exp``. The chunkwise form sums
them within each chunk only, so their size is bounded by the chunk even on very long inputs; the
parallel form sums over the whole input, so it loses float32 precision on long strongly decaying
inputs (it is meant for short ones).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.attention.kernels.recurrence import (
    causal_decay,
    check_chunk_size,
    from_chunks,
    initial_or_zeros,
    pass_states,
    to_chunks,
    zero_padding,
)

__all__ = ["scalar_decay_chunkwise", "scalar_decay_parallel", "scalar_decay_recurrent"]


def _prepare(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Broadcast ``log_decay`` to ``(*batch, T)`` and zero every input at the padded steps."""
    log_decay = torch.broadcast_to(log_decay, q.shape[:-1])
    return zero_padding(mask, q, k, v, log_decay)


def _chunked(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, chunk_size: int, initial_state: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """The chunkwise computation on prepared inputs.

    Returns:
        Outputs ``(*batch, T, dv)``, the score matrix of each chunk ``(*batch, N, c, c)`` and the
        final state ``(*batch, dk, dv)``.
    """
    length = q.shape[-2]
    initial_state = initial_or_zeros(initial_state, k, v)
    q, k, v = (to_chunks(x, chunk_size) for x in (q, k, v))
    cum = to_chunks(log_decay.unsqueeze(-1), chunk_size).squeeze(-1).cumsum(-1)  # (*batch, N, c)
    cum_end = cum[..., -1:]

    scores = (q @ k.mT) * causal_decay(cum)
    decayed_q = q * cum.exp().unsqueeze(-1)  # read the state entering the chunk
    decayed_k = k * (cum_end - cum).exp().unsqueeze(-1)  # written at the chunk's end
    entering, final_state = pass_states(initial_state, cum_end.exp().unsqueeze(-1), decayed_k.mT @ v)
    output = decayed_q @ entering + scores @ v
    return from_chunks(output, length), scores, final_state


def scalar_decay_parallel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The quadratic form: one decayed, causally masked score matrix over the whole input.

    Args:
        q: Queries ``(*batch, T, dk)``, already scaled.
        k: Keys ``(*batch, T, dk)``.
        v: Values ``(*batch, T, dv)``.
        log_decay: ``log g_t <= 0``, broadcastable to ``(*batch, T)``.
        initial_state: ``(*batch, dk, dv)``; zeros if None.
        mask: ``(*batch, T)`` (or broadcastable with as many dimensions, e.g. ``(B, 1, T)``), True
            at real tokens; padded steps are identity steps with zero outputs.

    Returns:
        ``(output, weights, final_state)``: output ``(*batch, T, dv)``; weights ``(*batch, T, T)``,
        ``weights[i, j] = exp(b_i - b_j) (q_i . k_j)`` for ``j <= i`` (``output = weights @ v``
        plus ``exp(b_i) q_i S_0``); final state ``(*batch, dk, dv)``.
    """
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    output, scores, final_state = _chunked(q, k, v, log_decay, q.shape[-2], initial_state)
    return output, scores.squeeze(-3), final_state


def scalar_decay_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The chunkwise form: quadratic inside chunks of ``chunk_size`` steps, a state between them.

    Args as :func:`scalar_decay_parallel`; ``T`` need not be a multiple of ``chunk_size``.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``.
    """
    check_chunk_size(chunk_size)
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    output, _, final_state = _chunked(q, k, v, log_decay, chunk_size, initial_state)
    return output, final_state


def scalar_decay_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form: ``S_t = g_t S_{t-1} + k_t^T v_t``, one step at a time (``T >= 1`` steps).

    Args as :func:`scalar_decay_parallel`.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``, whatever ``T``.
    """
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    state = initial_or_zeros(initial_state, k, v)
    outputs = []
    for q_t, k_t, v_t, g_t in zip(q.unbind(-2), k.unbind(-2), v.unbind(-2), log_decay.exp().unbind(-1)):
        state = g_t[..., None, None] * state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        outputs.append((q_t.unsqueeze(-2) @ state).squeeze(-2))
    return torch.stack(outputs, dim=-2), state
