"""Performer attention (FAVOR+, Choromanski et al., 2021): softmax attention through positive random features.

What it approximates: softmax attention ``softmax(Q K^T / sqrt(d)) V``. The softmax kernel is an
expectation over Gaussian vectors ``w``::

    exp(q . k) = E_w[ exp(w . q - |q|^2 / 2) * exp(w . k - |k|^2 / 2) ]

so with ``m`` random rows ``w_1..w_m`` stacked in a projection ``W``, the positive features
``phi(x) = exp(W x - |x|^2 / 2) / sqrt(m)`` give an unbiased estimate ``phi(q) . phi(k)`` of the
kernel (queries and keys are first scaled by ``d^(-1/4)``, which puts the ``1 / sqrt(d)`` inside).
The rows are drawn orthogonal in blocks of ``d`` and rescaled to Gaussian lengths, which lowers the
estimator's variance. The attention is then linear attention (``linear``) with ``phi`` as its
feature map: one ``(m, dv)`` sum over the keys, or chunked prefix sums when causal, so time and
memory grow as ``O(L m dv)`` where softmax costs ``O(L^2)``. The error falls as ``1 / sqrt(m)``;
``m`` defaults to ``d ln d``, the paper's choice.

What it drops: exactness. Sharp attention (one key far above the rest) needs many features, and
the Long Range Arena found kernel methods weakest on hierarchical tasks (ListOps). Weights
returned for heatmaps are those of the estimator, ``phi(q) . phi(k)`` normalized over the keys.

Numerics: a per-query constant cancels in the ratio, so each query's features are shifted by
their own maximum. Keys get no data-dependent shift: one taken over the keys would let a later
key move earlier outputs (through rounding) in causal attention. None is needed:
``w . x - |x|^2 / 2 <= |w|^2 / 2`` for every ``x``, so key features never overflow float32 for
head sizes up to about 128. The sums and the normaliser run in float32 at least (float16 sums of
non-causal linear attention overflow). Padded keys get zero features, which takes them out of both
the numerator and the normaliser.

Random features: the projection is a buffer (saved in checkpoints), drawn from a seed and a count
of draws, so every process of a distributed run holds the same one. It is redrawn only when asked:
:meth:`PerformerAttention.redraw_features`, or every ``redraw_interval`` training calls; never at
evaluation.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.variants.linear import LinearAttention

__all__ = ["PerformerAttention", "orthogonal_gaussian"]


def orthogonal_gaussian(num_rows: int, dim: int, generator: torch.Generator) -> Tensor:
    """``(num_rows, dim)`` rows, orthogonal within each block of ``dim``, each of Gaussian length.

    Every row is marginally ``N(0, I)`` (a uniform direction times a chi-distributed length), so
    the estimator stays unbiased; orthogonality within a block lowers its variance.
    """
    blocks = []
    for _ in range(math.ceil(num_rows / dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))
        blocks.append((q * r.diagonal().sign()).T)  # the signs make Q uniform (Haar), hence each row's direction
    directions = torch.cat(blocks)[:num_rows]
    lengths = torch.randn(num_rows, dim, generator=generator, dtype=torch.float64).norm(dim=-1, keepdim=True)
    return directions * lengths


@register_attention("performer", aliases=("favor",))
class PerformerAttention(LinearAttention):
    """Softmax attention estimated with positive orthogonal random features (see the module docstring).

    Args:
        query_size: Feature size ``d`` of queries and keys (a layer passes its head size).
        num_features: Random features ``m``; ``None`` takes ``round(d ln d)`` (at least ``d``).
        redraw_interval: Redraw the features every this many training calls; ``None`` never.
        seed: Seed of the random features; ``None`` draws one from torch's generator (so
            ``seed_everything`` fixes it), which varies the features between layers.
        chunk_size: Queries per chunk of the causal prefix sums.
    """

    family = "kernelized"
    cost = "L"

    supports_position_bias: ClassVar[bool] = False

    def __init__(
        self,
        query_size: int = 64,
        num_features: int | None = None,
        redraw_interval: int | None = None,
        seed: int | None = None,
        chunk_size: int = 64,
    ) -> None:
        super().__init__(chunk_size)
        if num_features is None:
            num_features = max(query_size, round(query_size * math.log(query_size)))
        self.require_positive(query_size=query_size, num_features=num_features, redraw_interval=redraw_interval)
        self.query_size = self.key_size = query_size
        self.num_features, self.redraw_interval = num_features, redraw_interval
        self.seed = int(torch.randint(2**31 - 1, ())) if seed is None else seed
        self.register_buffer("draws", torch.zeros((), dtype=torch.long))
        self.register_buffer("projection", torch.empty(num_features, query_size))
        self.calls = 0  # training calls since the last redraw
        self.redraw_features(count=False)

    @torch.no_grad()
    def redraw_features(self, count: bool = True) -> None:
        """Draw a new projection (the next one in the seeded sequence when ``count``)."""
        self.draws += int(count)
        generator = torch.Generator().manual_seed(self.seed + int(self.draws))
        rows = orthogonal_gaussian(self.num_features, self.query_size, generator)
        self.projection.copy_(rows.to(self.projection))

    def features(self, x: Tensor, *, is_query: bool) -> Tensor:
        """``phi(x)`` for queries or keys, in float32 at least; a query's are scaled by a constant."""
        compute = torch.promote_types(x.dtype, torch.float32)
        x = x.to(compute) * x.shape[-1] ** -0.25
        exponent = torch.matmul(x, self.projection.to(compute).T)  # (*batch, L, m): w . x
        # in place: the (L, m) products are the largest tensors here, and one of them is enough
        if is_query:  # -|q|^2 / 2 and the shift are per-query constants: they cancel in the ratio
            return exponent.sub_(exponent.detach().amax(-1, keepdim=True)).exp_()
        return exponent.sub_(x.square().sum(-1, keepdim=True) / 2 + math.log(self.num_features) / 2).exp_()

    def check_dims(self, query_dim: int, key_dim: int, value_dim: int) -> None:
        """Queries and keys must have the size the random features were drawn for."""
        super().check_dims(query_dim, key_dim, value_dim)
        if query_dim != self.query_size:
            raise ValueError(
                f"PerformerAttention: the random features were drawn for queries and keys of size "
                f"{self.query_size}, got {query_dim}. Build it with query_size={query_dim}."
            )

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """Linear attention over the random features; counts training calls for the redraw first."""
        if self.training and self.redraw_interval is not None:
            self.calls += 1
            if self.calls >= self.redraw_interval:
                self.redraw_features()
                self.calls = 0
        return super().attend(queries, keys, values, context)

    def extra_repr(self) -> str:
        redraw = f", redraw_interval={self.redraw_interval}" if self.redraw_interval is not None else ""
        return f"query_size={self.query_size}, num_features={self.num_features}{redraw}, seed={self.seed}, chunk_size={self.chunk_size}"
