"""Log-linear attention's recurrence as a layer runs it: the three forms of
:class:`~zoo.attention.modules.recurrence.RecurrenceForms` over :mod:`zoo.attention.kernels.log_linear`.

Its state is not one ``(dk, dv)`` matrix but a Fenwick tree of them, ``(B, H, levels, dk, dv)``,
whose level count grows with the positions seen (``ceil(log2 t) + 1``), and whose meaning depends
on how many real tokens came before: the recurrence carries that count (``start``) beside its
inputs, and a decoder's :class:`~zoo.attention.modules.log_linear_layer.LevelCache` holds both.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from zoo.attention.kernels.log_linear import log_linear_chunkwise, log_linear_recurrent, log_linear_weights

__all__ = ["LogLinearRecurrence"]


@dataclass(frozen=True)
class LogLinearRecurrence:
    """What log-linear attention reads, per head: queries and keys ``(B, H, T, dk)``, values
    ``(B, H, T, dv)``, level weights ``(B, H, T, num_levels)``, the scalar ``log_decay`` ``(B, H,
    T)`` and, for the gated delta rule, ``beta`` ``(B, H, T)`` (None: a decaying state, Mamba-2's).

    ``start`` ``(B, 1)``: the real tokens before the first step (None: none, an empty tree).
    ``final_state``: whether the chunkwise and parallel forms return the level states after the last
    step (which cost one pass of the transition per level: a training pass does without them and
    returns no levels).
    """

    q: Tensor
    k: Tensor
    v: Tensor
    level_weights: Tensor
    log_decay: Tensor
    beta: Tensor | None = None
    skip: Tensor | None = None
    start: Tensor | None = None
    final_state: bool = False

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form (``chunk_size=None``: the parallel form) from an empty tree; after
        earlier positions (``state`` or ``start``), the recurrent form, which continues a tree."""
        if state is not None or self.start is not None:
            return self.recurrent(state, mask)
        return log_linear_chunkwise(
            self.q, self.k, self.v, self.level_weights, self.log_decay, self.beta, chunk_size=chunk_size, mask=mask,
            final_state=self.final_state,
        )  # fmt: skip

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form from the level states ``state`` after ``start`` real tokens."""
        return log_linear_recurrent(
            self.q, self.k, self.v, self.level_weights, self.log_decay, self.beta, state=state, start=self.start,
            mask=mask,
        )  # fmt: skip

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights, the decayed scores times the hierarchical mask."""
        return log_linear_weights(self.q, self.k, self.level_weights, self.log_decay, self.beta, mask=mask)
