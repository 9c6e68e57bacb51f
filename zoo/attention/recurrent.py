"""What the causal linear recurrences share: retention, GLA, DeltaNet, Gated DeltaNet and Mamba-2.

Each of them keeps, per head, a state ``S`` of shape ``(dk, dv)`` that every step decays and writes
and every query reads, ``o_t = q_t S_t`` (:mod:`zoo.attention.kernels`, whose row-vector
orientation this follows). A family says two things (:class:`RecurrentAttention`):

* :meth:`~RecurrentAttention.prepare`: what its recurrence reads at each step, a
  :class:`Recurrence`: queries, keys and values from the layer's per-head projections (scaled,
  activated, normalized as the paper does) and its gates from the layer's input: a decay per step
  (a scalar, or one per key dimension) and, for the delta rule, a write strength ``beta``;
* :meth:`~RecurrentAttention.finish`: what it does to the output (a per-head norm, an output gate).

This base runs the recurrence in one of three forms, equal up to rounding (``mode``):

* ``parallel``: the whole ``(T, T)`` matrix of decayed scores at once (quadratic; the fastest on
  short inputs, and the form that gives weights for heatmaps);
* ``chunkwise``: quadratic within chunks of ``chunk_size`` steps, a state passed between them
  (``O(T * chunk_size)``; the form for training and for a prompt);
* ``recurrent``: one step at a time from a state (the form for decoding);
* ``auto`` (the default): ``parallel`` up to ``chunk_size`` steps, else ``chunkwise``; a single
  step, ``recurrent``. ``need_weights=True`` takes the parallel form.

Decays are summed in log space within a chunk only, and only non-positive differences are
exponentiated, so 16k-token inputs neither overflow nor underflow in float32 (the kernels'
docstrings say how). Half-precision inputs run the recurrence in float32, outside autocast: the
state sums a whole sequence.

Masks: a key padding mask only (``key_column`` of the merged mask): a padded step writes nothing,
decays nothing and reads nothing (its recurrence output is zero), which keeps left-padded prompts
exact. A mask that differs per query is refused in one line (``supports_query_mask = False``).

Decoding (:meth:`RecurrentAttention.attend_cached`): the layer's cache is a
:class:`~zoo.attention.cache.StateCache` holding the ``(B, H, dk, dv)`` state after the positions
seen, whatever their number. A prompt with no cache runs the form ``mode`` picks for its length
(chunkwise past ``chunk_size``); each later token one recurrent step from the state.

Capabilities: causal only (``supports_bidirectional = False``: encoders and cross-attention
refuse these variants in one line naming those that work); one sequence, queries and keys of the
same length; key padding; weights (the parallel form's decayed scores, which multiply the
recurrence's values: not a distribution); no positional bias (there are no scores to add it to);
rotary schemes (rotating queries and keys before a linear recurrence is well defined, and the
state keeps keys rotated at their positions, as a key cache does). No dropout on weights: the
chunkwise and recurrent forms never form them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.base import Attention, AttentionOutput, IncompatibleAttentionError, PositionBias
from zoo.attention.cache import LayerCache, StateCache
from zoo.attention.kernels import (
    decay_chunkwise,
    decay_recurrent,
    decay_weights,
    delta_rule_chunkwise,
    delta_rule_recurrent,
    delta_rule_weights,
)
from zoo.attention.masking import key_column

__all__ = ["Mode", "Recurrence", "RecurrentAttention", "HeadNorm", "StepDecay"]

Mode = Literal["auto", "parallel", "chunkwise", "recurrent"]
"""Which form runs the recurrence (see :mod:`zoo.attention.recurrent`)."""


@dataclass(frozen=True)
class Recurrence:
    """What a family's recurrence reads at each step, per head (``(B, H, T, ...)``).

    Without ``beta``, a decaying state: ``S_t = Diag(exp(log_decay_t)) S_{t-1} + k_t^T v_t``, with
    ``log_decay`` ``(B, H, T, 1)`` (a scalar decay) or ``(B, H, T, dk)`` (one per key dimension),
    or anything that broadcasts to it. With ``beta`` ``(B, H, T)``, the delta rule:
    ``S_t = (I - beta_t k_t^T k_t) a_t S_{t-1} + beta_t k_t^T v_t``, ``log_decay`` ``(B, H, T)`` or
    None (no decay). ``skip`` is added to the recurrence's output (Mamba-2's ``D x``).
    """

    q: Tensor
    k: Tensor
    v: Tensor
    log_decay: Tensor | None
    beta: Tensor | None = None
    skip: Tensor | None = None

    def chunkwise(self, chunk_size: int | None, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The chunkwise form (``chunk_size=None``: the parallel form) from ``state``: the output and final state."""
        if self.beta is None:
            return decay_chunkwise(
                self.q, self.k, self.v, self.log_decay, chunk_size=chunk_size, initial_state=state, mask=mask
            )
        return delta_rule_chunkwise(
            self.q, self.k, self.v, self.beta, self.log_decay, chunk_size=chunk_size, initial_state=state, mask=mask
        )

    def recurrent(self, state: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """The recurrent form, one step at a time from ``state``: the output and final state."""
        if self.beta is None:
            return decay_recurrent(self.q, self.k, self.v, self.log_decay, state=state, mask=mask)
        return delta_rule_recurrent(self.q, self.k, self.v, self.beta, self.log_decay, state=state, mask=mask)

    def weights(self, mask: Tensor | None) -> Tensor:
        """The parallel form's ``(B, H, T, T)`` weights: the output from a zero state is ``weights @ v``."""
        if self.beta is None:
            return decay_weights(self.q, self.k, self.log_decay, mask=mask)
        return delta_rule_weights(self.q, self.k, self.beta, self.log_decay, mask=mask)


class RecurrentAttention(Attention):
    """Base class of the causal linear recurrences (see the module docstring).

    A subclass implements :meth:`prepare` (and :meth:`finish` if the paper changes the output).
    ``reads_layer_input`` is True here, since gates come from the layer's input; a recurrence
    that reads none sets it False and also runs on its own, as a scoring attention.

    Args:
        embed_dim: The layer's width: what gates are projected from (filled by the layer).
        num_heads: The layer's heads (filled by the layer); must divide ``embed_dim``.
        mode: ``auto``, ``parallel``, ``chunkwise`` or ``recurrent``: the form of training and
            full passes (and of a prompt when decoding).
        chunk_size: Steps per chunk of the chunkwise form; ``auto`` runs the parallel form up to it.
    """

    supports_causal = True
    supports_bidirectional = False
    supports_cross_attention = False
    supports_padding_mask = True
    supports_query_mask = False
    supports_weights = True
    supports_position_bias = False
    supports_rotary = True
    reads_layer_input = True

    def __init__(self, embed_dim: int, num_heads: int, *, mode: Mode = "auto", chunk_size: int = 64) -> None:
        super().__init__(0.0)
        self.require_positive(embed_dim=embed_dim, num_heads=num_heads, chunk_size=chunk_size)
        if embed_dim % num_heads:
            raise ValueError(
                f"{type(self).__name__}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})."
            )
        if mode not in get_args(Mode):
            raise ValueError(f"{type(self).__name__}: mode must be one of {', '.join(get_args(Mode))}; got {mode!r}.")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.mode, self.chunk_size = mode, chunk_size

    # -- what a family defines ----------------------------------------------------------------------

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor | None) -> Recurrence:
        """The recurrence's inputs from the per-head queries, keys and values ``(B, H, T, d)`` (in
        the computation's dtype, float32 at least) and the layer's input ``(B, T, embed_dim)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement prepare().")

    def finish(self, output: Tensor, layer_input: Tensor | None) -> Tensor:
        """The family's output ``(B, H, T, dv)`` from the recurrence's (none here: as it is)."""
        return output

    # -- shared ---------------------------------------------------------------------------------------

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, T, H * w)`` -> ``(B, H, T, w)``: a projection of the layer's input, per head."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(-3, -2)

    def check_layout(self, queries: Tensor, keys: Tensor, is_causal: bool) -> None:
        """A recurrence runs over one sequence: as many queries as keys (decoding goes through
        :meth:`attend_cached`, which keeps the state)."""
        if queries.shape[-2] != keys.shape[-2]:
            raise IncompatibleAttentionError(
                f"{type(self).__name__} is a recurrence over one sequence: it needs as many queries as keys; got "
                f"{queries.shape[-2]} and {keys.shape[-2]}. Decode new positions through attend_cached, which keeps the state."
            )

    def attend(
        self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None,
        *, is_causal: bool = False, need_weights: bool = False, layer_input: Tensor | None = None,
    ) -> AttentionOutput:  # fmt: skip
        """The whole sequence from a zero state, in the form ``mode`` picks (parallel with weights)."""
        steps = _key_steps(mask, queries)
        recurrence = self._prepare(queries, keys, values, layer_input)
        form = "parallel" if need_weights else self._form(queries.shape[-2])
        output, _ = self._run(recurrence, form, None, steps)
        weights = None
        if need_weights:
            with torch.autocast(queries.device.type, enabled=False):
                weights = recurrence.weights(steps).to(values.dtype)
        return AttentionOutput(self._finish(output, recurrence, steps, layer_input, values.dtype), weights)

    def attend_cached(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        cache: LayerCache | None,
        mask: Tensor | None = None,
        *,
        position_bias: PositionBias | None = None,
        layer_input: Tensor | None = None,
    ) -> tuple[Tensor, LayerCache]:
        """New positions after those in ``cache`` (a :class:`~zoo.attention.cache.StateCache`, or
        None before the first): the output ``(B, H, Lq, dv)`` and the state after them.

        ``mask`` (True = attend) broadcasts to ``(B, H, Lq, L)`` over every position seen; the
        state holds the earlier ones already, so only its last ``Lq`` key columns are read.
        """
        self.check_request(mask, is_causal=True, position_bias=position_bias, layer_input=layer_input)
        if cache is not None and not isinstance(cache, StateCache):
            raise TypeError(f"{type(self).__name__} continues a StateCache; got a {type(cache).__name__}.")
        keys, values = self._expand_groups(queries, keys, values)
        count = queries.shape[-2]
        steps = _key_steps(None if mask is None else mask[..., -count:], queries)
        recurrence = self._prepare(queries, keys, values, layer_input)
        output, state = self._run(recurrence, self._form(count), None if cache is None else cache.state, steps)
        length = count if cache is None else cache.length + count
        return self._finish(output, recurrence, steps, layer_input, values.dtype), StateCache(state, length)

    def _form(self, length: int) -> Mode:
        """The form for ``length`` steps: ``mode``, or for ``auto`` the fastest (see the module docstring)."""
        if self.mode != "auto":
            return self.mode
        if length == 1:
            return "recurrent"
        return "parallel" if length <= self.chunk_size else "chunkwise"

    def _prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor | None) -> Recurrence:
        """:meth:`prepare` on queries, keys and values in float32 at least (the state's precision)."""
        dtype = torch.promote_types(queries.dtype, torch.float32)
        return self.prepare(queries.to(dtype), keys.to(dtype), values.to(dtype), layer_input)

    def _run(
        self, recurrence: Recurrence, form: Mode, state: Tensor | None, steps: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The recurrence in ``form`` from ``state`` (zeros if None), outside autocast."""
        with torch.autocast(recurrence.q.device.type, enabled=False):
            if form == "recurrent":
                return recurrence.recurrent(state, steps)
            return recurrence.chunkwise(None if form == "parallel" else self.chunk_size, state, steps)

    def _finish(
        self,
        output: Tensor,
        recurrence: Recurrence,
        steps: Tensor | None,
        layer_input: Tensor | None,
        dtype: torch.dtype,
    ) -> Tensor:
        """The skip connection (none at a padded step, which reads nothing) and :meth:`finish`, in
        the computation's dtype; the result in ``dtype``."""
        if recurrence.skip is not None:
            skip = recurrence.skip
            output = output + (skip if steps is None else torch.where(steps.unsqueeze(-1), skip, skip.new_zeros(())))
        return self.finish(output, layer_input).to(dtype)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, mode={self.mode!r}, chunk_size={self.chunk_size}"
        )


def _key_steps(mask: Tensor | None, queries: Tensor) -> Tensor | None:
    """A key padding mask (broadcastable to ``(*batch, Lq, T)``, the same for every query) as the
    kernels take it: ``(*batch, T)`` with as many dimensions, True at real tokens; None for none."""
    if mask is None:
        return None
    steps = key_column(mask).squeeze(-1)
    return steps.reshape((1,) * (queries.dim() - 1 - steps.dim()) + tuple(steps.shape))


class HeadNorm(nn.Module):
    """RMSNorm over each head's features with a learned scale, then, when a gate is given, times
    ``silu(gate)``: the per-head output norm of RetNet (its GroupNorm), GLA and the DeltaNets,
    fused with the output gate as flash-linear-attention's ``FusedRMSNormGated`` computes it.

    Args:
        head_dim: Features per head.
        eps: Added to the mean square.
    """

    def __init__(self, head_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(head_dim))
        self.eps = eps

    def forward(self, x: Tensor, gate: Tensor | None = None) -> Tensor:
        """``x`` ``(..., head_dim)`` normalized (in its dtype), times ``silu(gate)`` if given."""
        normalized = F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)
        return normalized if gate is None else normalized * F.silu(gate.to(x.dtype))


