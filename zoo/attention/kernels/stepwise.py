"""The recurrent form's loop, shared by the linear recurrences: one step at a time from a state.

Each kernel's recurrent form (the form for decoding, and the reference its chunkwise form is
tested against) is this loop with its own transition ``S_t = update(S_{t-1}, ...)``; every one
reads its state the same way, ``o_t = q_t S_t``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from zoo.attention.kernels.chunking import initial_or_zeros

__all__ = ["step_by_step"]


def step_by_step(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Tensor | None,
    update: Callable[..., Tensor],
    *others: Sequence[Tensor | None],
) -> tuple[Tensor, Tensor]:
    """From ``state`` (zeros if None), for each step ``t``: ``S_t = update(S_{t-1}, k_t, v_t,
    *others_t)``, then ``o_t = q_t S_t``.

    Args:
        q, k, v: ``(*batch, T, d)`` each, ``T >= 1``.
        state: ``(*batch, dk, dv)``, a decoder's cache, or None.
        update: The step's transition, returning the new state.
        others: More per-step inputs, each a sequence of ``T`` entries (``x.unbind(-2)``).

    Returns:
        ``(output, final_state)``: ``(*batch, T, dv)`` and ``(*batch, dk, dv)``, whatever ``T``.
    """
    state = initial_or_zeros(state, k, v)
    outputs = []
    for q_t, k_t, v_t, *others_t in zip(q.unbind(-2), k.unbind(-2), v.unbind(-2), *others):
        state = update(state, k_t, v_t, *others_t)
        outputs.append((q_t.unsqueeze(-2) @ state).squeeze(-2))
    return torch.stack(outputs, dim=-2), state
