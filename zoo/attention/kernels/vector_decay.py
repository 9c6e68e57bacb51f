"""Gated linear attention (GLA, Yang et al., 2023): linear attention with a decay per key dimension.

The recurrence, with a state ``S`` of shape ``(dk, dv)`` and row vectors ``q_t, k_t, a_t`` (``dk``)
and ``v_t`` (``dv``)::

    S_t = Diag(a_t) S_{t-1} + k_t^T v_t,        o_t = q_t S_t,        a_t = exp(log_decay_t) <= 1

Unrolled, with ``b`` the cumulative sum of the log decays (one per key dimension ``d``)::

    o_i = sum_{j <= i} (sum_d q_id k_jd exp(b_id - b_jd)) v_j + (q_i * exp(b_i)) S_0

Three forms compute it, equal up to rounding:

* :func:`vector_decay_parallel`: the whole ``(T, T)`` weight matrix, which it also returns
  (``output = weights @ v`` plus the initial state's part). Quadratic in ``T``.
* :func:`vector_decay_chunkwise`: chunks of ``chunk_size`` steps; the weight matrix inside each
  chunk, and a state passed from chunk to chunk (the only Python loop). ``O(T * chunk_size)``
  memory: the form for training and prefill.
* :func:`vector_decay_recurrent`: one step at a time from a state; the form for decoding.

Each takes an ``initial_state`` and returns the final state, so any form can continue another.

Conventions: queries and keys ``(*batch, T, dk)``, values ``(*batch, T, dv)``, log decays
``(*batch, T, dk)``, state ``(*batch, dk, dv)`` read as ``o_t = q_t S_t``, outputs
``(*batch, T, dv)``; ``*batch`` holds the heads too. Nothing is scaled or normalized here: callers
scale the queries (by ``dk ** -0.5`` if they want it). ``mask`` ``(*batch, T)`` is True at real
tokens; a padded step is an identity step (no write, no decay) with a zero output.

Numerics: log decays are summed within a chunk (the parallel form: within the input), and only
non-positive exponents are ever formed. The weight inside a chunk cannot be split as
``(q_i exp(b_i)) . (k_j exp(-b_j))``: with strong gates ``exp(-b_j)`` overflows. Instead the chunk
is cut into sub-chunks of 16 steps, as flash-linear-attention does:

* a key in an earlier sub-chunk than the query is measured from the query sub-chunk's first step
  ``r``: ``(q_i exp(b_i - b_r)) . (k_j exp(b_r - b_j))``, both exponents ``<= 0``, one matrix
  product per query sub-chunk;
* within a sub-chunk the ``(16, 16, dk)`` products ``q_id k_jd exp(b_id - b_jd)`` are formed
  explicitly, masked to ``-inf`` above the diagonal before ``exp``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.attention.kernels.recurrence import (
    check_chunk_size,
    from_chunks,
    initial_or_zeros,
    pass_states,
    to_chunks,
    zero_padding,
)

__all__ = ["SUB_CHUNK_SIZE", "vector_decay_chunkwise", "vector_decay_parallel", "vector_decay_recurrent"]

SUB_CHUNK_SIZE = 16
"""Steps per sub-chunk of the weights inside a chunk; a diagonal sub-chunk costs ``(16, 16, dk)``."""


def _prepare(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Broadcast ``log_decay`` to ``(*batch, T, dk)`` and zero every input at the padded steps."""
    log_decay = torch.broadcast_to(log_decay, q.shape)
    return zero_padding(mask, q, k, v, log_decay)


def _pad_steps(q: Tensor, k: Tensor, cum: Tensor, multiple: int) -> tuple[Tensor, Tensor, Tensor]:
    """Pad the chunk axis (``-2``) to a multiple of ``multiple`` with identity steps.

    Zero queries and keys give zero weights; the cumulative log decay is carried on unchanged, so
    the padded steps keep every exponent non-positive.
    """
    pad = -q.shape[-2] % multiple
    if pad == 0:
        return q, k, cum
    zeros = q.new_zeros(*q.shape[:-2], pad, q.shape[-1])
    carried = cum[..., -1:, :].expand(*cum.shape[:-2], pad, cum.shape[-1])
    return torch.cat([q, zeros], -2), torch.cat([k, zeros], -2), torch.cat([cum, carried], -2)


