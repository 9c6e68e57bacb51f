"""L2 normalization over the last dimension, scaled, with its gradient written out.

The delta-rule families (DeltaNet, Gated DeltaNet, Kimi Delta Attention, Gated DeltaProduct;
RWKV-7's removal key) L2-normalize every query and key before the recurrence (the rule assumes ``|k_t| = 1``), and scale
the queries: ``y = s * x / max(|x|, eps)``, as ``F.normalize(x) * s`` computes it. Left to
autograd, that is a norm, a clamp, a division and a product, each recorded and replayed; here the
forward is one reduction and one product, and the backward two passes::

    dx = (s * g - y * (g . y) / s) / max(|x|, eps)

(the projection term dropped where the norm is clamped, as autograd's would be), as
flash-linear-attention's ``l2norm`` kernel writes it. With it a ``gated_deltanet`` layer's forward
and backward at 8k tokens on the CPU took 0.89-0.96x the time (``docs/results/speed.md``, the delta
rule's L2 normalization; the A/B script: ``git show 91ed04e:benchmarks/delta_rule_ab.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

__all__ = ["l2_normalize"]


class _L2Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, scale: float, eps: float, added: bool) -> Tensor:
        squares = x.pow(2).sum(-1, keepdim=True)
        clamped = torch.zeros_like(squares, dtype=torch.bool) if added else squares < eps * eps
        inverse = (squares.add_(eps) if added else squares.clamp_min_(eps * eps)).rsqrt_()
        y = x * (inverse * scale)
        ctx.save_for_backward(y, inverse, clamped)
        ctx.scale = scale  # type: ignore[attr-defined]
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        y, inverse, clamped = ctx.saved_tensors
        scale = ctx.scale
        along = (grad * y).sum(-1, keepdim=True).masked_fill_(clamped, 0.0)
        return torch.addcmul(grad * scale, y, along, value=-1.0 / scale).mul_(inverse), None, None, None


def l2_normalize(x: Tensor, scale: float = 1.0, eps: float = 1e-12, *, added: bool = False) -> Tensor:
    """``scale * x / max(|x|, eps)`` over the last dimension: ``F.normalize(x, dim=-1) * scale``,
    values and gradients, in one function (see the module docstring). With ``added``, ``scale * x /
    sqrt(|x|^2 + eps)``: flash-linear-attention's ``l2norm`` and transformers' (``eps`` 1e-6 there),
    which shortens vectors near zero rather than clamping their norm; the gradient has the same form
    with that inverse norm."""
    return _L2Normalize.apply(x, scale, eps, added)
