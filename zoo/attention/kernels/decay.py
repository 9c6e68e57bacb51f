"""Linear attention with a decaying state: one scalar decay per step (RetNet's retention, Mamba-2's
state-space dual) or one per key dimension (gated linear attention, GLA; Yang et al., 2023).

The recurrence, with a state ``S`` of shape ``(dk, dv)`` and row vectors ``q_t, k_t`` (``dk``) and
``v_t`` (``dv``)::

    S_t = Diag(a_t) S_{t-1} + k_t^T v_t,        o_t = q_t S_t,        a_t = exp(log_decay_t) <= 1

``log_decay`` broadcasts to ``(*batch, T, w)`` with ``w`` either ``dk`` (GLA's gate per key
dimension) or 1: a scalar decay per step, ``Diag(a_t) = g_t I``. Retention is a fixed decay per
head (``log(gamma_h)``, shape ``(H, 1, 1)``); Mamba-2's SSD a decay per head and step
(``dt * A``), with ``C`` as queries, ``B`` as keys and ``dt * x`` as values. Unrolled, with ``b``
the cumulative sum of the log decays::

    o_i = sum_{j <= i} (sum_d q_id k_jd exp(b_id - b_jd)) v_j + (q_i * exp(b_i)) S_0

Three forms compute it, equal up to rounding:

* the parallel form, :func:`decay_chunkwise` with ``chunk_size=None``: the whole ``(T, T)``
  weight matrix at once, quadratic in ``T``; :func:`decay_weights` returns that matrix
  (``output = weights @ v`` from a zero state) for heatmaps;
* :func:`decay_chunkwise`: chunks of ``chunk_size`` steps; the weight matrix inside each chunk,
  and a state passed from chunk to chunk (the only Python loop). ``O(T * chunk_size)`` memory:
  the form for training and prefill;
* :func:`decay_recurrent`: one step at a time from a state; the form for decoding.

Each starts from a given state and returns the final state, so any form can continue another.

A signed scalar decay (``negative``: where ``a_t < 0``, with ``log_decay = log|a_t|``; Mamba-2's
``negative_eigenvalues``) runs in the same forms. With ``s_t = prod_{tau <= t} sign(a_tau)`` (the
parity of the negative decays so far, ``s_0 = 1``), the unrolled weight of key ``j`` for query ``i``
is ``s_i s_j |a_{j+1} ... a_i|`` and the state read by query ``i`` from ``S_0`` is ``s_i |a_1 ... a_i|
S_0``; so the magnitude kernels run on values ``s_j v_j``, their outputs are multiplied by ``s_i``,
and the state they return, ``s_T S_T``, by ``s_T`` (``S_0`` enters as it is, ``s_0 = 1``: each call
counts its parity from its first step, so a state continues exactly from one call to the next).
Under a scalar decay (``negative`` ``(*batch, T, 1)``) the sign rides on the values, not on the
queries and keys, so Mamba-2's queries and keys shared by a group of heads stay shared. A decay
per key dimension (``negative`` ``(*batch, T, dk)``: Mamba-1's, a sign per channel and state
dimension) has a parity ``s_t`` per dimension, which rides on the queries and keys instead: the
magnitude kernels run on ``s_i q_i`` and ``s_j k_j`` and the state they return, row ``d`` of ``s_T
S_T``, is multiplied by ``s_T,d``. The recurrent form multiplies by the signed ``a_t`` itself. A
padded step stays an identity step.

Conventions: queries and keys ``(*batch, T, dk)``, values ``(*batch, T, dv)``, state ``(*batch,
dk, dv)`` read as ``o_t = q_t S_t``, outputs ``(*batch, T, dv)``; ``*batch`` holds the heads too,
and the inputs' batch shapes need only broadcast together (queries and keys shared by a group of
heads have an axis of 1 there: their scores are formed once for the group and, under a scalar
decay, each chunk's state is one product for all of the group's heads). Nothing is scaled or
normalized here: callers scale the queries (by ``dk ** -0.5`` if they want it). ``mask``
``(*batch, T)`` is True at real tokens; a padded step is an identity step (no write, no decay)
with a zero output, which keeps left-padded batched decoding exact.

Numerics: log decays are summed (never decays multiplied) within a chunk (the parallel form:
within the input, so it loses float32 precision on long, strongly decaying inputs; it is meant for
short ones), and only non-positive exponents are ever formed. A scalar decay's weight inside a
chunk is ``(q_i . k_j) exp(b_i - b_j)``, the exponent masked to ``-inf`` above the diagonal before
``exp``. A per-dimension one cannot be split as ``(q_i exp(b_i)) . (k_j exp(-b_j))``: with strong
gates ``exp(-b_j)`` overflows. Instead the chunk is cut into sub-chunks of 16 steps, as
flash-linear-attention does:

* a key in an earlier sub-chunk than the query is measured from the query sub-chunk's first step
  ``r``: ``(q_i exp(b_i - b_r)) . (k_j exp(b_r - b_j))``, both exponents ``<= 0``, one matrix
  product per query sub-chunk;
* within a sub-chunk, one matrix product too, ``(q_i exp(b_i - b_r)) . (k_j exp(b_r - b_j))``,
  the products above the diagonal dropped with ``torch.where``. The keys' factor is at most
  ``exp(SPAN_LIMIT)`` (``exp(40)``, far inside float32) as long as every sub-chunk's log decays
  drop by at most 40 in each key dimension. Where a gate forgets faster than that (GLA's
  ``logsigmoid(z) / 16`` below ``-2.5`` a step, which a trained Kimi Delta Attention reaches),
  the sub-chunk is halved until the drops fit, down to one step, whose own weight ``q_i . k_i``
  has no decay at all. Forming the ``(16, 16, dk)`` products ``q_id k_jd exp(b_id - b_jd)``
  instead, as flash-linear-attention's kernel does in its registers, costs 16 times the queries'
  size here: a Kimi Delta Attention step at MQAR's (256, 16) cell took 4x as long that way
  (``docs/results/speed.md``, why a trained ``kda`` ran at 3 s a step), and profiling GLA at 8k
  tokens found it the step's largest cost. The sub-chunk is chosen once per call, from the largest
  drop in the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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

__all__ = [
    "SPAN_LIMIT",
    "SUB_CHUNK_SIZE",
    "chunk_weight_grid",
    "chunk_weights",
    "decay_chunkwise",
    "decay_recurrent",
    "decay_weights",
    "run_signed",
    "sub_chunk_length",
]

SUB_CHUNK_SIZE = 16
"""Steps per sub-chunk of the weights inside a chunk, where the decays allow (:data:`SPAN_LIMIT`)."""

SPAN_LIMIT = 40.0
"""The largest drop of the log decays within a sub-chunk (per key dimension): factors up to
``exp(40)``, about ``2e17``; a sub-chunk over which the decays drop more is halved."""


def _prepare(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Broadcast ``log_decay`` to ``(*batch, T, w)`` (``w``: 1 or ``dk``, as given; ``*batch`` what
    the inputs' batch shapes broadcast to) and zero every input at the padded steps."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], log_decay.shape[:-2])
    log_decay = torch.broadcast_to(log_decay, (*batch, q.shape[-2], log_decay.shape[-1]))
    return zero_padding(mask, q, k, v, log_decay)


def _pad_steps(tensors: Sequence[Tensor], cum: Tensor, multiple: int) -> tuple[list[Tensor], Tensor]:
    """Pad the chunk axis (``-2``) of ``tensors`` and ``cum`` to a multiple of ``multiple`` with identity steps.

    Zero queries and keys give zero weights; the cumulative log decay is carried on unchanged, so
    the padded steps keep every exponent non-positive.
    """
    pad = -cum.shape[-2] % multiple
    if pad == 0:
        return list(tensors), cum
    padded = [torch.cat([x, x.new_zeros(*x.shape[:-2], pad, x.shape[-1])], -2) for x in tensors]
    carried = cum[..., -1:, :].expand(*cum.shape[:-2], pad, cum.shape[-1])
    return padded, torch.cat([cum, carried], -2)


def _intra_chunk_weights(queries: Sequence[Tensor], keys: Sequence[Tensor], cum: Tensor) -> list[list[Tensor]]:
    """The weights inside each chunk, ``sum_d q_id k_jd exp(b_id - b_jd)`` for ``j <= i``, else 0,
    for every query and key tensor: the decays' factors are formed once for all of them.

    Args:
        queries: Queries ``(*batch, N, c, dk)`` each.
        keys: Keys ``(*batch, N, c, dk)`` each.
        cum: Log decays summed within each chunk ``(*batch, N, c, dk)``, non-increasing in steps.

    Returns:
        ``weights[i][j]`` for ``queries[i]`` and ``keys[j]``: ``(*batch, N, c, c)``, lower triangular.
    """
    c = cum.shape[-2]
    sub = sub_chunk_length(cum, min(SUB_CHUNK_SIZE, c))
    padded, cum = _pad_steps([*queries, *keys], cum, sub)
    queries, keys = padded[: len(queries)], padded[len(queries) :]
    length = cum.shape[-2]
    num_sub = length // sub
    cum_sub = cum.unflatten(-2, (num_sub, sub))  # (*batch, N, M, s, dk)
    neg_inf = cum.new_tensor(float("-inf"))

    # Keys of earlier sub-chunks, measured from each query sub-chunk's first step r.
    ref = cum_sub[..., :1, :]  # (*batch, N, M, 1, dk)
    from_ref = (cum_sub - ref).exp()
    steps = torch.arange(length, device=cum.device)
    earlier = steps < (torch.arange(num_sub, device=cum.device) * sub).unsqueeze(-1)  # (M, c')
    to_ref = torch.where(earlier.unsqueeze(-1), ref - cum.unsqueeze(-3), neg_inf).exp()  # (*batch, N, M, c', dk)
    queries_from_ref = [q.unflatten(-2, (num_sub, sub)) * from_ref for q in queries]
    keys_to_ref = [k.unsqueeze(-3) * to_ref for k in keys]

    # Keys of the query's own sub-chunk, measured from its first step r too (the sub-chunk's drop fits SPAN_LIMIT).
    causal = torch.ones(sub, sub, dtype=torch.bool, device=cum.device).tril()
    to_own_ref = (ref - cum_sub).exp()
    own_keys = [k.unflatten(-2, (num_sub, sub)) * to_own_ref for k in keys]
    diagonals = [[torch.where(causal, q @ k.mT, 0.0) for k in own_keys] for q in queries_from_ref]
    block_eye = torch.eye(num_sub, dtype=cum.dtype, device=cum.device)[:, None, :, None]  # (M, 1, M, 1)
    return [
        [
            ((q @ k.mT).unflatten(-1, (num_sub, sub)) + diagonal.unsqueeze(-2) * block_eye)
            .flatten(-4, -3)
            .flatten(-2, -1)[..., :c, :c]
            for k, diagonal in zip(keys_to_ref, row)
        ]
        for q, row in zip(queries_from_ref, diagonals)
    ]


def sub_chunk_length(cum: Tensor, longest: int) -> int:
    """The steps of the sub-chunks inside a chunk: ``longest``, halved until the log decays
    ``cum`` ``(..., c, dk)`` (summed within each chunk) drop by at most :data:`SPAN_LIMIT` over
    every sub-chunk in every key dimension; one step always fits (it has no drop of its own)."""
    size = longest
    while size > 1:
        _, padded = _pad_steps([], cum, size)
        steps = padded.unflatten(-2, (-1, size))
        if float((steps[..., 0, :] - steps[..., -1, :]).detach().amax()) <= SPAN_LIMIT:
            break
        size //= 2
    return size


def chunk_weights(q: Tensor, k: Tensor, cum: Tensor) -> Tensor:
    """The weights inside each chunk ``(..., c, c)``, ``sum_d q_id k_jd exp(b_id - b_jd)`` for ``j <= i``
    (else 0), from its log decays summed within it ``(..., c, w)`` (``w``: 1 or ``dk``), formed as
    the module docstring says."""
    [[weights]] = chunk_weight_grid([q], [k], cum)
    return weights


def chunk_weight_grid(queries: Sequence[Tensor], keys: Sequence[Tensor], cum: Tensor) -> list[list[Tensor]]:
    """:func:`chunk_weights` for every query tensor and key tensor under the same decays
    (``weights[i][j]`` for ``queries[i]`` and ``keys[j]``), which form their factors once: the
    generalized delta rule (:mod:`~zoo.attention.kernels.dplr`) forms its four in-chunk matrices
    from two queries and two keys."""
    if cum.shape[-1] == 1:  # a scalar decay: one decay matrix scales the scores
        decay = causal_decay(cum.squeeze(-1))
        return [[(q @ k.mT) * decay for k in keys] for q in queries]
    return _intra_chunk_weights(queries, keys, cum)


def _chunked(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, chunk_size: int, initial_state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The chunkwise computation on prepared inputs.

    Returns:
        Outputs ``(*batch, T, dv)`` and the final state ``(*batch, dk, dv)``.
    """
    if log_decay.shape[-1] == 1 and q.dim() > 2 and q.shape[-3] == k.shape[-3] == 1 < v.shape[-3]:
        return _chunked_shared(q, k, v, log_decay, chunk_size, initial_state)
    length = q.shape[-2]
    initial_state = initial_or_zeros(initial_state, k, v)
    q, k, v, log_decay = (to_chunks(x, chunk_size) for x in (q, k, v, log_decay))
    cum = log_decay.cumsum(-2)  # (*batch, N, c, w)
    cum_end = cum[..., -1:, :]

    weights = chunk_weights(q, k, cum)
    decayed_q = q * cum.exp()  # read the state entering the chunk
    decayed_k = k * (cum_end - cum).exp()  # written at the chunk's end
    entering, final_state, _ = chunk_scan(initial_state, cum_end.mT.exp(), decayed_k.mT @ v)
    output = decayed_q @ entering + weights @ v
    return from_chunks(output, length), final_state


