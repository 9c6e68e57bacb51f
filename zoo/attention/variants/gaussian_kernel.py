"""Gaussian-kernel attention: the Nadaraya-Watson estimator written as attention pooling.

A query's weights are a softmax over keys of ``-(w^2 / 2) |q - k|^2 = w^2 q.k - (w^2 / 2) |k|^2
- (w^2 / 2) |q|^2``. The last term is the same for every key of a query, so the softmax drops it,
and what remains is a dot product of ``q' = [w^2 q, 1]`` with ``k' = [k, -(w^2 / 2) |k|^2]``: the
fused kernel of scaled dot-product attention at scale 1, one more feature per head, at the cost of
``dot_product`` and without ``(Lq, Lk)`` scores in memory when no weights are asked for. The
kernel's fused forms take one head width for queries, keys and values (and, on CUDA, a multiple
of 8), and any other shape falls back to the math form that holds the scores; so queries, keys
and values are zero-padded to a common width (zeros add nothing to a dot product) and the
output's padding is cut off.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.build.factory import register_attention
from zoo.attention.contract.base import Attention, AttentionOutput
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels import fused_attention

__all__ = ["GaussianKernelAttention"]


@register_attention("gaussian_kernel", aliases=("nadaraya_watson",))
class GaussianKernelAttention(Attention):
    """Scores ``-(w * ||q - k||)^2 / 2``, so the weights are a normalized Gaussian kernel.

    With ``w = 1`` this is the non-parametric Nadaraya-Watson regression of the reference notes;
    with ``learnable=True`` the inverse bandwidth ``w`` is a parameter trained by gradient descent.

    Args:
        bandwidth: Kernel width ``1 / w`` (must be positive).
        learnable: Learn the bandwidth instead of fixing it.
        dropout: Dropout on the attention weights during training.
    """

    family = "kernel smoother"
    cost = "L²"

    has_fused_path: ClassVar[bool] = True
    supports_position_bias: ClassVar[bool] = True

    def __init__(self, bandwidth: float = 1.0, learnable: bool = False, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        if not bandwidth > 0:
            raise ValueError(f"GaussianKernelAttention: bandwidth must be positive, got {bandwidth}.")
        inverse = torch.tensor(1.0 / bandwidth)
        if learnable:
            self.inverse_bandwidth = nn.Parameter(inverse)
        else:
            self.register_buffer("inverse_bandwidth", inverse)

    @property
    def bandwidth(self) -> float:
        """The current kernel width ``1 / |w|``."""
        return 1.0 / abs(float(self.inverse_bandwidth.detach()))

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        # ||q - k||^2 = ||q||^2 + ||k||^2 - 2 q.k, without a (Lq, Lk, d) temporary.
        sq_dist = (
            queries.pow(2).sum(-1, keepdim=True)
            + keys.pow(2).sum(-1).unsqueeze(-2)
            - 2 * torch.matmul(queries, keys.transpose(-2, -1))
        ).clamp_min(0)
        return -0.5 * self.inverse_bandwidth.to(sq_dist.dtype).pow(2) * sq_dist

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """The explicit scores when weights are asked for, else the fused kernel on the augmented
        features of the module docstring (exact: the dropped term is constant along each row)."""
        if context.need_weights:
            return super().attend(queries, keys, values, context)
        half_sq_width = 0.5 * self.inverse_bandwidth.to(queries.dtype).pow(2)
        augmented_queries = torch.cat([2 * half_sq_width * queries, queries.new_ones(*queries.shape[:-1], 1)], -1)
        augmented_keys = torch.cat([keys, -half_sq_width * keys.pow(2).sum(-1, keepdim=True)], -1)
        value_width = values.shape[-1]
        width = max(augmented_queries.shape[-1], value_width)
        if queries.device.type == "cuda":
            width = -(-width // 8) * 8
        output = fused_attention(
            F.pad(augmented_queries, (0, width - augmented_queries.shape[-1])),
            F.pad(augmented_keys, (0, width - augmented_keys.shape[-1])),
            F.pad(values, (0, width - value_width)),
            context.mask, is_causal=context.is_causal,
            bias=context.bias_grid(queries.shape[-2], keys.shape[-2], queries.device),
            dropout_p=self.active_dropout, scale=1.0,
        )  # fmt: skip
        return AttentionOutput(output[..., :value_width], None)

    def extra_repr(self) -> str:
        learnable = isinstance(self.inverse_bandwidth, nn.Parameter)
        return f"bandwidth={self.bandwidth:.4g}, learnable={learnable}"