def _intra_chunk_weights(q: Tensor, k: Tensor, cum: Tensor) -> Tensor:
    """The weights inside each chunk, ``sum_d q_id k_jd exp(b_id - b_jd)`` for ``j <= i``, else 0.

    Args:
        q: Queries ``(*batch, N, c, dk)``.
        k: Keys ``(*batch, N, c, dk)``.
        cum: Log decays summed within each chunk ``(*batch, N, c, dk)``, non-increasing in steps.

    Returns:
        ``(*batch, N, c, c)``, lower triangular.
    """
    c = q.shape[-2]
    sub = min(SUB_CHUNK_SIZE, c)
    q, k, cum = _pad_steps(q, k, cum, sub)
    padded = q.shape[-2]
    num_sub = padded // sub
    q_sub, k_sub, cum_sub = (x.unflatten(-2, (num_sub, sub)) for x in (q, k, cum))  # (*batch, N, M, s, dk)
    neg_inf = cum.new_tensor(float("-inf"))

    # Keys of earlier sub-chunks, measured from each query sub-chunk's first step r.
    ref = cum_sub[..., :1, :]  # (*batch, N, M, 1, dk)
    q_from_ref = q_sub * (cum_sub - ref).exp()
    steps = torch.arange(padded, device=q.device)
    earlier = steps < (torch.arange(num_sub, device=q.device) * sub).unsqueeze(-1)  # (M, c')
    to_ref = torch.where(earlier.unsqueeze(-1), ref - cum.unsqueeze(-3), neg_inf)  # (*batch, N, M, c', dk)
    k_to_ref = k.unsqueeze(-3) * to_ref.exp()
    weights = (q_from_ref @ k_to_ref.mT).unflatten(-1, (num_sub, sub))  # (*batch, N, M, s, M, s)

    # Keys of the query's own sub-chunk, one explicit product per key dimension.
    causal = torch.ones(sub, sub, dtype=torch.bool, device=q.device).tril().unsqueeze(-1)
    diff = torch.where(causal, cum_sub.unsqueeze(-2) - cum_sub.unsqueeze(-3), neg_inf)  # (*batch, N, M, s, s, dk)
    diagonal = (q_sub.unsqueeze(-2) * k_sub.unsqueeze(-3) * diff.exp()).sum(-1)  # (*batch, N, M, s, s)
    block_eye = torch.eye(num_sub, dtype=q.dtype, device=q.device)[:, None, :, None]  # (M, 1, M, 1)
    weights = weights + diagonal.unsqueeze(-2) * block_eye
    return weights.flatten(-4, -3).flatten(-2, -1)[..., :c, :c]


def _chunked(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, chunk_size: int, initial_state: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """The chunkwise computation on prepared inputs.

    Returns:
        Outputs ``(*batch, T, dv)``, the weights inside each chunk ``(*batch, N, c, c)`` and the
        final state ``(*batch, dk, dv)``.
    """
    length = q.shape[-2]
    initial_state = initial_or_zeros(initial_state, k, v)
    q, k, v, log_decay = (to_chunks(x, chunk_size) for x in (q, k, v, log_decay))
    cum = log_decay.cumsum(-2)  # (*batch, N, c, dk)
    cum_end = cum[..., -1:, :]

    weights = _intra_chunk_weights(q, k, cum)
    decayed_q = q * cum.exp()  # read the state entering the chunk
    decayed_k = k * (cum_end - cum).exp()  # written at the chunk's end
    entering, final_state = pass_states(initial_state, cum_end.mT.exp(), decayed_k.mT @ v)
    output = decayed_q @ entering + weights @ v
    return from_chunks(output, length), weights, final_state


def vector_decay_parallel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The quadratic form: the weight matrix over the whole input.

    Args:
        q: Queries ``(*batch, T, dk)``, already scaled.
        k: Keys ``(*batch, T, dk)``.
        v: Values ``(*batch, T, dv)``.
        log_decay: ``log a_t <= 0``, broadcastable to ``(*batch, T, dk)``.
        initial_state: ``(*batch, dk, dv)``; zeros if None.
        mask: ``(*batch, T)`` (or broadcastable with as many dimensions, e.g. ``(B, 1, T)``), True
            at real tokens; padded steps are identity steps with zero outputs.

    Returns:
        ``(output, weights, final_state)``: output ``(*batch, T, dv)``; weights ``(*batch, T, T)``,
        ``weights[i, j] = sum_d q_id k_jd exp(b_id - b_jd)`` for ``j <= i`` (``output = weights @ v``
        plus ``(q_i * exp(b_i)) S_0``); final state ``(*batch, dk, dv)``. Memory
        ``O(T^2 dk / 16)`` for the weights inside the input (see the module docstring).
    """
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    output, weights, final_state = _chunked(q, k, v, log_decay, q.shape[-2], initial_state)
    return output, weights.squeeze(-3), final_state


def vector_decay_chunkwise(
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

    Args as :func:`vector_decay_parallel`; ``T`` need not be a multiple of ``chunk_size``.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``.
    """
    check_chunk_size(chunk_size)
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    output, _, final_state = _chunked(q, k, v, log_decay, chunk_size, initial_state)
    return output, final_state


def vector_decay_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form: ``S_t = Diag(a_t) S_{t-1} + k_t^T v_t``, one step at a time (``T >= 1``).

    Args as :func:`vector_decay_parallel`.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``, whatever ``T``.
    """
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    state = initial_or_zeros(initial_state, k, v)
    outputs = []
    for q_t, k_t, v_t, a_t in zip(q.unbind(-2), k.unbind(-2), v.unbind(-2), log_decay.exp().unbind(-2)):
        state = a_t.unsqueeze(-1) * state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        outputs.append((q_t.unsqueeze(-2) @ state).squeeze(-2))
    return torch.stack(outputs, dim=-2), state
