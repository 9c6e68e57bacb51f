"""Nadaraya-Watson kernel regression as attention pooling over remembered training points."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor, nn

from zoo.attention import AttentionOutput, create_attention, require_attention

__all__ = ["KernelRegression"]


class KernelRegression(nn.Module):
    """Predicts ``f(x) = sum_i alpha(x, x_i) y_i`` with attention weights over training points.

    The training points ``(x_i, y_i)`` are the model's memory (buffers, so a checkpoint alone
    can predict). The attention variant is a registered scoring name: ``average`` (ignores the
    inputs), ``gaussian_kernel`` (fixed bandwidth: non-parametric) or ``gaussian_kernel`` with
    ``learnable=True`` (the parametric model of the reference notes), or a plugin.

    Args:
        attention: Registered scoring attention name.
        attention_kwargs: Keyword arguments for it.
        learnable: Train the kernel's parameters. A variant whose constructor takes
            ``learnable`` (like ``gaussian_kernel``) receives it; with False every parameter of
            the attention is frozen, which gives the non-parametric estimator.
    """

    def __init__(
        self, attention: str = "gaussian_kernel", attention_kwargs: dict[str, Any] | None = None, learnable: bool = True
    ) -> None:
        super().__init__()
        cls = require_attention(
            attention,
            padding=True,
            weights=True,
            bidirectional=True,
            role="kernel regression (leave-one-out needs masks)",
        )
        kwargs = dict(attention_kwargs or {})
        if "learnable" in inspect.signature(cls).parameters:
            kwargs.setdefault("learnable", learnable)
        self.attention = create_attention(attention, **kwargs)
        if not learnable:
            self.attention.requires_grad_(False)
        self.register_buffer("memory_inputs", torch.empty(0))
        self.register_buffer("memory_targets", torch.empty(0))

    @property
    def memory_size(self) -> int:
        return self.memory_inputs.numel()

    def remember(self, inputs: Tensor, targets: Tensor) -> None:
        """Store the training points attended over (1-D inputs and targets of equal length)."""
        if inputs.dim() != 1 or inputs.shape != targets.shape or inputs.numel() == 0:
            raise ValueError(
                f"remember() takes two non-empty 1-D tensors of equal length; got {tuple(inputs.shape)} and {tuple(targets.shape)}."
            )
        self.memory_inputs = inputs.detach().clone().float()
        self.memory_targets = targets.detach().clone().float()

    def forward(self, inputs: Tensor, exclude: Tensor | None = None, *, need_weights: bool = False) -> AttentionOutput:
        """Predict at 1-D ``inputs``.

        Args:
            inputs: ``(N,)`` query points.
            exclude: ``(N,)`` index of a memory point each query must not attend to (the query
                itself during leave-one-out training), or None.
            need_weights: Also return the ``(N, M)`` weights over the ``M`` memory points.
        """
        if self.memory_size == 0:
            raise RuntimeError("KernelRegression has no training points: call remember(x, y) first.")
        queries = inputs.reshape(1, -1, 1).to(self.memory_inputs.dtype)
        keys = self.memory_inputs.reshape(1, -1, 1)
        values = self.memory_targets.reshape(1, -1, 1)
        mask = None
        if exclude is not None:
            mask = (torch.arange(self.memory_size, device=inputs.device) != exclude.unsqueeze(-1)).unsqueeze(0)
        output, weights = self.attention(queries, keys, values, attn_mask=mask, need_weights=need_weights)
        return AttentionOutput(output.reshape(-1), None if weights is None else weights[0])

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        # The memory's size is only known from the checkpoint: resize before loading.
        for name in ("memory_inputs", "memory_targets"):
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
