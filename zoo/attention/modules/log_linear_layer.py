"""What a log-linear layer adds to the recurrent family it is built on (Guo et al., 2025, "Log-Linear
Attention", arXiv 2506.04761): the level weights, the Fenwick tree of states it decodes from, and
the decoding itself.

* :class:`LevelWeights`: ``lambda_t^(l) = softplus(L_{h,l} (x_t W)_{h,l})`` per token, head and level,
  from a projection of the layer's input and a learned scale per head and level (``L``, starting
  at one), as flash-linear-attention's ``LogLinearMamba2`` forms them (its ``dl`` slice of
  ``in_proj``, and ``L``);
* :class:`LevelCache`: what a decoder keeps: the level states ``(B, H, levels, dk, dv)``, each row's
  count of real tokens (the Fenwick counter) and the convolutions' windows. Its size grows as the
  logarithm of the positions seen, so the layers declare ``fixed_state = False``;
* :class:`LogLinearLayer`: a mixin over a :class:`~zoo.attention.modules.recurrent.RecurrentLayer`
  family: its ``prepare`` turns the family's :class:`~zoo.attention.modules.recurrence.Recurrence`
  (a scalar decay, or the gated delta rule) into a
  :class:`~zoo.attention.modules.log_linear_recurrence.LogLinearRecurrence` with the level weights, and
  its ``attend_cached`` continues a :class:`LevelCache`. flash-linear-attention's kernels do not run
  it (its log-linear kernel is another call, for Mamba-2 only, with fixed chunks and levels).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.fenwick import level_count
from zoo.attention.modules.continuation import continued_request
from zoo.attention.modules.log_linear_recurrence import LogLinearRecurrence
from zoo.attention.modules.recurrence import Recurrence
from zoo.attention.modules.recurrent import RecurrentLayer

__all__ = ["NUM_LEVELS", "LevelCache", "LevelWeights", "LogLinearLayer"]

NUM_LEVELS = level_count(2**14)
"""Level weights by default: the 15 that 16k positions reach (flash-linear-attention's ``MAX_NUM_LEVELS``)."""


class LevelWeights(nn.Module):
    """``lambda_t^(l) = softplus(L_{h,l} (x_t W)_{h,l}) >= 0`` ``(B, H, T, num_levels)`` from the
    layer's input ``(B, T, embed_dim)``: a projection ``embed_dim -> num_heads * num_levels`` (no
    bias) and a scale ``L`` ``(num_heads, num_levels)`` starting at one."""

    def __init__(self, embed_dim: int, num_heads: int, num_levels: int) -> None:
        super().__init__()
        self.num_heads, self.num_levels = num_heads, num_levels
        self.proj = nn.Linear(embed_dim, num_heads * num_levels, bias=False)
        self.scale = nn.Parameter(torch.ones(num_heads, num_levels))

    def forward(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor:
        projected = self.proj(layer_input).unflatten(-1, (self.num_heads, self.num_levels)).to(dtype)
        return F.softplus(self.scale.to(dtype) * projected).transpose(1, 2)


@dataclass(frozen=True)
class LevelCache:
    """A log-linear layer's decoding state after ``length`` positions: the Fenwick tree's level
    states ``(B, H, levels, dk, dv)`` (``levels = ceil(log2 t) + 1`` after ``t`` real tokens), each
    row's real tokens so far ``counts`` ``(B, 1)``, and the convolutions' windows ``extra``."""

    states: Tensor
    counts: Tensor
    length: int
    extra: tuple[Tensor, ...] = ()

    @property
    def levels(self) -> int:
        """The level states held."""
        return self.states.shape[-3]

    @property
    def nbytes(self) -> int:
        return self.states.nbytes + self.counts.nbytes + sum(t.nbytes for t in self.extra)

    def select(self, index: Tensor) -> LevelCache:
        picked = tuple(t.index_select(0, index) for t in self.extra)
        return LevelCache(self.states.index_select(0, index), self.counts.index_select(0, index), self.length, picked)


class LogLinearLayer(RecurrentLayer):
    """The log-linear form of the recurrent family it precedes in a class's bases (see the module
    docstring): ``class LogLinearMamba2Attention(LogLinearLayer, Mamba2Attention)``.

    Args:
        embed_dim: The block's width.
        num_heads: Heads.
        num_levels: Level weights per token and head: inputs up to ``2 ** (num_levels - 1)``
            positions (longer ones are refused in one line).
        options: The family's (``chunk_size`` a power of two, so chunks align with the tree).
    """

    fixed_state = False
    #: its weights are decayed scores times level weights, not a distribution (the recurrent
    #: families' are checked so through their StateCache; this cache is another kind)
    normalized_weights = False
    fla_refusal = "flash-linear-attention runs log-linear attention in another kernel, not its chunk kernels"
    cost = "L log L"
    #: the tree over the chunks handles ``log2 N`` level states a chunk (the delta rule's in a scan,
    #: each through a ``(dk, dk)`` transition), so fewer, longer chunks are the cheaper trade on the
    #: CPU: log-linear Gated DeltaNet's kernel (32-wide heads, forward and backward, one thread) took
    #: 0.5-0.7x the time with chunks of 64 as with 16 at 2k-8k tokens
    cpu_chunk_size = 64

    def __init__(self, embed_dim: int, num_heads: int, *, num_levels: int = NUM_LEVELS, **options: Any) -> None:
        super().__init__(embed_dim, num_heads, **options)
        self.require_positive(num_levels=num_levels)
        chunk = options.get("chunk_size")
        if chunk is not None and chunk & (chunk - 1):
            raise ValueError(
                f"{type(self).__name__}: chunk_size must be a power of two (its chunks align with the Fenwick "
                f"tree); got {chunk}: use {1 << (chunk.bit_length() - 1)} or {1 << chunk.bit_length()}."
            )
        self.num_levels = num_levels
        self.levels = LevelWeights(embed_dim, num_heads, num_levels)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> LogLinearRecurrence:
        base: Recurrence = super().prepare(queries, keys, values, layer_input)
        assert base.log_decay is not None and base.negative_decay is None
        q, k = base.q, base.k
        if q.shape[-3] != base.v.shape[-3]:  # queries and keys shared by a group of heads: one per head
            q, k = (x.repeat_interleave(base.groups, dim=-3) for x in (q, k))
        log_decay = base.log_decay.squeeze(-1) if base.log_decay.dim() == q.dim() else base.log_decay
        weights = self.levels(layer_input, queries.dtype)
        return LogLinearRecurrence(q, k, base.v, weights, log_decay, base.beta, base.skip)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (a :class:`LevelCache`,
        or None before the first): the output and the tree after them. A prompt runs the form
        ``mode`` picks; positions after a cache, the recurrent form."""
        cache, context = continued_request(self, x, cache, LevelCache, context)
        count, offset = x.shape[1], 0 if cache is None else cache.length
        steps = context.key_padding
        q, k, v, layer_input, windows = self._project(x, context, cache)  # reads its length and windows (extra)
        recurrence = self._prepare(q, k, v, layer_input)
        assert isinstance(recurrence, LogLinearRecurrence)
        seen = x.new_zeros(x.shape[0], 1, dtype=torch.long) if cache is None else cache.counts
        recurrence = replace(recurrence, start=None if cache is None else seen, final_state=True)
        output, states = self._run(
            recurrence, self._form(count, x.device), None if cache is None else cache.states, steps
        )
        counts = seen + (count if steps is None else steps.long().sum(-1))
        output = self._output(output, recurrence, steps, layer_input)
        return output, LevelCache(states, counts, offset + count, windows)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_levels={self.num_levels}"
