"""Gated Slot Attention's recurrence (Zhang et al., 2024, arXiv 2409.07146): two gated linear
attention passes over ``m`` memory slots with a softmax between them, each on the decay kernels
(:mod:`zoo.attention.kernels.decay`).

Per head, with a forget gate ``alpha_t`` in ``(0, 1)^m`` per slot and the slots written at the rate
``s_t = 1 - alpha_t``, the keys ``K~`` ``(dk, m)`` and values ``V~`` ``(m, dv)`` of the slots::

    K~_t = K~_{t-1} Diag(alpha_t) + k_t^T s_t             (which keys each slot holds)
    V~_t = Diag(alpha_t) V~_{t-1} + s_t^T v_t             (which values)
    o_t = softmax(q_t K~_t) V~_t                          (softmax over the m slots)

The second pass is a decaying state with a decay per key dimension (the slots as keys, ``s_t`` as
the key, ``p_t = softmax(q_t K~_t)`` as the query): the kernels as they are. The first decays its
state's columns (the slots) rather than its rows; column ``i`` of ``K~`` is a state of its own with a
scalar decay ``alpha_ti``, written with the key ``k_t`` and the value ``s_ti`` and read by ``q_t``, so
the pass is ``m`` scalar-decay recurrences that share their queries and keys: the kernels' grouped
heads (one query and key head over ``m`` "heads", a value of width 1 each), which form the scores
``q_i . k_j`` once for all slots. The softmax is per token, so each form (parallel, chunkwise,
recurrent) runs both passes in that form, and they agree to rounding.

The state of a head is both passes' at once, ``[K~^T, V~]`` ``(m, dk + dv)``; a key padding mask makes
a padded token an identity step of both passes that reads nothing. This follows
flash-linear-attention's ``fla/ops/gsa/naive.py`` (``naive_recurrent_gsa``), its gates given (the
layer's ``s = 1 - alpha``); its queries are scaled by the caller (fla's layer: not at all).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.attention.kernels import decay_chunkwise, decay_recurrent, decay_weights

__all__ = ["SlotRecurrence"]


@dataclass(frozen=True)
class SlotRecurrence:
    """Gated Slot Attention's two passes (see the module docstring), per head: queries ``q`` and
    keys ``k`` ``(B, H, T, dk)``, values ``v`` ``(B, H, T, dv)``, the forget gates' logs ``log_forget``
    ``(B, H, T, m)``; the state ``(B, H, m, dk + dv)``."""

    q: Tensor
    k: Tensor
    v: Tensor
    log_forget: Tensor
    skip: Tensor | None = None

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form (``chunk_size=None``: the parallel form) of both passes from ``state``."""
        keys, values = self._split(state)
        args = self._slot_pass(mask)
        scores, keys = decay_chunkwise(*args, chunk_size=chunk_size, initial_state=keys, mask=self._slot_mask(mask))
        read = self._read(scores)
        output, values = decay_chunkwise(
            read, self.written, self.v, self.log_forget, chunk_size=chunk_size, initial_state=values, mask=mask
        )
        return output, self._joined(keys, values)

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form of both passes, one step at a time from ``state``."""
        keys, values = self._split(state)
        scores, keys = decay_recurrent(*self._slot_pass(mask), state=keys, mask=self._slot_mask(mask))
        output, values = decay_recurrent(
            self._read(scores), self.written, self.v, self.log_forget, state=values, mask=mask
        )
        return output, self._joined(keys, values)

    def weights(self, mask: Tensor | None) -> Tensor:
        """The second pass's ``(B, H, T, T)`` weights, its queries the first pass's slot reads: the
        output from a zero state is ``weights @ v``."""
        scores, _ = decay_chunkwise(*self._slot_pass(mask), chunk_size=None, mask=self._slot_mask(mask))
        return decay_weights(self._read(scores), self.written, self.log_forget, mask=mask)

    @property
    def written(self) -> Tensor:
        """How much each slot takes of the token, ``s_t = 1 - alpha_t`` ``(B, H, T, m)``."""
        return -torch.expm1(self.log_forget)

    @property
    def slots(self) -> int:
        return self.log_forget.shape[-1]

    def _slot_pass(self, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The first pass as ``m`` scalar-decay states per head: queries and keys ``(B, H, 1, T, dk)``
        shared by the slots, values ``(B, H, m, T, 1)`` and log decays ``(B, H, m, T, 1)``."""
        per_slot = lambda x: x.transpose(-1, -2).unsqueeze(-1)  # noqa: E731  (B, H, T, m) -> (B, H, m, T, 1)
        return self.q.unsqueeze(-3), self.k.unsqueeze(-3), per_slot(self.written), per_slot(self.log_forget)

    @staticmethod
    def _slot_mask(mask: Tensor | None) -> Tensor | None:
        """A key padding mask ``(B, 1 or H, T)`` for the first pass's slot axis."""
        return None if mask is None else mask.unsqueeze(-2)

    @staticmethod
    def _read(scores: Tensor) -> Tensor:
        """``p_t = softmax(q_t K~_t)`` ``(B, H, T, m)`` from the first pass's ``(B, H, m, T, 1)``."""
        return scores.squeeze(-1).transpose(-1, -2).softmax(-1)

    def _split(self, state: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """A state ``(B, H, m, dk + dv)`` as the first pass's ``(B, H, m, dk, 1)`` and the second's ``(B, H, m, dv)``."""
        if state is None:
            return None, None
        width = self.q.shape[-1]
        return state[..., :width].unsqueeze(-1), state[..., width:]

    @staticmethod
    def _joined(keys: Tensor, values: Tensor) -> Tensor:
        """The two passes' final states as one ``(B, H, m, dk + dv)``."""
        return torch.cat([keys.squeeze(-1), values], dim=-1)
