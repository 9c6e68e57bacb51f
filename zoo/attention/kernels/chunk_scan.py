"""The pass between chunks of a chunkwise recurrence, as one autograd function with its adjoint.

Every chunkwise form here (:mod:`~zoo.attention.kernels.decay`, :mod:`~zoo.attention.kernels.delta_rule`,
:mod:`~zoo.attention.kernels.dplr`) forms its in-chunk matrices for all chunks at once and ends in
one sequential loop over its ``N`` chunks, carrying a state ``S_n`` ``(dk, dv)``::

    R_n     = U_n + W_n S_n                  (the chunk's values corrected by the state; optional)
    S_{n+1} = D_n * S_n + A_n R_n + E_n

the decay families with ``S_{n+1} = D_n * S_n + E_n`` (``E_n = K_n^T V_n`` decayed to the chunk's
end), the delta rule with ``R_n = U_n - W_n S_n`` and ``A_n = K_n^T``, the generalized delta rule
with all five. ``D_n`` is ``(dk or 1, 1)``: a decay per key dimension or one per head; or absent
(DeltaNet's ``D_n = 1``), which leaves its products out.

Left to autograd, that loop records five to eight nodes a chunk and replays each as several small
kernels; at the CPU's 16-step chunks those per-chunk calls cost about as much as the arithmetic
(``docs/results/speed.md``, the pass between chunks). Here the forward is two or three fused calls a
chunk (``addcmul``, ``baddbmm``) and the backward walks the chunks back once with the adjoint
recurrence::

    dR_n = G^R_n + A_n^T dS_{n+1}
    dS_n = G^S_n + D_n * dS_{n+1} + W_n^T dR_n

(``G`` the gradients reaching the outputs), after which every other gradient is one product over
all chunks: ``dU = dR``, ``dW = dR S_n^T``, ``dA = dS_{n+1} R_n^T``, ``dE = dS_{n+1}`` and
``dD = sum(dS_{n+1} * S_n)`` over what ``D`` broadcasts. flash-linear-attention does the same in
its chunk kernels' hand-written backward passes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

__all__ = ["chunk_scan"]


class _ChunkScan(torch.autograd.Function):
    """The loop on flattened batches: every argument ``(P, N, ...)``, ``initial`` ``(P, dk, dv)``;
    ``decay``, ``update`` and ``values`` may be empty (``numel() == 0``: absent, and ``W``, ``A``
    with ``U``)."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        initial: Tensor,
        decay: Tensor,
        update: Tensor,
        values: Tensor,
        from_state: Tensor,
        written: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        corrected, added, decayed = values.numel() > 0, update.numel() > 0, decay.numel() > 0
        state, entering, reads = initial, [], []
        for n in range(max(t.shape[1] for t in (decay, update, values) if t.numel())):
            entering.append(state)
            if decayed:
                following = torch.addcmul(update[:, n], decay[:, n], state) if added else decay[:, n] * state
            else:
                following = update[:, n] + state if added else state
            if corrected:
                reads.append(torch.baddbmm(values[:, n], from_state[:, n], state))
                if following is state:  # nothing written to a new tensor yet: the product makes one
                    following = torch.baddbmm(state, written[:, n], reads[-1])
                else:
                    following.baddbmm_(written[:, n], reads[-1])
            state = following
        stacked = torch.stack(entering, dim=1)
        read = torch.stack(reads, dim=1) if corrected else values.new_empty(0)
        ctx.save_for_backward(decay, from_state, written, stacked, read)
        ctx.present = (added, corrected, decayed)  # type: ignore[attr-defined]
        return stacked, state, read

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_entering: Tensor, grad_final: Tensor, grad_reads: Tensor) -> tuple[Tensor | None, ...]:
        decay, from_state, written, entering, reads = ctx.saved_tensors
        added, corrected, decayed = ctx.present
        grad, after, read_grads = grad_final, [], []
        for n in reversed(range(entering.shape[1])):
            after.append(grad)
            before = torch.addcmul(grad_entering[:, n], decay[:, n], grad) if decayed else grad_entering[:, n] + grad
            if corrected:
                read_grads.append(torch.baddbmm(grad_reads[:, n], written[:, n].mT, grad))
                before.baddbmm_(from_state[:, n].mT, read_grads[-1])
            grad = before
        needs = ctx.needs_input_grad  # initial, decay, update, values, from_state, written
        grad_after = torch.stack(after[::-1], dim=1) if needs[1] or needs[2] or needs[5] else None  # dS_{n+1}
        grad_decay = None
        if needs[1]:  # sum(dS_{n+1} * S_n) as one batched dot product, without the product's temporary
            if decay.shape[-2] == 1:
                grad_decay = grad_after.flatten(-2).unsqueeze(-2) @ entering.flatten(-2).unsqueeze(-1)
            else:
                grad_decay = (grad_after.unsqueeze(-2) @ entering.unsqueeze(-1)).squeeze(-1)
        grads = [grad, grad_decay, grad_after if added and needs[2] else None, None, None, None]
        if corrected:
            grad_values = torch.stack(read_grads[::-1], dim=1)
            grads[3:] = [
                grad_values,
                grad_values @ entering.mT if needs[4] else None,
                grad_after @ reads.mT if needs[5] else None,
            ]
        return tuple(grads)


def chunk_scan(
    initial: Tensor,
    decay: Tensor | None,
    update: Tensor | None = None,
    *,
    values: Tensor | None = None,
    from_state: Tensor | None = None,
    written: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Run ``R_n = U_n + W_n S_n``, ``S_{n+1} = D_n * S_n + A_n R_n + E_n`` over the chunks ``n``.

    Args:
        initial: ``S_0``, ``(*batch, dk, dv)``.
        decay: ``D``, ``(*batch, N, dk or 1, 1)``, each chunk's total decay; None: no decay (``D = 1``).
        update: ``E``, ``(*batch, N, dk, dv)``, or None (zero).
        values, from_state, written: ``U`` ``(*batch, N, c, dv)``, ``W`` ``(*batch, N, c, dk)`` and
            ``A`` ``(*batch, N, dk, c)``, all three or none (no ``R``).

    Returns:
        The state entering each chunk ``(*batch, N, dk, dv)``, the final state ``(*batch, dk, dv)``
        and ``R`` ``(*batch, N, c, dv)`` (None without ``values``).
    """
    corrected = values is not None
    if corrected != (from_state is not None) or corrected != (written is not None):
        raise ValueError("chunk_scan takes values, from_state and written together, or none of them.")
    if decay is None and update is None and not corrected:
        raise ValueError("chunk_scan needs a decay, an update or values: with none the state never changes.")
    operands = [update, values, from_state, written]
    batch = torch.broadcast_shapes(initial.shape[:-2], *(t.shape[:-3] for t in [decay, *operands] if t is not None))

    def flat(t: Tensor | None, tail: int) -> Tensor:
        if t is None:
            return initial.new_empty(0)
        return t.broadcast_to(*batch, *t.shape[-tail:]).reshape(-1, *t.shape[-tail:])

    entering, final, reads = _ChunkScan.apply(
        flat(initial, 2), flat(decay, 3), flat(update, 3), flat(values, 3), flat(from_state, 3), flat(written, 3)
    )
    return entering.unflatten(0, batch), final.unflatten(0, batch), reads.unflatten(0, batch) if corrected else None
