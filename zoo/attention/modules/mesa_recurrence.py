"""MesaNet's recurrence as a layer runs it: the three forms of :class:`~zoo.attention.modules.recurrence.RecurrenceForms`
over :mod:`zoo.attention.kernels.mesa`.

Its state is not one ``(dk, dv)`` matrix but the two running sums side by side, ``[H | G]``
``(B, H, dk, dk + dv)`` (the key covariance and the key-value products), which a decoder's
:class:`~zoo.attention.contract.cache.StateCache` holds as one tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from zoo.attention.kernels.mesa import mesa_chunkwise, mesa_recurrent, mesa_weights

__all__ = ["MesaRecurrence"]


@dataclass(frozen=True)
class MesaRecurrence:
    """What MesaNet's recurrence reads, per head: queries and keys ``(B, H, T, dk)``, values
    ``(B, H, T, dv)``, ``beta`` and ``log_decay`` ``(B, H, T)``, the ridge ``lam`` ``(H, dk)`` and
    the conjugate-gradient ``steps`` of every token's read."""

    q: Tensor
    k: Tensor
    v: Tensor
    beta: Tensor
    log_decay: Tensor
    lam: Tensor
    steps: int
    skip: Tensor | None = None

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form (``chunk_size=None``: the parallel form) from ``state``."""
        return mesa_chunkwise(
            self.q, self.k, self.v, self.beta, self.log_decay, self.lam, steps=self.steps, chunk_size=chunk_size,
            initial_state=state, mask=mask,
        )  # fmt: skip

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form, every step's ``H_t`` formed, from ``state``."""
        return mesa_recurrent(
            self.q, self.k, self.v, self.beta, self.log_decay, self.lam, steps=self.steps, state=state, mask=mask
        )

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights: the output from a zero state is ``weights @ v``."""
        return mesa_weights(self.q, self.k, self.beta, self.log_decay, self.lam, steps=self.steps, mask=mask)
