"""The feature norms a block and a model's final norm may use, by name: ``layernorm`` (GPT-2's and
nanoGPT's, the default), ``rmsnorm`` (Zhang and Sennrich, 2019; LLaMA's) and ``zero_centred_rmsnorm``
(Qwen3-Next's and Gemma's), so that a model states its norm once, as one option.

Over the ``d`` features of ``x``:

    layernorm(x)            = (x - mean(x)) / sqrt(var(x) + eps) * w + b
    rmsnorm(x)              = x / sqrt(mean(x^2) + eps) * w                 (w starts at 1)
    zero_centred_rmsnorm(x) = x / sqrt(mean(x^2) + eps) * (1 + w)           (w starts at 0)

The zero-centred form is the same function as ``rmsnorm`` with its scale shifted by one; it is
stored as transformers' ``Qwen3NextRMSNorm`` stores it (``w``, zero at initialization, so weight
decay pulls the scale towards 1 rather than 0), and, as that module does, computed in float32 and
cast back to the input's dtype. RMS norms have no bias, whatever a model's ``bias`` says (LLaMA's
and Qwen's have none).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import DataError

__all__ = ["NORMS", "ZeroCentredRMSNorm", "build_norm"]

NORMS = ("layernorm", "rmsnorm", "zero_centred_rmsnorm")
"""The norm names :func:`build_norm` takes."""


class ZeroCentredRMSNorm(nn.Module):
    """RMSNorm scaled by ``1 + weight``, the weight starting at zero (see the module docstring).

    Args:
        dim: Features normalized (the last axis).
        eps: Added to the mean square.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        normalized = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return (normalized * (1.0 + self.weight.float())).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def build_norm(name: str, dim: int, eps: float, bias: bool) -> nn.Module:
    """The norm ``name`` over ``dim`` features; ``bias`` applies to ``layernorm`` alone."""
    if name == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if name == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    if name == "zero_centred_rmsnorm":
        return ZeroCentredRMSNorm(dim, eps)
    raise DataError(f"unknown norm {name!r}; choose one of {', '.join(NORMS)}.")
