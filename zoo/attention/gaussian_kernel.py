"""Gaussian-kernel attention: the Nadaraya-Watson estimator written as attention pooling."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.attention.base import Attention
from zoo.attention.factory import register_attention

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

    def extra_repr(self) -> str:
        learnable = isinstance(self.inverse_bandwidth, nn.Parameter)
        return f"bandwidth={self.bandwidth:.4g}, learnable={learnable}"
