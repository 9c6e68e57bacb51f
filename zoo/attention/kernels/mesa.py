"""MesaNet's recurrence (von Oswald et al., 2025, arXiv:2506.05233): two decayed running sums and,
per token, the read of a ridge regression solved by conjugate gradient.

Per head, with row vectors ``q_t, k_t`` (``dk``), ``v_t`` (``dv``), a scalar decay ``gamma_t =
exp(log_decay_t)`` in ``(0, 1]``, a write strength ``beta_t`` and a ridge ``Lambda = Diag(lam)``,
``lam > 0`` per key dimension::

    H_t = gamma_t H_{t-1} + beta_t k_t^T k_t          (dk, dk), symmetric
    G_t = gamma_t G_{t-1} + beta_t k_t^T v_t          (dk, dv)
    o_t = q_t (H_t + Lambda)^{-1} G_t

``o_t`` is ``q_t`` times the weights that minimize ``sum_{j <= t} beta_j (decay from j to t)
|k_j W - v_j|^2 + tr(W^T Lambda W)``: the paper's locally optimal test-time regression. The two
sums are one decaying state ``S_t = [H_t | G_t]`` ``(dk, dk + dv)``, a scalar-decay recurrence with
keys ``k_t`` and values ``beta_t [k_t, v_t]`` (:mod:`~zoo.attention.kernels.decay`'s, whose
pass between chunks this runs: :func:`~zoo.attention.kernels.chunk_scan.chunk_scan`); that
concatenated state is what a decoder caches.

The read solves ``x_t (H_t + Lambda) = q_t`` by a fixed number of conjugate-gradient steps from
zero (:mod:`~zoo.attention.kernels.conjugate_gradient`, with the exact solution's gradient), then
``o_t = x_t G_t``. Three forms, equal up to rounding (the same steps on the same systems):

* :func:`mesa_chunkwise`: ``H_t`` is never formed per token. Within a chunk of ``c`` steps, with
  ``b_t`` the log decays summed inside it and ``H_n, G_n`` the state entering it::

      p H_t = exp(b_t) p H_n + sum_{j <= t} exp(b_t - b_j) beta_j (p . k_j) k_j

  a ``(c, c)`` matrix of decayed scores that each conjugate-gradient step forms once (as
  flash-linear-attention's ``fla/ops/mesa_net/naive.py``, ``naive_mesa_net_CG``, does); the read
  ``x_t G_t`` is the same sum with the values. ``chunk_size=None`` is the parallel form (one chunk);
* :func:`mesa_recurrent`: one step at a time, ``H_t`` and ``G_t`` formed at every step and each
  token's system solved against its own ``H_t`` (memory ``T dk (dk + dv)``: the form for
  decoding, where ``T`` is a step or a few);
* :func:`mesa_weights`: the parallel form's ``(T, T)`` weights (``output = weights @ v`` from a
  zero state), ``exp(b_t - b_j) beta_j (x_t . k_j)``.

Where the zoo departs from flash-linear-attention: every form starts conjugate gradient from zero
(fla's decoding step starts from ``q_t / (diag(H_t) + lam)``, its training kernel from zero, so
its decoding only approximates its forward), so decoding equals the full forward; the steps'
divisions are guarded against zero rather than offset by ``1e-5`` (see the solver's docstring).

Conventions as the decay kernels': queries and keys ``(*batch, T, dk)``, values ``(*batch, T,
dv)``, ``beta`` and ``log_decay`` ``(*batch, T)``, ``lam`` broadcastable to ``(*batch, dk)`` (one
ridge per head and key dimension), state ``(*batch, dk, dk + dv)``; ``mask`` ``(*batch, T)`` True at
real tokens: a padded step writes nothing, decays nothing and reads zero. Log decays are summed
within a chunk only and only non-positive differences exponentiated (float32 holds at 16k tokens).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.attention.kernels.chunk_scan import chunk_scan
from zoo.attention.kernels.chunking import causal_decay, chunk_length, from_chunks, to_chunks, zero_padding
from zoo.attention.kernels.conjugate_gradient import conjugate_gradient

__all__ = ["mesa_chunkwise", "mesa_recurrent", "mesa_weights"]


def _chunk_operator(p: Tensor, k: Tensor, scores_decay: Tensor, read_decay: Tensor, h: Tensor, lam: Tensor) -> Tensor:
    """``p (H_t + Lambda)`` per token of each chunk: the entering ``H_n`` read at the token's decay,
    the chunk's own writes through their decayed, ``beta``-weighted scores, and the ridge."""
    return (p * read_decay) @ h + ((p @ k.mT) * scores_decay) @ k + lam * p


def _step_operator(p: Tensor, h: Tensor, lam: Tensor) -> Tensor:
    """``p (H_t + Lambda)`` with every token's ``H_t`` formed: ``p`` ``(..., T, dk)``, ``h`` ``(..., T, dk, dk)``."""
    return (p.unsqueeze(-2) @ h).squeeze(-2) + lam * p


