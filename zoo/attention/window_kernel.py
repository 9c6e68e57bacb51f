"""Blockwise softmax attention that recomputes its block scores in the backward pass.

``local`` cuts queries into blocks and lets each block attend over the window of keys it can
reach. Through autograd, each block's ``(block, span)`` scores and weights would be kept for the
backward pass: two float tensors of ``O(L * span)`` per head, larger than the inputs by a factor
of ``span / d``, streamed through memory twice. :class:`WindowAttention` keeps only what flash
attention keeps: the (padded) queries, keys and values, the output and one log-sum-exp per query,
and recomputes the scores block by block in the backward pass, as ``additive``'s
:class:`~zoo.attention.additive.AdditiveScores` recomputes its hidden activations.

Backward, with ``P = exp(S - lse)`` recomputed: ``dV = P^T dO``, ``dS = P * (dO V^T - rowsum(dO * O))``,
``dQ = dS K * scale``, ``dK = dS^T Q * scale``; the windows overlap, so key and value gradients
are summed back onto their positions (``index_add_``). An additive ``bias`` on the scores (a
learned relative-position bias) gets ``dS`` summed to its shape.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["WindowAttention", "window_attention"]


def _windows(x: Tensor, span: int, block: int) -> Tensor:
    """``(*batch, n, d)`` -> the overlapping ``(*batch, nb, span, d)`` windows, one per block."""
    return x.unfold(-2, span, block).transpose(-2, -1)


def _weights(q: Tensor, k: Tensor, keep: Tensor, bias: Tensor | None, scale: float) -> tuple[Tensor, Tensor]:
    """Block weights ``P`` ``(*batch, nb, block, span)`` and their log-sum-exp per query; a query
    that sees no key gets zero weights (and an ``lse`` of 0)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.exp(scores - lse), lse


class WindowAttention(torch.autograd.Function):
    """Softmax attention of each block of queries over its window of keys (see the module doc).

    Inputs: queries ``(*batch, nb * block, d)``, keys and values ``(*batch, n, d)`` padded so
    that block ``b`` reaches rows ``b * block`` to ``b * block + span - 1``, the boolean ``keep``
    mask (True = attend) and optional float ``bias``, both broadcastable to
    ``(*batch, nb, block, span)``, then ``block``, ``span`` and ``scale``. Returns the output
    ``(*batch, nb * block, dv)``. Computes in float32 at least.
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        keep: Tensor,
        bias: Tensor | None,
        block: int,
        span: int,
        scale: float,
    ) -> Tensor:
        compute = torch.promote_types(q.dtype, torch.float32)
        qb = q.to(compute).unflatten(-2, (-1, block))
        weights, lse = _weights(
            qb, _windows(k.to(compute), span, block), keep, None if bias is None else bias.to(compute), scale
        )
        out = torch.matmul(weights, _windows(v.to(compute), span, block))  # (*batch, nb, block, dv)
        ctx.save_for_backward(q, k, v, keep, bias, out, lse)
        ctx.block, ctx.span, ctx.scale = block, span, scale
        return out.flatten(-3, -2).to(v.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, keep, bias, out, lse = ctx.saved_tensors
        block, span, scale = ctx.block, ctx.span, ctx.scale
        compute = out.dtype
        qb = q.to(compute).unflatten(-2, (-1, block))
        kw, vw = _windows(k.to(compute), span, block), _windows(v.to(compute), span, block)
        scores = torch.matmul(qb, kw.transpose(-2, -1)) * scale
        if bias is not None:
            scores = scores + bias.to(compute)
        weights = torch.exp(scores.masked_fill(~keep, float("-inf")) - lse)  # P, recomputed
        d_out = grad_out.to(compute).unflatten(-2, (-1, block))
        d_scores = weights * (torch.matmul(d_out, vw.transpose(-2, -1)) - (d_out * out).sum(-1, keepdim=True))
        grad_q = (torch.matmul(d_scores, kw) * scale).flatten(-3, -2)
        positions = (
            torch.arange(kw.shape[-3], device=q.device).unsqueeze(-1) * block + torch.arange(span, device=q.device)
        ).flatten()
        grad_k = _sum_windows(torch.matmul(d_scores.transpose(-2, -1), qb) * scale, positions, k.shape[-2])
        grad_v = _sum_windows(torch.matmul(weights.transpose(-2, -1), d_out), positions, v.shape[-2])
        grad_bias = None if bias is None or not ctx.needs_input_grad[4] else _sum_to(d_scores, bias)
        return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), None, grad_bias, None, None, None


def _sum_windows(windows: Tensor, positions: Tensor, length: int) -> Tensor:
    """``(*batch, nb, span, d)`` window rows summed back onto their ``length`` positions."""
    total = windows.new_zeros((*windows.shape[:-3], length, windows.shape[-1]))
    return total.index_add_(-2, positions, windows.flatten(-3, -2))


def _sum_to(grad: Tensor, like: Tensor) -> Tensor:
    """``grad`` summed over the axes ``like`` broadcast along, to ``like``'s shape and dtype."""
    while grad.dim() > like.dim():
        grad = grad.sum(0)
    return grad.sum_to_size(like.shape).to(like.dtype)


def window_attention(
    q: Tensor, k: Tensor, v: Tensor, keep: Tensor, bias: Tensor | None, *, block: int, span: int, scale: float
) -> Tensor:
    """:class:`WindowAttention` with keyword arguments (see there)."""
    return WindowAttention.apply(q, k, v, keep, bias, block, span, scale)
