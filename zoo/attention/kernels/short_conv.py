"""A short causal depthwise convolution over a sequence, continuing from a window of earlier inputs.

The recurrent families put one (kernel 4) on their queries, keys and values before the recurrence,
as Mamba-2, flash-linear-attention and Zoology do: each channel mixes its last ``K`` inputs,
``y_t[c] = sum_i w[c, i] x_{t - K + 1 + i}[c] + b[c]``, which gives a linear recurrence the local
token shifts it cannot make with a decaying state (and which recall depends on). Decoding carries
the last ``K - 1`` inputs between steps (the *window*), so one token at a time equals one pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["causal_conv1d", "convolve_projections"]


def causal_conv1d(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, window: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The convolution of ``x`` after ``window``, and the window after ``x``.

    Args:
        x: ``(B, T, C)``.
        weight: ``(C, 1, K)``, one filter per channel (``nn.Conv1d``'s depthwise layout).
        bias: ``(C,)`` or None.
        window: The ``K - 1`` inputs before ``x``, ``(B, K - 1, C)``; None: zeros (a sequence's start).

    Returns:
        ``y`` ``(B, T, C)`` and the last ``K - 1`` inputs of ``window`` and ``x``, ``(B, K - 1, C)``.
    """
    kernel = weight.shape[-1]
    if window is None:
        window = x.new_zeros(x.shape[0], kernel - 1, x.shape[-1])
    history = torch.cat([window.to(x.dtype), x], dim=1)  # (B, K - 1 + T, C)
    if x.shape[1] == 1:  # one decoded token: its window times the filters, without conv1d's set-up (10x on a CPU)
        y = (history * weight[:, 0].T.to(x.dtype)).sum(1, keepdim=True)
        return (y if bias is None else y + bias.to(x.dtype)), history[:, 1:]
    y = F.conv1d(
        history.transpose(1, 2), weight.to(x.dtype), None if bias is None else bias.to(x.dtype), groups=x.shape[-1]
    )
    return y.transpose(1, 2), history[:, history.shape[1] - (kernel - 1) :]


def convolve_projections(
    projected: Sequence[Tensor],
    convs: Sequence[nn.Conv1d],
    windows: Sequence[Tensor] | None = None,
    key_padding: Tensor | None = None,
) -> tuple[list[Tensor], tuple[Tensor, ...]]:
    """A layer's projections ``(B, T, C_i)`` each through its own short convolution, after its
    window (``windows`` None: a sequence's start), positions that ``key_padding`` marks as padding
    entering as zeros; the outputs and the windows after them.

    ``key_padding``: True at real positions, ``(B, 1 or H, L)`` with ``L >= T`` (a context's
    :attr:`~zoo.attention.context.AttentionContext.key_padding`), read at its last ``T``.
    """
    real = None
    if key_padding is not None:
        real = key_padding[..., -projected[0].shape[1] :].all(dim=1, keepdim=True).transpose(1, 2)  # (B, T, 1)
    results = [
        causal_conv1d(t if real is None else t * real, conv.weight, conv.bias, None if windows is None else w)
        for t, conv, w in zip(projected, convs, windows or (None,) * len(convs))
    ]
    return [y for y, _ in results], tuple(window for _, window in results)
