"""A short causal depthwise convolution over a sequence, continuing from a window of earlier inputs.

The recurrent families put one (kernel 4) on their queries, keys and values before the recurrence,
as Mamba-2, flash-linear-attention and Zoology do: each channel mixes its last ``K`` inputs,
``y_t[c] = sum_i w[c, i] x_{t - K + 1 + i}[c] + b[c]``, which gives a linear recurrence the local
token shifts it cannot make with a decaying state (and which recall depends on). Decoding carries
the last ``K - 1`` inputs between steps (the *window*), so one token at a time equals one pass.

The sum is written as ``K`` shifted multiply-adds in the ``(B, T, C)`` layout the projections
produce, with its gradients written out (:class:`ShortConvolution`): ``F.conv1d`` wants channels
first, so it costs a transposed copy in and out, and its depthwise backward on a CPU took twice as
long as these sums (``docs/results/speed.md``, the pass between chunks and the short convolution);
flash-linear-attention's ``causal_conv1d`` is a CUDA kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx

__all__ = ["ShortConvolution", "causal_conv1d", "convolve_projections", "short_convolutions"]


class ShortConvolution(torch.autograd.Function):
    """``y_t = act(sum_s taps[K - 1 - s] * x_{t - s} + bias)``, ``s = 0 .. K - 1``, where
    ``x_{t - s}`` before the sequence's start reads ``window`` (its last ``K - 1`` inputs) and
    ``act`` is SiLU or the identity. The gradients are the same shifted sums transposed:
    ``dx_t = sum_s taps[K - 1 - s] * g_{t + s}`` and ``dtaps[K - 1 - s] = sum_{b, t} g_t * x_{t - s}``
    with ``g = dy * act'(pre-activation)``.

    With SiLU only ``x`` is kept for the backward, which sums the convolution again (``K``
    multiply-adds) instead of keeping its output: a layer whose queries, keys and values each pass
    a convolution and a SiLU keeps one tensor a projection instead of two, as it would without a
    convolution (``docs/results/speed.md``, the GPT's step with each recurrent layer).

    ``x`` ``(B, T, C)``, ``taps`` ``(K, C)`` (tap ``K - 1`` multiplies the current input),
    ``window`` ``(B, K - 1, C)``, ``bias`` ``(C,)`` or empty (none).
    """

    @staticmethod
    def _sums(x: Tensor, taps: Tensor, window: Tensor, bias: Tensor) -> Tensor:
        kernel, length = taps.shape[0], x.shape[1]
        y = x * taps[-1] if bias.numel() == 0 else torch.addcmul(bias, x, taps[-1])
        for shift in range(1, kernel):
            tap = taps[kernel - 1 - shift]
            if shift < length:
                y[:, shift:].addcmul_(x[:, : length - shift], tap)
            early = min(shift, length)  # positions whose input ``shift`` back lies in the window
            y[:, :early].addcmul_(window[:, kernel - 1 - shift : kernel - 1 - shift + early], tap)
        return y

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, taps: Tensor, window: Tensor, bias: Tensor, silu: bool) -> Tensor:
        y = ShortConvolution._sums(x, taps, window, bias)
        ctx.save_for_backward(x, taps, window, bias)
        ctx.silu = silu  # type: ignore[attr-defined]
        return F.silu(y, inplace=True) if silu else y

    @staticmethod
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, taps, window, bias = ctx.saved_tensors  # type: ignore[attr-defined]
        if ctx.silu:  # type: ignore[attr-defined]
            grad = torch.ops.aten.silu_backward(grad, ShortConvolution._sums(x, taps, window, bias))
        kernel, length = taps.shape[0], x.shape[1]
        needs_x, needs_taps, needs_window, needs_bias, _ = ctx.needs_input_grad  # type: ignore[attr-defined]
        grad_x = grad * taps[-1] if needs_x else None
        grad_window = torch.zeros_like(window) if needs_window else None
        grad_taps = [(grad * x).sum((0, 1))] if needs_taps else []
        for shift in range(1, kernel):
            tap, early = taps[kernel - 1 - shift], min(shift, length)
            seen = window[:, kernel - 1 - shift : kernel - 1 - shift + early]
            if grad_x is not None and shift < length:
                grad_x[:, : length - shift].addcmul_(grad[:, shift:], tap)
            if grad_window is not None:
                grad_window[:, kernel - 1 - shift : kernel - 1 - shift + early].addcmul_(grad[:, :early], tap)
            if needs_taps:
                total = (grad[:, :early] * seen).sum((0, 1))
                if shift < length:
                    total = total + (grad[:, shift:] * x[:, : length - shift]).sum((0, 1))
                grad_taps.append(total)
        grad_bias = grad.sum((0, 1)) if needs_bias else None
        return grad_x, (torch.stack(grad_taps[::-1]) if needs_taps else None), grad_window, grad_bias, None


def causal_conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    window: Tensor | None = None,
    *,
    activation: Literal["silu"] | None = None,
) -> tuple[Tensor, Tensor]:
    """The convolution of ``x`` after ``window`` (then ``activation``), and the window after ``x``.

    Args:
        x: ``(B, T, C)``.
        weight: ``(C, 1, K)``, one filter per channel (``nn.Conv1d``'s depthwise layout).
        bias: ``(C,)`` or None.
        window: The ``K - 1`` inputs before ``x``, ``(B, K - 1, C)``; None: zeros (a sequence's start).
        activation: ``"silu"`` to apply SiLU to the output in the same function (which then keeps
            less for the backward), or None; as flash-linear-attention's ``causal_conv1d``.

    Returns:
        ``y`` ``(B, T, C)`` and the last ``K - 1`` inputs of ``window`` and ``x``, ``(B, K - 1, C)``.
    """
    if activation not in (None, "silu"):
        raise ValueError(f"causal_conv1d's activation is 'silu' or None, got {activation!r}.")
    kernel = weight.shape[-1]
    window = x.new_zeros(x.shape[0], kernel - 1, x.shape[-1]) if window is None else window.to(x.dtype)
    taps = weight[:, 0].T.to(x.dtype)
    if x.shape[1] == 1:  # one decoded token: its window times the filters, one product and one sum (2.5x faster)
        history = torch.cat([window, x], dim=1)
        y = (history * taps).sum(1, keepdim=True)
        y = y if bias is None else y + bias.to(x.dtype)
        return (F.silu(y) if activation else y), history[:, 1:]
    bias = x.new_empty(0) if bias is None else bias.to(x.dtype)
    y = ShortConvolution.apply(x, taps, window, bias, activation == "silu")
    after = (
        x[:, x.shape[1] - (kernel - 1) :] if x.shape[1] >= kernel - 1 else torch.cat([window, x], 1)[:, x.shape[1] :]
    )
    return y, after


def convolve_projections(
    projected: Sequence[Tensor],
    convs: Sequence[nn.Conv1d],
    windows: Sequence[Tensor] | None = None,
    key_padding: Tensor | None = None,
    activations: Sequence[Literal["silu"] | None] | None = None,
) -> tuple[list[Tensor], tuple[Tensor, ...]]:
    """A layer's projections ``(B, T, C_i)`` each through its own short convolution, after its
    window (``windows`` None: a sequence's start), positions that ``key_padding`` marks as padding
    entering as zeros, then its activation (``activations``, one per projection; None: none); the
    outputs and the windows after them.

    ``key_padding``: True at real positions, ``(B, 1 or H, L)`` with ``L >= T`` (a context's
    :attr:`~zoo.attention.contract.context.AttentionContext.key_padding`), read at its last ``T``.
    """
    real = None
    if key_padding is not None:
        real = key_padding[..., -projected[0].shape[1] :].all(dim=1, keepdim=True).transpose(1, 2)  # (B, T, 1)
    results = [
        causal_conv1d(t if real is None else t * real, conv.weight, conv.bias, w, activation=activation)
        for t, conv, w, activation in zip(
            projected, convs, windows or (None,) * len(convs), activations or (None,) * len(convs)
        )
    ]
    return [y for y, _ in results], tuple(window for _, window in results)


def short_convolutions(
    owner: str, conv_size: int, widths: Sequence[int], *, bias: bool = False
) -> tuple[nn.Conv1d | None, ...]:
    """One depthwise ``nn.Conv1d`` of kernel ``conv_size`` per projection width (the parameters
    :func:`convolve_projections` reads), or a None for each when ``conv_size`` is 0; a
    ``ValueError`` naming ``owner`` for a size that is neither."""
    if not isinstance(conv_size, int) or isinstance(conv_size, bool) or conv_size < 0:
        raise ValueError(f"{owner}: conv_size must be 0 (no convolution) or a positive kernel size; got {conv_size!r}.")
    return tuple(nn.Conv1d(width, width, conv_size, groups=width, bias=bias) if conv_size else None for width in widths)
