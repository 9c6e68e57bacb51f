"""Log-linear attention (Guo, Yang, Goel, Xing, Dao and Kim, 2025, "Log-Linear Attention",
arXiv 2506.04761): a linear recurrence whose prefix is cut into O(log T) buckets by a Fenwick
tree, each bucket with its own state, read with a weight per query and level.

For query position ``i`` and key position ``j <= i`` the bucket's level is the Fenwick level::

    level(i, j) = bit_length(i XOR j)        (0 for j = i; ceil(log2 T) at most)

so the prefix ``[0, i]`` of query ``i`` is the token itself (level 0) and, for each bit ``l - 1``
set in ``i``, the ``2^(l-1)`` positions just before ``i`` with its lower ``l - 1`` bits cleared
(level ``l``). With a linear recurrence's weights ``W_ij`` (the ``(T, T)`` matrix of its parallel
form: ``(q_i . k_j) exp(b_i - b_j)`` for a scalar decay, the delta rule's ``tril(Q K^T * decays)
(I + L)^{-1} diag(beta)``) and the level weights ``lambda_i^(l) >= 0``, the output is::

    o_i = sum_{j <= i} lambda_i^(level(i, j)) W_ij v_j        O = (W * M^H) V

with ``M^H_ij = lambda_i^(level(i, j))`` the hierarchical mask (the paper's equation for
log-linear Mamba-2, ``O = (Q K^T * M^S * M^H) V``, and for log-linear Gated DeltaNet, the delta
rule's matrix times ``M^H``). With every ``lambda`` one it is the recurrence itself.

Three forms compute it, equal up to rounding:

* the parallel form (:func:`log_linear_weights`; ``chunk_size=None``): ``W * M^H``, quadratic;
* :func:`log_linear_chunkwise`: the paper's chunk-level scan. Inside an aligned chunk of ``C``
  steps (a power of two) the levels are at most ``log2 C``: the chunk's own ``W * M^H``, for every
  chunk in one batched call. A key in an earlier chunk ``c'`` is at level ``log2 C + bit_length(c XOR
  c')`` from a query of chunk ``c``: a Fenwick tree over the chunks. Each chunk acts on a state
  entering it as linear maps (its reads, its write and its transition), formed for every chunk at
  once; the bucket of chunk-level ``l`` is the first half of ``c``'s block of ``2^l`` chunks, whose
  state :mod:`~zoo.attention.kernels.fenwick_scan` forms for every level at once (up the tree for a
  scalar decay; for the delta rule, one scan over the chunks carrying ``bit_length(N - 1)`` states,
  one a level, each emptied at its block's end). Each chunk then reads the levels it lies in a
  second half of: ``O(C^2 + C log T)`` a chunk (``dk`` and ``dv`` aside), ``O(T (C + log T))`` in all;
* :func:`log_linear_recurrent`: one step at a time from a list of level states, the form for
  decoding. Before step ``p`` (``p > 0``) the states are merged as a binary counter: with ``m`` the
  trailing ones of ``p - 1``, levels ``0 .. m`` are summed into level ``m + 1`` (its bucket is
  then ``[p - 2^m, p)``) and emptied; then every level's state takes the step's transition, and only
  level 0 (the token itself) its write; ``o_p = sum_l lambda_p^(l) q_p S^(l)``. After ``t`` steps
  ``bit_length(t - 1) + 1 = ceil(log2 t) + 1`` levels are held: the state grows logarithmically.

The transition is the existing kernels': a scalar decay per step (:mod:`~zoo.attention.kernels.decay`,
log-linear Mamba-2) or the gated delta rule (:mod:`~zoo.attention.kernels.delta_rule`, log-linear
Gated DeltaNet); every level state takes the same transition, as the states summed over the levels
are the recurrence's own state. The recurrent form and the delta rule's chunk maps call those
kernels (the levels become a batch axis); a scalar decay's chunk maps are three lines in closed form.

Numerics: log decays are summed within a chunk only (by those kernels, and by the scalar decay's
chunk maps); the tree adds states, multiplies them by the chunks' transitions and scales reads by
``lambda``, so the chunkwise form is as safe in float32 at 16k tokens as theirs (the parallel
form, one chunk of ``T``, is meant for short inputs).

Positions count real tokens only: a padded step (``mask`` False) is an identity step with a zero
output that does not advance the Fenwick counter, so a left-padded row computes what the unpadded
one does. The chunkwise form gathers each row's real tokens to its front first (and puts the
outputs back), so the chunks align with the counter whatever the padding.

Departures from flash-linear-attention's ``fla/ops/log_linear_attn`` (whose ``naive.py`` builds
``M^H`` level by level and whose ``chunk.py`` is a Triton kernel with a fixed 64-step chunk and
fifteen levels, for the scalar decay only): the chunk here is any power of two; only the levels the
input reaches are formed; the delta rule is a transition too. The chunkwise and parallel forms
start from an empty tree: a call that continues a state (decoding) runs the recurrent form.

Conventions: queries and keys ``(*batch, T, dk)``, values ``(*batch, T, dv)``, ``log_decay`` and
``beta`` ``(*batch, T)``, level weights ``(*batch, T, n)`` (``lambda_t^(l)`` for ``l < n``), a
level state ``(*batch, levels, dk, dv)`` read as ``o_t = q_t S_t``, ``mask`` ``(*batch, T)`` True at
real tokens, ``start`` broadcastable to ``*batch`` (``(B, 1)`` under ``(B, H)``): the real tokens
before the first step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.chunking import from_chunks, to_chunks, zero_padding
from zoo.attention.kernels.decay import decay_chunkwise, decay_weights
from zoo.attention.kernels.delta_rule import delta_rule_chunkwise, delta_rule_weights
from zoo.attention.kernels.fenwick import (
    bit_length,
    fenwick_levels,
    hierarchical_mask,
    level_count,
    real_positions,
    require_levels,
    tree_length,
)
from zoo.attention.kernels.fenwick_scan import tree_over_chunks

__all__ = ["log_linear_chunkwise", "log_linear_recurrent", "log_linear_weights"]


def _padded_levels(level_weights: Tensor, levels: int) -> Tensor:
    """``level_weights`` with zero weights appended (or trimmed) to ``levels`` levels."""
    have = level_weights.shape[-1]
    return F.pad(level_weights, (0, levels - have)) if levels > have else level_weights[..., :levels]


def _weights(q: Tensor, k: Tensor, log_decay: Tensor, beta: Tensor | None, mask: Tensor | None) -> Tensor:
    """The transition's parallel weights ``W`` ``(*batch, T, T)``."""
    if beta is None:
        return decay_weights(q, k, log_decay.unsqueeze(-1), mask=mask)
    return delta_rule_weights(q, k, beta, log_decay, mask=mask)