class StepDecay(nn.Module):
    """Mamba-2's data-dependent decay: a step size per head and token from the layer's input,
    ``dt_t = softplus(x_t w + dt_bias)``, and a decay ``a_t = exp(-dt_t A)`` with ``A = exp(A_log) > 0``
    learned per head (Mamba-2's ``A_h``; Gated DeltaNet's ``alpha_t``).

    Initialized as Mamba-2 and flash-linear-attention do: ``A`` uniform in ``a_range``, ``dt_bias``
    the inverse softplus of step sizes log-uniform in ``dt_range`` (at least ``dt_floor``), so
    that the first steps are small and the heads cover several time scales.

    Args:
        embed_dim: The layer's width.
        num_heads: Heads, one decay each.
        a_range: Where ``A`` starts, uniform (Mamba-2: ``(1, 16)``; Gated DeltaNet: ``(0, 16)``).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        a_range: tuple[float, float],
        dt_range: tuple[float, float] = (1e-3, 1e-1),
        dt_floor: float = 1e-4,
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(embed_dim, num_heads, bias=False)
        low, high = (math.log(bound) for bound in dt_range)
        dt = (torch.rand(num_heads) * (high - low) + low).exp().clamp(min=dt_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(*a_range).log())

    def forward(self, layer_input: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The step sizes and log decays ``log a_t = -dt_t A``, both ``(B, H, T)`` in ``dtype``."""
        dt = F.softplus(self.proj(layer_input).to(dtype) + self.dt_bias.to(dtype)).transpose(-1, -2)
        return dt, -dt * self.A_log.to(dtype).exp().unsqueeze(-1)
