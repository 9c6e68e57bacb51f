"""Mamba-3's exponential-trapezoidal recurrence, with rank-``R`` writes and reads (MIMO), on the
scalar-decay kernels (:mod:`zoo.attention.kernels.decay`).

Per head, with a ``(dk, dv)`` state ``S``, each token ``t`` carries ``R`` keys ``K_t`` ``(R, dk)``,
values ``V_t`` ``(R, dv)`` and queries ``Q_t`` ``(R, dk)`` (``R = 1``: SISO), a decay
``a_t = exp(log_decay_t)`` and the trapezoid's two weights, ``gamma_t`` (the current token's) and
``shift_t`` (the previous token's, before its decay); ``W_t = K_t^T V_t`` sums the ``R`` writes::

    S_t = a_t S_{t-1} + a_t shift_t W_{t-1} + gamma_t W_t,        O_t = Q_t S_t

(Mamba-3's ``alpha_t = a_t``, ``beta_t = a_t shift_t``, ``gamma_t``). ``K_0, V_0`` is the token
before the call (a decoder's cache), zeros at the start of a sequence.

How the decay kernels run it: each token's completed write one step late. Token ``j``'s write
enters the state twice, with ``gamma_j`` at ``j`` and with ``shift_{j+1}`` at ``j + 1``; only at
``j + 1`` are both known. So the kernels keep the state without the current token's own write,
``Z_t = S_t - gamma_t W_t``, which follows, by substituting ``S_{t-1} = Z_{t-1} + gamma_{t-1} W_{t-1}``::

    Z_t = a_t Z_{t-1} + a_t (gamma_{t-1} + shift_t) W_{t-1},        O_t = Q_t Z_t + gamma_t (Q_t K_t^T) V_t

a decaying state whose step ``t`` writes the previous token (keys ``a_t (gamma_{t-1} + shift_t)
K_{t-1}``, values ``V_{t-1}``), read by ``Q_t``, plus a term of the token alone. Every quantity at
step ``t`` comes from tokens ``t`` and ``t - 1``: the forms are causal by construction, nothing is
subtracted and nothing divided. A call that continues from a state ``S_0`` starts the kernels
there: ``S_0`` holds ``gamma_0 W_0`` already, so the first step writes ``a_1 shift_1 W_0`` alone
(``gamma_0`` taken as 0), and the state a call returns is ``S_T = Z_T + gamma_T W_T``.

The ``R`` writes of a token become ``R`` consecutive steps of the kernels (the decay at the
first, none at the rest): step ``(t, r)`` writes ``K_{t-1, r}`` (scaled as above) and reads with
``Q_{t, r}``, so it has not yet seen the delayed writes ``r' > r``. Each token's ``R x R`` blocks
add what the kernels' read lacks: ``(Q_t K'_{t-1}^T * U) V_{t-1}`` (``K'`` the scaled keys, ``U``
the strictly upper triangle, ``r' > r``) and the token's own ``gamma_t (Q_t K_t^T) V_t``. For
``R = 1`` the first is empty. Every form runs through the same kernels and the same blocks, so the
parallel, chunkwise and recurrent forms agree to rounding, and decays are summed in log space as
the kernels do (one decay a token: a chunk of ``c`` tokens is ``c R`` steps).

``mamba_ssm``'s chunked reference (``tests/ops/triton/test_mamba3_siso.py``) instead scales token
``j``'s key by ``gamma_j + shift_{j+1}`` and subtracts the part the read at ``j`` must not see:
causal only by cancellation in floating point (a change at ``j + 1`` moves the read at ``j`` by
rounding), which the zoo's conformance kit refuses. The one-step delay is the one
:mod:`zoo.attention.modules.bonus_recurrence` uses for RWKV-6. A key padding mask makes a padded
token an identity step that reads nothing and a zero token to the next one: its key, decay,
``gamma`` and ``shift`` are zero (the delayed write at a padded step still completes the token
before it, whose ``gamma`` share is not yet in ``Z``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.modules.recurrence import Recurrence

__all__ = ["TrapezoidRecurrence"]


@dataclass(frozen=True)
class TrapezoidRecurrence:
    """Mamba-3's recurrence (see the module docstring), per head.

    Fields: queries ``q`` ``(B, H, T, R, dk)``; keys ``k`` ``(B, H, T + 1, R, dk)`` and values ``v``
    ``(B, H, T + 1, R, dv)``, the token before the call first; ``log_decay``, ``gamma`` and ``shift``
    ``(B, H, T)``; ``skip`` added to the output ``(B, H, T, R * dv)`` (Mamba-3's ``D x``). The
    output is ``(B, H, T, R * dv)``: each token's ``R`` reads side by side.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    log_decay: Tensor
    gamma: Tensor
    shift: Tensor
    skip: Tensor | None = None

    @property
    def rank(self) -> int:
        return self.q.shape[-2]

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form over chunks of ``chunk_size`` tokens (None: the parallel form) from ``state``."""
        steps = _Steps.of(self, mask)
        output, delayed = steps.flat.chunkwise(None if chunk_size is None else chunk_size * self.rank, state, None)
        return steps.read(output, mask), steps.final(delayed)

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form, one write at a time from ``state``."""
        steps = _Steps.of(self, mask)
        output, delayed = steps.flat.recurrent(state, None)
        return steps.read(output, mask), steps.final(delayed)

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights from a zero state: for ``R = 1`` the output is
        ``weights @ v[..., 1:]``; for ``R > 1`` each token pair's ``(R, R)`` block summed (a heatmap)."""
        steps = _Steps.of(self, mask)
        rank, count = self.rank, self.q.shape[-3]
        blocks = steps.flat.weights(None).unflatten(-1, (count, rank)).unflatten(-3, (count, rank)).sum((-3, -1))
        # the kernels' column t writes token t - 1; the call's first column is the token before it
        weights = F.pad(blocks[..., 1:], (0, 1))
        weights = weights + torch.diag_embed(steps.own.sum((-2, -1)))
        weights = weights + torch.diag_embed(steps.unseen[..., 1:, :, :].sum((-2, -1)), offset=-1)
        return weights if mask is None else weights * mask[..., None]


@dataclass(frozen=True)
class _Steps:
    """One call's ``T R`` kernel steps (the delayed writes); each token's two ``(R, R)`` blocks of
    scores side by side, ``(B, H, T, R, 2 R)``: the previous token's delayed writes after the read's
    rank and the token's own ``Q_t K_t^T``, which read ``pair`` ``(B, H, T, 2 R, dv)``: the previous
    token's values and the token's own times ``gamma_t``; the (masked) ``gamma`` ``(B, H, T)``; and
    the last token's own write ``gamma_T W_T``."""

    flat: Recurrence
    blocks: Tensor
    pair: Tensor
    gamma: Tensor
    last_write: Tensor

    @classmethod
    def of(cls, recurrence: TrapezoidRecurrence, mask: Tensor | None) -> _Steps:
        gamma, shift, log_decay, keys = recurrence.gamma, recurrence.shift, recurrence.log_decay, recurrence.k
        if mask is not None:
            gamma, shift, log_decay = gamma * mask, shift * mask, log_decay * mask
            keys = keys * F.pad(mask, (1, 0), value=True)[..., None, None]
        before = F.pad(gamma[..., :-1], (1, 0))  # gamma_{t-1}; 0 for the token before the call (in the state)
        scale = log_decay.exp() * (before + shift)
        delayed = keys[..., :-1, :, :] * scale[..., None, None]  # (B, H, T, R, dk)
        previous, values = recurrence.v[..., :-1, :, :], recurrence.v[..., 1:, :, :]
        rank = recurrence.rank
        first = torch.zeros(rank, dtype=log_decay.dtype, device=log_decay.device)
        first[0] = 1.0  # the decay at each token's first write
        flat = Recurrence(
            recurrence.q.flatten(-3, -2),
            delayed.flatten(-3, -2),
            previous.flatten(-3, -2),
            (log_decay[..., None] * first).flatten(-2).unsqueeze(-1),
        )
        later = torch.ones(rank, 2 * rank, dtype=log_decay.dtype, device=log_decay.device).triu(1)  # r' > r, own
        blocks = recurrence.q @ torch.cat([delayed, keys[..., 1:, :, :]], dim=-2).mT * later
        own_values = values * gamma[..., None, None]
        last_write = keys[..., -1, :, :].mT @ own_values[..., -1, :, :]
        return cls(flat, blocks, torch.cat([previous, own_values], dim=-2), gamma, last_write)

    @property
    def unseen(self) -> Tensor:
        """The ``(B, H, T, R, R)`` scores of the previous token's delayed writes the kernels' read lacks."""
        return self.blocks[..., : self.blocks.shape[-2]]

    @property
    def own(self) -> Tensor:
        """The ``(B, H, T, R, R)`` scores of each token's own write, ``gamma_t Q_t K_t^T``."""
        return self.blocks[..., self.blocks.shape[-2] :] * self.gamma[..., None, None]

    def read(self, output: Tensor, mask: Tensor | None) -> Tensor:
        """The kernels' reads ``(B, H, T R, dv)`` with each token's blocks, as ``(B, H, T, R * dv)``;
        zero at a padded token."""
        reads = output.unflatten(-2, self.blocks.shape[-3:-1]) + self.blocks @ self.pair
        return (reads if mask is None else reads * mask[..., None, None]).flatten(-2)

    def final(self, delayed: Tensor) -> Tensor:
        """``S_T = Z_T + gamma_T W_T`` from the kernels' ``Z_T``."""
        return delayed + self.last_write