def _run(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    beta: Tensor | None,
    chunk_size: int | None,
    state: Tensor | None,
    mask: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """The transition's own chunkwise form (None: parallel) from ``state``: outputs and final state."""
    if beta is None:
        return decay_chunkwise(q, k, v, log_decay.unsqueeze(-1), chunk_size=chunk_size, initial_state=state, mask=mask)
    return delta_rule_chunkwise(q, k, v, beta, log_decay, chunk_size=chunk_size, initial_state=state, mask=mask)


def _side_by_side(states: Tensor) -> Tensor:
    """Level states ``(*batch, n, dk, dv)`` -> ``(*batch, dk, n * dv)``: a transition acts on the
    keys' side of a state and a read contracts it, so the levels run as one wider state (one
    triangular solve of the delta rule for all of them, not one a level)."""
    return states.movedim(-3, -2).flatten(-2)


def _apart(wide: Tensor, levels: int) -> Tensor:
    """Undo :func:`_side_by_side`: ``(*batch, dk, n * dv)`` -> ``(*batch, n, dk, dv)``."""
    return wide.unflatten(-1, (levels, -1)).movedim(-2, -3)


def log_linear_weights(
    q: Tensor,
    k: Tensor,
    level_weights: Tensor,
    log_decay: Tensor,
    beta: Tensor | None = None,
    *,
    mask: Tensor | None = None,
) -> Tensor:
    """The parallel form's ``(*batch, T, T)`` weights ``W * M^H``: the output from an empty tree is
    ``weights @ v``. ``beta`` None: a scalar decay; else the gated delta rule.

    Raises:
        ValueError: ``level_weights`` has fewer levels than the input reaches.
    """
    length = q.shape[-2]
    require_levels(tree_length(mask, length, None), level_weights.shape[-1])
    positions = real_positions(mask, length, None, q.device)
    return _weights(q, k, log_decay, beta, mask) * hierarchical_mask(level_weights, positions)


def _level_states(
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    beta: Tensor | None,
    mask: Tensor | None,
    positions: Tensor,
    chunk_size: int | None,
) -> Tensor:
    """The level states after the last real step ``p``, as the recurrent form holds them
    ``(*batch, bit_length(p) + 1, dk, dv)``: level ``l`` sums the writes of the keys at level ``l``
    from ``p``, each carried through the steps after it. The state is linear in the values, so each
    level is the transition run on the values of its keys alone (the levels side by side)."""
    last = positions.amax(-1, keepdim=True).clamp(min=0)  # (*batch, 1)
    levels = fenwick_levels(last, positions).squeeze(-2)  # (*batch, T)
    count = level_count(int(last.max()) + 1)
    chosen = levels.unsqueeze(-1) == torch.arange(count, device=v.device)  # (*batch, T, n)
    values = (v.unsqueeze(-2) * chosen.unsqueeze(-1).to(v.dtype)).flatten(-2)  # (*batch, T, n * dv)
    _, final = _run(k, k, values, log_decay, beta, chunk_size, None, mask)  # k as queries: no output is read
    return _apart(final, count)


def _merged(states: Tensor, previous: Tensor) -> Tensor:
    """The binary counter's carry before the step after ``previous`` ``(*batch)`` (-1: no merge):
    levels ``0 .. m`` summed into ``m + 1`` (``m`` the trailing ones of ``previous``) and emptied."""
    target = torch.where(previous >= 0, bit_length(previous ^ (previous + 1)), -1)  # m + 1
    n = states.shape[-3]
    to, of = torch.arange(n, device=states.device).unsqueeze(-1), torch.arange(n, device=states.device)
    target = target[..., None, None]
    merge = ((to == of) & (to > target)) | ((to == target) & (of < target))  # (*batch, n, n)
    return torch.einsum("...ij,...jkv->...ikv", merge.to(states.dtype), states)


def log_linear_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    level_weights: Tensor,
    log_decay: Tensor,
    beta: Tensor | None = None,
    *,
    state: Tensor | None = None,
    start: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form from the level states ``state`` (None: an empty tree) after ``start``
    real tokens (None: 0), merging levels as a binary counter before each real step.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, levels, dk, dv)``, the levels
        those the positions reached need.

    Raises:
        ValueError: ``level_weights`` has fewer levels than the positions reach.
    """
    length = q.shape[-2]
    end = tree_length(mask, length, start)
    require_levels(end, level_weights.shape[-1])
    count = level_count(max(end, 1))
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], log_decay.shape[:-1])
    if state is None:
        state = v.new_zeros(*batch, count, k.shape[-1], v.shape[-1])
    state = F.pad(state, (0, 0, 0, 0, 0, count - state.shape[-3])).expand(*batch, count, k.shape[-1], v.shape[-1])
    positions = real_positions(mask, length, start, q.device).expand(*batch, length)
    real = torch.ones_like(positions, dtype=torch.bool) if mask is None else mask.expand(*batch, length)
    level_weights = _padded_levels(level_weights, count)
    outputs = []
    for t in range(length):
        p, here = positions[..., t], real[..., t]
        state = _merged(state, torch.where(here & (p > 0), p - 1, -1))
        step = slice(t, t + 1)
        read, wide = _run(
            q[..., step, :],
            k[..., step, :],
            F.pad(v[..., step, :], (0, (count - 1) * v.shape[-1])),  # the write, to level 0 only
            log_decay[..., step],
            None if beta is None else beta[..., step],
            None,
            _side_by_side(state),
            here.unsqueeze(-1),
        )
        state = _apart(wide, count)
        outputs.append((level_weights[..., t, :, None] * read.squeeze(-2).unflatten(-1, (count, -1))).sum(-2))
    return torch.stack(outputs, -2), state


def _real_first(mask: Tensor, shape: torch.Size) -> Tensor:
    """The order of each row's steps with its real tokens first, in order ``(*batch, T)``."""
    return torch.sort((~mask.expand(shape)).to(torch.int8), dim=-1, stable=True).indices