def _chunked_shared(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, chunk_size: int, initial_state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """:func:`_chunked` for a scalar decay with queries and keys shared by the ``h`` heads of axis
    ``-3`` (Mamba-2's ``B`` and ``C``, one per group of heads), as SSD writes its chunk states.

    A scalar decay factors out of the keys onto the values, ``(k_j a) ^T v_j = k_j^T (a v_j)``, and
    out of the queries onto the outputs, so the heads' values can be set side by side, ``h * dv``
    wide: each chunk's state is then one product of the shared keys with every head's values, and
    each chunk's read one product of the shared queries with every head's state. Per head, the
    same products would be ``h`` times as many and ``h`` times narrower, and the decays would
    scale the ``dk``-wide keys and queries of every head (at Mamba-2's ``d_state`` 128, twice the
    values' width) instead of the values. The state is carried transposed, ``(h * dv, dk)``, so
    that each head's decay scales rows, as :func:`chunk_scan` takes it.
    """
    length, heads, width = q.shape[-2], v.shape[-3], v.shape[-1]
    q, k, v, log_decay = (to_chunks(x, chunk_size) for x in (q, k, v, log_decay))  # (..., h or 1, N, c, d)
    cum = log_decay.cumsum(-2)  # (..., h, N, c, 1)
    cum_end = cum[..., -1:, :]
    inside = chunk_weights(q, k, cum) @ v  # the shared scores formed once, decayed per head

    def side_by_side(x: Tensor) -> Tensor:  # (..., h, N, r, d) -> (..., 1, N, h * d, r): the heads' d stacked
        return x.movedim(-4, -2).flatten(-2).mT.unsqueeze(-4)

    written = side_by_side(v * (cum_end - cum).exp())  # (..., 1, N, h * dv, c)
    chunk_decay = side_by_side(cum_end.exp().expand(*cum_end.shape[:-1], width))  # (..., 1, N, h * dv, 1)
    if initial_state is None:
        initial = written.new_zeros(*written.shape[:-3], heads * width, k.shape[-1])
    else:
        initial = initial_state.mT.flatten(-3, -2).unsqueeze(-3)  # (..., 1, h * dv, dk)
    entering, final, _ = chunk_scan(initial, chunk_decay, written @ k)
    read = (q @ entering.mT).unflatten(-1, (heads, width)).movedim(-2, -4).squeeze(-5)  # (..., h, N, c, dv)
    output = read * cum.exp() + inside
    return from_chunks(output, length), final.squeeze(-3).unflatten(-2, (heads, width)).mT


def _negative_steps(negative: Tensor, mask: Tensor | None) -> Tensor:
    """``negative`` ``(*batch, T, 1 or dk)`` False at the padded steps, which are identity steps."""
    return negative if mask is None else negative & mask.unsqueeze(-1)


def _signs(negative: Tensor, mask: Tensor | None, dtype: torch.dtype) -> Tensor:
    """``s_t = prod_{tau <= t} sign(a_tau)`` ``(*batch, T, 1 or dk)``, +1 or -1 in ``dtype``: the
    parity of the negative decays up to each step, counted in integers."""
    return 1 - 2 * (_negative_steps(negative, mask).cumsum(-2) % 2).to(dtype)


SignedRun = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
"""A magnitude kernel over ``(q, k, v)``, returning ``(output, final_state)``."""


def run_signed(
    run: SignedRun, q: Tensor, k: Tensor, v: Tensor, negative: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """``run`` (a form on the decays' magnitudes) under a signed decay: the parities ``s_t`` on the
    values and outputs for a scalar decay, on the queries and keys for one per key dimension, and
    the returned state signed back (see the module docstring)."""
    if negative.shape[-1] == 1:
        signs = _signs(negative, mask, v.dtype)
        output, final_state = run(q, k, v * signs)
        return output * signs, final_state * signs[..., -1:, :]
    signs = _signs(negative, mask, q.dtype)
    output, final_state = run(q * signs, k * signs, v)
    return output, final_state * signs[..., -1, :, None]


def decay_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    chunk_size: int | None = 64,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
    negative: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The chunkwise form: quadratic inside chunks of ``chunk_size`` steps, a state between them;
    ``chunk_size=None`` is the parallel form, the whole input as one chunk.

    Args:
        q: Queries ``(*batch, T, dk)``, already scaled.
        k: Keys ``(*batch, T, dk)``.
        v: Values ``(*batch, T, dv)``.
        log_decay: ``log a_t <= 0``, broadcastable to ``(*batch, T, dk)`` (a decay per key
            dimension) or ``(*batch, T, 1)`` (a scalar decay per step).
        chunk_size: Steps per chunk (``T`` need not be a multiple of it); None: ``T``.
        initial_state: ``(*batch, dk, dv)``; zeros if None.
        mask: ``(*batch, T)`` (or broadcastable with as many dimensions, e.g. ``(B, 1, T)``), True
            at real tokens; padded steps are identity steps with zero outputs.
        negative: ``(*batch, T, 1)`` (one flag per step) or ``(*batch, T, dk)`` (one per key
            dimension), or broadcastable, True where the decay is ``-exp(log_decay)`` (see the
            module docstring); None: every decay positive.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``.
    """
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    chunk_size = chunk_length(chunk_size, q.shape[-2])
    if negative is None:
        return _chunked(q, k, v, log_decay, chunk_size, initial_state)
    return run_signed(lambda q, k, v: _chunked(q, k, v, log_decay, chunk_size, initial_state), q, k, v, negative, mask)


def decay_weights(
    q: Tensor, k: Tensor, log_decay: Tensor, *, mask: Tensor | None = None, negative: Tensor | None = None
) -> Tensor:
    """The parallel form's ``(*batch, T, T)`` weights, for heatmaps: ``weights[i, j] = sum_d q_id
    k_jd exp(b_id - b_jd)`` for ``j <= i``, else 0, so that the output of :func:`decay_chunkwise`
    from a zero state is ``weights @ v``. Memory ``O(T^2 dk / 16)`` for a per-dimension decay.

    Args as :func:`decay_chunkwise`.
    """
    q, k, _, log_decay = _prepare(q, k, k[..., :1], log_decay, mask)
    if negative is None:
        return chunk_weights(q, k, log_decay.cumsum(-2))
    signs = _signs(negative, mask, q.dtype)
    if signs.shape[-1] == 1:
        return signs * chunk_weights(q, k, log_decay.cumsum(-2)) * signs.mT
    return chunk_weights(q * signs, k * signs, log_decay.cumsum(-2))


def decay_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    state: Tensor | None = None,
    mask: Tensor | None = None,
    negative: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form: ``S_t = Diag(a_t) S_{t-1} + k_t^T v_t``, one step at a time (``T >= 1``;
    ``a_t = -exp(log_decay_t)`` where ``negative``).

    Args as :func:`decay_chunkwise`, with ``state`` ``(*batch, dk, dv)`` (zeros if None) the state
    before the first step: a decoder's cache.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``, whatever ``T``.
    """
    q, k, v, log_decay = _prepare(q, k, v, log_decay, mask)
    decay = log_decay.exp()
    if negative is not None:
        decay = torch.where(_negative_steps(negative, mask), -decay, decay)
    return step_by_step(q, k, v, state, _decay_step, decay.unbind(-2))


def _decay_step(state: Tensor, k_t: Tensor, v_t: Tensor, a_t: Tensor) -> Tensor:
    """``S_t = Diag(a_t) S_{t-1} + k_t^T v_t``."""
    return a_t.unsqueeze(-1) * state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
