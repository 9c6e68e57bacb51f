"""What a recurrent family's recurrence reads at each step, and the three forms that run it.

A family's :meth:`~zoo.attention.modules.recurrent.RecurrentLayer.prepare` returns a :class:`Recurrence`
(a decaying state, or the delta rule with a scalar decay), a :class:`LowRankRecurrence` (a decay
per key dimension and a rank-one correction: Kimi Delta Attention, RWKV-7) or a
:class:`ProductRecurrence` (several delta-rule steps per token: Gated DeltaProduct); the layer runs
it in the form its ``mode`` picks (:mod:`zoo.attention.modules.recurrent`), through the kernels of
:mod:`zoo.attention.kernels`. Each has the same three methods (:class:`RecurrenceForms`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from zoo.attention.kernels import (
    decay_chunkwise,
    decay_recurrent,
    decay_weights,
    delta_product_chunkwise,
    delta_product_recurrent,
    delta_product_weights,
    delta_rule_chunkwise,
    delta_rule_recurrent,
    delta_rule_weights,
    dplr_chunkwise,
    dplr_recurrent,
    dplr_weights,
)
from zoo.attention.kernels.state_scan import decay_scan

__all__ = ["LowRankRecurrence", "ProductRecurrence", "Recurrence", "RecurrenceForms", "ScannedRecurrence"]


class RecurrenceForms(Protocol):
    """What a layer runs: a recurrence's queries (whose device and dtype the computation takes),
    what is added to its output (``skip``), and its three forms, each from a state (zeros if None)
    under a key padding ``mask`` ``(B, 1 or H, T)``, returning the output ``(B, H, T, dv)`` and the
    final state (the weights: ``(B, H, T, T)``)."""

    @property
    def q(self) -> Tensor: ...

    @property
    def skip(self) -> Tensor | None: ...

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]: ...

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]: ...

    def weights(self, mask: Tensor | None) -> Tensor: ...


@dataclass(frozen=True)
class Recurrence:
    """What a family's recurrence reads at each step, per head (``(B, H, T, ...)``).

    Without ``beta``, a decaying state: ``S_t = Diag(exp(log_decay_t)) S_{t-1} + k_t^T v_t``, with
    ``log_decay`` ``(B, H, T, 1)`` (a scalar decay) or ``(B, H, T, dk)`` (one per key dimension),
    or anything that broadcasts to it. With ``beta`` ``(B, H, T)``, the delta rule:
    ``S_t = (I - beta_t k_t^T k_t) a_t S_{t-1} + beta_t k_t^T v_t``, ``log_decay`` ``(B, H, T)`` or
    None (no decay). ``skip`` is added to the recurrence's output (Mamba-2's ``D x``).

    ``negative_decay`` (a decaying state only) makes the decay signed: ``(B, H, T, 1)`` or ``(B, H,
    T, dk)`` as ``log_decay`` (or what broadcasts to it), True where ``a_t = -exp(log_decay_t)``
    (Mamba-2's and Mamba-1's ``negative_eigenvalues``; the decay kernels carry the sign through
    every form, :mod:`zoo.attention.kernels.decay`).

    A decaying state may take queries and keys of fewer heads ``G`` than the values' ``H``, each
    shared by ``H / G`` value heads (Mamba-2's groups of ``B`` and ``C``): the kernels then see a
    group axis and broadcast the shared queries and keys over it, so the scores of a group are
    formed once, not once a head.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    log_decay: Tensor | None
    beta: Tensor | None = None
    skip: Tensor | None = None
    negative_decay: Tensor | None = None

    def __post_init__(self) -> None:
        if self.negative_decay is not None and self.beta is not None:
            raise ValueError(
                "Recurrence: negative_decay signs a decaying state's decay; the delta rule (beta) has none."
            )

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form (``chunk_size=None``: the parallel form) from ``state``: the output and final state."""
        if self.beta is None:
            q, k, v, log_decay, negative, state, mask = self._grouped(state, mask)
            output, final = decay_chunkwise(
                q, k, v, log_decay, chunk_size=chunk_size, initial_state=state, mask=mask, negative=negative
            )
            return self._ungrouped(output), self._ungrouped(final)
        return delta_rule_chunkwise(
            self.q, self.k, self.v, self.beta, self.log_decay, chunk_size=chunk_size, initial_state=state, mask=mask
        )

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form, one step at a time from ``state``: the output and final state."""
        if self.beta is None:
            q, k, v, log_decay, negative, state, mask = self._grouped(state, mask)
            output, final = decay_recurrent(q, k, v, log_decay, state=state, mask=mask, negative=negative)
            return self._ungrouped(output), self._ungrouped(final)
        return delta_rule_recurrent(self.q, self.k, self.v, self.beta, self.log_decay, state=state, mask=mask)

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights: the output from a zero state is ``weights @ v``."""
        if self.beta is None:
            q, k, _, log_decay, negative, _, mask = self._grouped(None, mask)
            return self._ungrouped(decay_weights(q, k, log_decay, mask=mask, negative=negative))
        return delta_rule_weights(self.q, self.k, self.beta, self.log_decay, mask=mask)

    @property
    def groups(self) -> int:
        """Value heads per query and key head (1: one each)."""
        return self.v.shape[-3] // self.q.shape[-3]

    def _grouped(
        self, state: Tensor | None, mask: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]:
        """Queries, keys, values, log decays, their signs, state and mask with the heads split into
        ``(G, H / G)`` (a query and key axis of 1 over each group) where the queries and keys are
        shared; as they are otherwise."""
        assert self.log_decay is not None
        if self.groups == 1:
            return self.q, self.k, self.v, self.log_decay, self.negative_decay, state, mask
        split = (self.q.shape[-3], self.groups)

        def per_head(x: Tensor, axis: int) -> Tensor:  # a head axis of H, or of 1 (broadcast)
            return x.unsqueeze(axis) if x.shape[axis] == 1 else x.unflatten(axis, split)

        return (
            self.q.unsqueeze(-3),
            self.k.unsqueeze(-3),
            self.v.unflatten(-3, split),
            per_head(self.log_decay, -3),
            None if self.negative_decay is None else per_head(self.negative_decay, -3),
            None if state is None else state.unflatten(-3, split),
            None if mask is None else per_head(mask, -2),
        )

    def _ungrouped(self, x: Tensor) -> Tensor:
        """A result with the heads split into groups as ``(B, H, ...)``."""
        return x if self.groups == 1 else x.flatten(-4, -3)


@dataclass(frozen=True)
class ScannedRecurrence(Recurrence):
    """A decaying state of few values per key (Mamba's one a channel) whose chunkwise form is the
    scan of states, :func:`~zoo.attention.kernels.state_scan.decay_scan`: ``c / dv`` times fewer
    products than the chunks' ``(c, c)`` weight blocks. The parallel and recurrent forms are
    :class:`Recurrence`'s; signed decays as theirs, no delta rule."""

    def __post_init__(self) -> None:
        if self.beta is not None:
            raise ValueError("ScannedRecurrence runs a decaying state: no beta (the delta rule).")

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The scan in chunks of ``chunk_size`` steps (``None``: the parallel form, :class:`Recurrence`'s)."""
        if chunk_size is None:
            return super().chunkwise(chunk_size, state, mask)
        q, k, v, log_decay, negative, state, mask = self._grouped(state, mask)
        output, final = decay_scan(
            q, k, v, log_decay, chunk_size=chunk_size, initial_state=state, mask=mask, negative=negative
        )
        return self._ungrouped(output), self._ungrouped(final)


@dataclass(frozen=True)
class LowRankRecurrence:
    """A decay per key dimension and a rank-one correction per step, per head
    (:mod:`~zoo.attention.kernels.dplr`): ``S_t = (Diag(exp(log_decay_t)) + a_t^T b_t) S_{t-1} +
    k_t^T v_t``, with ``q``, ``k``, ``a``, ``b``, ``log_decay`` ``(B, H, T, dk)`` and ``v``
    ``(B, H, T, dv)``."""

    q: Tensor
    k: Tensor
    v: Tensor
    a: Tensor
    b: Tensor
    log_decay: Tensor
    skip: Tensor | None = None

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form (``chunk_size=None``: the parallel form) from ``state``."""
        return dplr_chunkwise(
            self.q, self.k, self.v, self.a, self.b, self.log_decay, chunk_size=chunk_size, initial_state=state,
            mask=mask,
        )  # fmt: skip

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form, one step at a time from ``state``."""
        return dplr_recurrent(self.q, self.k, self.v, self.a, self.b, self.log_decay, state=state, mask=mask)

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights: the output from a zero state is ``weights @ v``."""
        return dplr_weights(self.q, self.k, self.a, self.b, self.log_decay, mask=mask)


@dataclass(frozen=True)
class ProductRecurrence:
    """``n`` delta-rule steps per token (:mod:`~zoo.attention.kernels.delta_product`): queries
    ``(B, H, T, dk)``, keys ``(B, H, T, n, dk)``, values ``(B, H, T, n, dv)``, ``beta``
    ``(B, H, T, n)``, ``log_decay`` ``(B, H, T)`` (at each token's first step) or None."""

    q: Tensor
    k: Tensor
    v: Tensor
    beta: Tensor
    log_decay: Tensor | None = None
    skip: Tensor | None = None

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form over chunks of ``chunk_size`` tokens (None: the parallel form) from ``state``."""
        return delta_product_chunkwise(
            self.q, self.k, self.v, self.beta, self.log_decay, chunk_size=chunk_size, initial_state=state, mask=mask
        )

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form, ``n`` steps a token from ``state``."""
        return delta_product_recurrent(self.q, self.k, self.v, self.beta, self.log_decay, state=state, mask=mask)

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights, summed over each token's ``n`` steps."""
        return delta_product_weights(self.q, self.k, self.beta, self.log_decay, mask=mask)