def _gather(x: Tensor, order: Tensor) -> Tensor:
    """``x`` ``(*batch, T)`` or ``(*batch, T, d)`` with its steps in ``order``."""
    if x.dim() == order.dim():
        return x.expand(order.shape).gather(-1, order)
    shape = (*order.shape, x.shape[-1])
    return x.expand(shape).gather(-2, order.unsqueeze(-1).expand(shape))


def _chunk_maps(
    qc: Tensor, kc: Tensor, vc: Tensor, dc: Tensor, bc: Tensor | None, mc: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """What each chunk does to a state ``S`` entering it, for every chunk at once: its reads ``P``
    ``(*batch, N, C, dk)`` (the state adds ``P S`` to its outputs), its write ``w`` ``(*batch, N, dk,
    dv)`` and its transition ``A`` (the state leaving it is ``A S + w``): ``(*batch, N, dk, dk)``, or
    ``(*batch, N, 1, 1)`` for a scalar decay, whose transition is a number times ``I``.

    A scalar decay's maps in closed form, ``b_i`` the log decays summed within the chunk::

        P_i = exp(b_i) q_i        w = sum_j exp(b_C - b_j) k_j^T v_j        A = exp(b_C)

    The delta rule's are linear in ``S`` too: one run of its kernel over each chunk, from the
    state ``[0 | I]`` with the values ``[v | 0]``, gives all three."""
    if bc is None:
        qc, kc, vc, dc = zero_padding(mc, qc, kc, vc, dc)  # padded steps: identity steps, no output
        cum = dc.cumsum(-1).unsqueeze(-1)  # (*batch, N, C, 1)
        end = cum[..., -1:, :]
        return qc * cum.exp(), (kc * (end - cum).exp()).mT @ vc, end.exp()
    dk, dv = kc.shape[-1], vc.shape[-1]
    eye = torch.eye(dk, dtype=vc.dtype, device=vc.device)
    read, final = _run(qc, kc, F.pad(vc, (0, dk)), dc, bc, None, F.pad(eye, (dv, 0)), mc)
    return read[..., dv:], final[..., :dv], final[..., dv:]


def log_linear_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    level_weights: Tensor,
    log_decay: Tensor,
    beta: Tensor | None = None,
    *,
    chunk_size: int | None = 64,
    mask: Tensor | None = None,
    final_state: bool = True,
) -> tuple[Tensor, Tensor]:
    """The chunkwise form from an empty tree, over chunks of ``chunk_size`` steps (a power of two;
    None: the parallel form, ``weights @ v``).

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and the level states the recurrent form
        would hold after the last real step, ``(*batch, levels, dk, dv)`` (no levels, if
        ``final_state`` is False: a training pass does not need them).

    Raises:
        ValueError: ``chunk_size`` is not a power of two, or the level weights are too few.
    """
    if chunk_size is not None and (chunk_size < 1 or chunk_size & (chunk_size - 1)):
        raise ValueError(
            f"log-linear attention's chunk_size must be a power of two, so that chunks align with the Fenwick "
            f"tree; got {chunk_size}: pick 16, 32 or 64."
        )
    length = q.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], log_decay.shape[:-1])
    positions = real_positions(mask, length, None, q.device)
    if chunk_size is None:
        output = log_linear_weights(q, k, level_weights, log_decay, beta, mask=mask) @ v
    else:
        require_levels(tree_length(mask, length, None), level_weights.shape[-1])
        output = _chunked(q, k, v, level_weights, log_decay, beta, chunk_size, mask, batch)
    if not final_state:
        return output, v.new_zeros(*batch, 0, k.shape[-1], v.shape[-1])
    final = _level_states(k, v, log_decay, beta, mask, positions.expand(*batch, length), chunk_size)
    return output, final.expand(*batch, *final.shape[-3:])


