"""The short causal depthwise convolution written out token by token, for references in float64."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["convolved"]


def convolved(x: Tensor, conv: torch.nn.Conv1d | None, real: Tensor) -> Tensor:
    """``x`` ``(B, T, C)`` through ``conv`` (None: unchanged): each channel's sum over its last
    ``K`` inputs, ``y_t = sum_i w_i x_{t - K + 1 + i}``, padded positions (``real`` ``(B, T)``
    False) and those before the start as zeros, plus the bias."""
    if conv is None:
        return x
    x = x * real[..., None].to(x.dtype)
    kernel = conv.weight.shape[-1]
    out = torch.zeros_like(x)
    for t in range(x.shape[1]):
        for i in range(kernel):
            source = t - kernel + 1 + i
            if source >= 0:
                out[:, t] += conv.weight[:, 0, i] * x[:, source]
    return out + (0 if conv.bias is None else conv.bias)
