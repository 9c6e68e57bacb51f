"""The decaying state's chunkwise form as a scan of states, for states of few values per key.

A decaying state ``S_t = Diag(a_t) S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t``
(:mod:`~zoo.attention.kernels.decay`) with ``dv`` values per key dimension costs, per step and head,
``dk * dv`` products to update and ``dk * dv`` to read. The chunkwise form of
:func:`~zoo.attention.kernels.decay.decay_chunkwise` instead forms a ``(c, c)`` weight block per
chunk over ``dk``: ``c * dk`` products per step besides ``dk * dv`` for the state, which pays where
``dv`` is large (linear attention's ``dv = dk``) and costs ``c / dv`` times the scan where it is
small. Mamba's selective scan is that small case: one value per channel (``dv = 1``), a decay per
channel and state dimension, and ``expand * embed_dim`` channels as heads.

This form runs the recurrence itself, as ``selective_scan_ref`` of state-spaces/mamba does one
step at a time, but in two levels, with the steps of every chunk side by side:

1. in each chunk ``n`` of ``c`` steps, from a zero state, ``h_i = a_i * h_{i-1} + k_i^T v_i`` and
   the local read ``q_i h_i``, one step of all chunks at a time (``c`` steps in all);
2. the state entering each chunk, ``S_{n+1} = Diag(prod_i a_i) S_n + h_c``
   (:func:`~zoo.attention.kernels.chunk_scan.chunk_scan`, ``N`` steps);
3. each output adds what the entering state contributes, ``(q_i * exp(b_i)) S_n``, with ``b_i``
   the chunk's cumulative log decay up to step ``i``, always ``<= 0``.

So a chunk of ``c`` and ``N = T / c`` chunks take ``c + N`` sequential steps; ``c`` near
``sqrt(T)`` balances them. Equal to the other forms (tests, float64); it forms no ``(T, T)`` or
``(c, c)`` matrix, so it has no weights to return.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.attention.kernels.chunk_scan import chunk_scan
from zoo.attention.kernels.chunking import from_chunks, initial_or_zeros, to_chunks, zero_padding
from zoo.attention.kernels.decay import run_signed

__all__ = ["decay_scan", "scan_chunk_size"]


def scan_chunk_size(length: int) -> int:
    """Steps per chunk that balance the two loops: about ``sqrt(length)``, at least 8."""
    return max(8, math.isqrt(max(length, 1)))


def decay_scan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    chunk_size: int | None = None,
    initial_state: Tensor | None = None,
    mask: Tensor | None = None,
    negative: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The decaying state's recurrence, chunks side by side (see the module docstring).

    Args:
        q: Queries ``(*batch, T, dk)``, already scaled; the batch axes broadcast with the others'
            (Mamba's ``B`` and ``C``, shared by every channel, as ``(B, 1, T, dk)``).
        k: Keys ``(*batch, T, dk)``.
        v: Values ``(*batch, T, dv)``.
        log_decay: ``log a_t <= 0``, broadcastable to ``(*batch, T, dk)`` or ``(*batch, T, 1)``.
        chunk_size: Steps per chunk; None: :func:`scan_chunk_size`'s.
        initial_state: ``(*batch, dk, dv)``; zeros if None.
        mask: ``(*batch, T)`` (or broadcastable with as many dimensions), True at real tokens;
            padded steps are identity steps with zero outputs.
        negative: True where the decay is ``-exp(log_decay)``, ``(*batch, T, 1 or dk)``
            (:func:`~zoo.attention.kernels.decay.run_signed`); None: every decay positive.

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``.
    """
    size = scan_chunk_size(q.shape[-2]) if chunk_size is None else chunk_size
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"decay_scan: chunk_size must be a positive integer or None; got {chunk_size!r}.")
    q, k, v, log_decay = zero_padding(mask, q, k, v, log_decay)
    state = initial_or_zeros(initial_state, k, v)
    if negative is None:
        return _scan(q, k, v, log_decay, size, state)
    return run_signed(lambda q, k, v: _scan(q, k, v, log_decay, size, state), q, k, v, negative, mask)


def _scan(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, size: int, state: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`decay_scan` on the decays' magnitudes, the padding already zeroed."""
    length = q.shape[-2]
    q, k, v, log_decay = (to_chunks(x, size) for x in (q, k, v, log_decay))  # (*batch, N, c, d)
    local, reads = None, []
    # Each step's slices contiguous (step-major), so a step reads them in one sweep rather than a
    # cache line every chunk; the decays exponentiated in place of their copy (always a copy: the
    # caller's tensor is never written), to hold no more memory. One unbind (and one backward node)
    # a tensor, not one a step.
    q_s, k_s, v_s = (x.movedim(-2, 0).contiguous() for x in (q, k, v))
    decay = log_decay.movedim(-2, 0).clone(memory_format=torch.contiguous_format).exp_()
    steps = zip(q_s.unbind(0), k_s.unbind(0), v_s.unbind(0), decay.unbind(0))
    for q_i, k_i, v_i, a_i in steps:
        written = k_i.unsqueeze(-1) * v_i.unsqueeze(-2)
        local = written if local is None else torch.addcmul(written, a_i.unsqueeze(-1), local)
        reads.append((q_i.unsqueeze(-1) * local).sum(-2))
    cum = log_decay.cumsum(-2)
    entering, final_state, _ = chunk_scan(state, cum[..., -1, :, None].exp(), local)
    output = torch.stack(reads, dim=-2) + (q * cum.exp()) @ entering
    return from_chunks(output, length), final_state