def _chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    level_weights: Tensor,
    log_decay: Tensor,
    beta: Tensor | None,
    chunk_size: int,
    mask: Tensor | None,
    batch: torch.Size,
) -> Tensor:
    """The chunk-level scan (see the module docstring) on inputs of ``*batch`` rows."""
    length = q.shape[-2]
    order = None
    if mask is not None:  # each row's real tokens to its front: positions are then the steps
        order = _real_first(mask, (*batch, length))
        q, k, v, level_weights, log_decay = (_gather(x, order) for x in (q, k, v, level_weights, log_decay))
        beta = None if beta is None else _gather(beta, order)
        mask = _gather(mask, order)
    chunks = -(-length // chunk_size)
    total = chunks * chunk_size
    inner = chunk_size.bit_length() - 1  # log2 C: the levels inside a chunk
    level_weights = _padded_levels(level_weights, level_count(total))

    def chunked(x: Tensor | None) -> Tensor | None:  # (*batch, T[, d]) -> (*batch, N, C[, d])
        if x is None:
            return None
        return (
            to_chunks(x.unsqueeze(-1), chunk_size).squeeze(-1) if x.dim() == q.dim() - 1 else to_chunks(x, chunk_size)
        )

    qc, kc, vc, lc, dc = (chunked(x) for x in (q, k, v, level_weights, log_decay))
    bc, mc = chunked(beta), chunked(mask)
    local = torch.arange(chunk_size, device=q.device)
    # inside each chunk: its own weights times the hierarchical mask of its levels (at most log2 C)
    output = (_weights(qc, kc, dc, bc, mc) * hierarchical_mask(lc[..., : inner + 1], local)) @ vc
    if chunks > 1:  # the earlier chunks, through the tree over the chunks
        reads, written, transition = _chunk_maps(qc, kc, vc, dc, bc, mc)
        outer = lc[..., inner + 1 : inner + 1 + (chunks - 1).bit_length()]
        output = output + tree_over_chunks(reads, written, transition, outer)
    output = from_chunks(output, length)
    if order is None:
        return output
    return torch.zeros_like(output).scatter(-2, order.unsqueeze(-1).expand(output.shape), output)
