"""A fixed number of conjugate-gradient steps for many symmetric positive-definite systems at
once, with the gradient of the exact solution (implicit differentiation).

Each row ``r`` of the right-hand side ``b`` ``(..., d)`` has its own matrix ``A_r`` ``(d, d)``,
symmetric positive definite, known only through ``matvec(p) = p A`` (row vectors, every row
with its own matrix): MesaNet's ridge regression reads one ``(H_t + Lambda)^{-1}`` per token
without forming it (:mod:`~zoo.attention.kernels.mesa`). From ``x_0 = 0``, each step::

    alpha = (r . r) / (p . p A),   x <- x + alpha p,   r' = r - alpha p A,
    p <- r' + ((r' . r') / (r . r)) p,   r <- r'

(``r_0 = p_0 = b``). A row whose residual reaches zero stays where it is: the divisions are
guarded against zero by the smallest positive number of the dtype, not by a constant added to
every denominator: flash-linear-attention adds ``1e-5``, which shortens the steps once ``p . p A``
is that small, so its 30 steps stay about ``2e-3`` from the exact solve where these reach it to
float32's rounding (``benchmarks/fla_reference.py``, ``compare_mesa_net``).

Gradients are not taken through the steps (which would keep every step's tensors): with ``x A
= b``, ``dx = (db - x dA) A^{-1}``, so the backward solves once more, ``u = g A^{-1}`` for the
gradient ``g`` reaching ``x`` (``A`` symmetric), by the same number of steps, and gives ``db =
u`` and, to whatever ``A`` is made of (``operands``), the gradient of ``-(x A(operands)) . u``
with ``x`` and ``u`` held fixed: exact for the exact solution, as MesaNet's paper and
flash-linear-attention's backward compute it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

__all__ = ["MatVec", "conjugate_gradient"]

MatVec = Callable[..., Tensor]
"""``matvec(p, *operands) -> p A``: the rows ``p`` ``(..., d)`` times their matrices."""


def _solve(matvec: MatVec, rhs: Tensor, operands: Sequence[Tensor], steps: int) -> Tensor:
    """``steps`` conjugate-gradient steps from zero on ``x A = rhs`` (see the module docstring)."""
    tiny = torch.finfo(rhs.dtype).tiny
    x = torch.zeros_like(rhs)
    residual, direction = rhs, rhs
    squared = (residual * residual).sum(-1, keepdim=True)
    for _ in range(steps):
        product = matvec(direction, *operands)
        alpha = squared / (direction * product).sum(-1, keepdim=True).clamp_min(tiny)
        x = x + alpha * direction
        residual = residual - alpha * product
        following = (residual * residual).sum(-1, keepdim=True)
        direction = residual + following / squared.clamp_min(tiny) * direction
        squared = following
    return x


class _ConjugateGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, matvec: MatVec, steps: int, rhs: Tensor, *operands: Tensor) -> Tensor:
        x = _solve(matvec, rhs, operands, steps)
        ctx.save_for_backward(x, *operands)
        ctx.matvec, ctx.steps = matvec, steps  # type: ignore[attr-defined]
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, *operands = ctx.saved_tensors
        adjoint = _solve(ctx.matvec, grad, operands, ctx.steps)  # u = g A^{-1}
        wanted = [i for i, needs in enumerate(ctx.needs_input_grad[3:]) if needs]
        grads: list[Tensor | None] = [None] * len(operands)
        if wanted:
            with torch.enable_grad():
                inputs = [t.detach().requires_grad_(i in wanted) for i, t in enumerate(operands)]
                surrogate = -(ctx.matvec(x, *inputs) * adjoint).sum()
                found = torch.autograd.grad(surrogate, [inputs[i] for i in wanted], allow_unused=True)
            for i, value in zip(wanted, found):
                grads[i] = value
        return (None, None, adjoint, *grads)


def conjugate_gradient(matvec: MatVec, rhs: Tensor, operands: Sequence[Tensor], *, steps: int) -> Tensor:
    """``x`` with ``x A = rhs`` by ``steps`` conjugate-gradient steps from zero, each row with its
    own symmetric positive-definite ``A``, with the exact solution's gradient (module docstring).

    Args:
        matvec: ``matvec(p, *operands) -> p A``, differentiable in ``operands``; ``A`` symmetric.
        rhs: The right-hand sides ``(..., d)``.
        operands: The tensors ``A`` is made of, which receive gradients.
        steps: Conjugate-gradient steps (``d`` solve a ``d``-dimensional system exactly, in exact arithmetic).

    Raises:
        ValueError: ``steps`` is not a positive integer.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"conjugate_gradient: steps must be a positive integer, got {steps!r}.")
    return _ConjugateGradient.apply(matvec, steps, rhs, *operands)