def _initial(state: Tensor | None, k: Tensor, v: Tensor) -> Tensor:
    """The given ``[H | G]`` state or zeros ``(*batch, dk, dk + dv)``."""
    if state is not None:
        return state
    return k.new_zeros(*k.shape[:-2], k.shape[-1], k.shape[-1] + v.shape[-1])


def _solved_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor,
    lam: Tensor,
    steps: int,
    chunk_size: int,
    initial_state: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The chunked solution ``x`` ``(*batch, N, c, dk)`` with what reads it: the chunked keys, the
    ``beta``-weighted decays inside each chunk ``(*batch, N, c, c)``, each token's decay from its
    chunk's start ``(*batch, N, c, 1)``, the states entering each chunk ``(*batch, N, dk, dk + dv)``
    and the final state."""
    dk, initial = k.shape[-1], _initial(initial_state, k, v)
    written = beta.unsqueeze(-1) * torch.cat([k, v], -1)
    k, written, log_decay = (to_chunks(x, chunk_size) for x in (k, written, log_decay.unsqueeze(-1)))
    cum = log_decay.cumsum(-2)  # (*batch, N, c, 1)
    cum_end = cum[..., -1:, :]
    update = (k * (cum_end - cum).exp()).mT @ written
    entering, final, _ = chunk_scan(initial, cum_end.mT.exp(), update)
    scores_decay = causal_decay(cum.squeeze(-1)) * to_chunks(beta.unsqueeze(-1), chunk_size).mT  # beta_j on column j
    read_decay = cum.exp()
    operands = [k, scores_decay, read_decay, entering[..., :dk], lam.unsqueeze(-2).unsqueeze(-2)]
    x = conjugate_gradient(_chunk_operator, to_chunks(q, chunk_size), operands, steps=steps)
    return x, k, scores_decay, read_decay, entering, final


def mesa_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor,
    lam: Tensor,
    *,
    steps: int,
    chunk_size: int | None = 64,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The chunkwise form (``chunk_size=None``: the parallel form, one chunk).

    Args:
        q, k: Queries and keys ``(*batch, T, dk)`` (MesaNet's are L2-normalized, unscaled).
        v: Values ``(*batch, T, dv)``.
        beta: Write strengths ``(*batch, T)``.
        log_decay: ``log gamma_t <= 0`` ``(*batch, T)``.
        lam: The ridge ``> 0``, broadcastable to ``(*batch, dk)``.
        steps: Conjugate-gradient steps per token.
        chunk_size: Steps per chunk; None: ``T``.
        initial_state: ``[H_0 | G_0]`` ``(*batch, dk, dk + dv)``; zeros if None.
        mask: ``(*batch, T)``, True at real tokens.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dk + dv)``.
    """
    q, k, v, beta, log_decay = zero_padding(mask, q, k, v, beta, log_decay)
    size = chunk_length(chunk_size, q.shape[-2])
    x, k_chunks, scores_decay, read_decay, entering, final = _solved_chunks(
        q, k, v, beta, log_decay, lam, steps, size, initial_state
    )
    dk = k.shape[-1]
    output = (x * read_decay) @ entering[..., dk:] + ((x @ k_chunks.mT) * scores_decay) @ to_chunks(v, size)
    return from_chunks(output, q.shape[-2]), final


def mesa_weights(
    q: Tensor,
    k: Tensor,
    beta: Tensor,
    log_decay: Tensor,
    lam: Tensor,
    *,
    steps: int,
    mask: Tensor | None = None,
) -> Tensor:
    """The parallel form's ``(*batch, T, T)`` weights from a zero state: ``output = weights @ v``.

    Args as :func:`mesa_chunkwise`.
    """
    q, k, beta, log_decay = zero_padding(mask, q, k, beta, log_decay)
    length = q.shape[-2]
    x, k_chunks, scores_decay, *_ = _solved_chunks(q, k, k[..., :0], beta, log_decay, lam, steps, length, None)
    return ((x @ k_chunks.mT) * scores_decay).squeeze(-3)


def mesa_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor,
    lam: Tensor,
    *,
    steps: int,
    state: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form: ``S_t = gamma_t S_{t-1} + beta_t k_t^T [k_t, v_t]`` one step at a time,
    each token's system solved against its own ``H_t`` (``T >= 1``).

    Args as :func:`mesa_chunkwise`, with ``state`` the ``[H | G]`` state before the first step (a
    decoder's cache; zeros if None).

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dk + dv)``.
    """
    q, k, v, beta, log_decay = zero_padding(mask, q, k, v, beta, log_decay)
    dk = k.shape[-1]
    current = _initial(state, k, v)
    written = beta.unsqueeze(-1) * torch.cat([k, v], -1)
    states = []
    for k_t, w_t, g_t in zip(k.unbind(-2), written.unbind(-2), log_decay.unbind(-1)):
        current = g_t.exp()[..., None, None] * current + k_t.unsqueeze(-1) * w_t.unsqueeze(-2)
        states.append(current)
    every = torch.stack(states, dim=-3)  # (*batch, T, dk, dk + dv)
    x = conjugate_gradient(_step_operator, q, [every[..., :dk], lam.unsqueeze(-2)], steps=steps)
    return (x.unsqueeze(-2) @ every[..., dk:]).squeeze(-2), current
