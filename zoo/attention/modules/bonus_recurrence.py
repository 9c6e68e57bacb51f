"""RWKV-6's recurrence: a decay per key dimension, a read of the state before the current token's
write and decay, and a "bonus" ``u`` for the current token, on the decay kernels
(:mod:`zoo.attention.kernels.decay`).

Per head, with a ``(dk, dv)`` state ``S`` and row vectors (Peng et al., 2024, eqs. of ``wkv_t``)::

    o_t = r_t (S_{t-1} + Diag(u) k_t^T v_t)                    the read, before the write
    S_t = Diag(w_t) S_{t-1} + k_t^T v_t                          w_t = exp(log_decay_t) in (0, 1]

so the read at ``t`` sees token ``j < t`` decayed by ``w_{j+1} ... w_{t-1}`` (not by ``w_t``, nor by
its own ``w_j``) and the current token through ``u`` alone.

How the decay kernels run it. The kernels read after the write and the decay of a step,
``S'_t = Diag(a_t) S'_{t-1} + k'_t^T v'_t``, ``o'_t = q_t S'_t``. Delay RWKV-6's writes and decays
by one step, ``k'_t = k_{t-1}``, ``v'_t = v_{t-1}``, ``a_t = w_{t-1}`` (``k'_1 = 0``, ``a_1 = 1``),
and the kernels' state is RWKV-6's one step behind, ``S'_t = S_{t-1}``: so ``o_t = r_t S'_t`` plus
the bonus ``(r_t . (u * k_t)) v_t``, a term of the token alone. The kernels start from the state
given (``S'_0 = S_0``, the first step an identity), and the state a call returns is the kernels'
with the last token's decay and write applied, ``S_T = Diag(w_T) S'_T + k_T^T v_T``. Nothing is
divided by a decay (reading ``S_t`` and undoing ``w_t`` would divide by ``w_t``, which RWKV-6's
``exp(-exp(d))`` takes to zero), and every form (parallel, chunkwise, recurrent) is the kernels'
with the same shift, so they agree to rounding and sum the decays in log space as the kernels do.

flash-linear-attention's ``fla/ops/rwkv6`` writes the same read with an exclusive cumulative sum
of the log decays for the queries (``chunk_naive.py``); the zoo keeps its kernels as they are and
shifts the inputs instead. A key padding mask makes a padded token an identity step (its key and
log decay set to zero before the shift, so it writes and decays nothing) that reads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels import decay_chunkwise, decay_recurrent, decay_weights

__all__ = ["BonusRecurrence"]


@dataclass(frozen=True)
class BonusRecurrence:
    """RWKV-6's recurrence (see the module docstring), per head: receptance ``q``, keys ``k`` and log
    decays ``log_decay`` ``(B, H, T, dk)``, values ``v`` ``(B, H, T, dv)``, the bonus ``bonus``
    broadcastable to ``(B, H, T, dk)`` (``(H, 1, dk)``: one per head and key dimension)."""

    q: Tensor
    k: Tensor
    v: Tensor
    log_decay: Tensor
    bonus: Tensor
    skip: Tensor | None = None

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form (``chunk_size=None``: the parallel form) from ``state``: the output and final state."""
        k, log_decay = self._masked(mask)
        keys, values, decays = self._delayed(k, log_decay)
        output, behind = decay_chunkwise(self.q, keys, values, decays, chunk_size=chunk_size, initial_state=state)
        return self._finish(output, behind, k, log_decay, mask)

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form, one step at a time from ``state``: the output and final state."""
        k, log_decay = self._masked(mask)
        keys, values, decays = self._delayed(k, log_decay)
        output, behind = decay_recurrent(self.q, keys, values, decays, state=state)
        return self._finish(output, behind, k, log_decay, mask)

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights: the output from a zero state is ``weights @ v``
        (the kernels' column ``j + 1`` is token ``j``'s write; the bonus on the diagonal)."""
        k, log_decay = self._masked(mask)
        keys, _, decays = self._delayed(k, log_decay)
        delayed = decay_weights(self.q, keys, decays)
        weights = F.pad(delayed[..., 1:], (0, 1)) + torch.diag_embed(self._bonus_scores(k))
        return weights if mask is None else weights * mask.unsqueeze(-1)

    def _masked(self, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The keys and log decays with a padded token's set to zero (an identity step)."""
        if mask is None:
            return self.k, self.log_decay
        real = mask.unsqueeze(-1).to(self.k.dtype)
        return self.k * real, self.log_decay * real

    def _delayed(self, k: Tensor, log_decay: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Keys, values and log decays one step late, a zero write and no decay first."""
        late = lambda x: F.pad(x[..., :-1, :], (0, 0, 1, 0))  # noqa: E731  x_{t-1}, zeros at t = 1
        return late(k), late(self.v), late(log_decay)

    def _bonus_scores(self, k: Tensor) -> Tensor:
        """``r_t . (u * k_t)`` ``(B, H, T)``: how much the current token's value is read."""
        return (self.q * self.bonus * k).sum(-1)

    def _finish(
        self, output: Tensor, behind: Tensor, k: Tensor, log_decay: Tensor, mask: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The kernels' read plus the bonus (zero at a padded token), and ``S_T`` from the kernels'
        ``S'_T = S_{T-1}``."""
        output = output + self._bonus_scores(k).unsqueeze(-1) * self.v
        if mask is not None:
            output = output * mask.unsqueeze(-1).to(output.dtype)
        last = log_decay[..., -1, :].exp().unsqueeze(-1) * behind
        return output, last + k[..., -1, :].unsqueeze(-1) * self.v[..., -1, :].unsqueeze(-2)
