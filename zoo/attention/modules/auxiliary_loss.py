"""An auxiliary loss a layer adds to the training objective without the trainer knowing of it.

The zoo's tasks minimize one loss computed from the model's output; a layer that needs a second
objective (DeepSeek Sparse Attention's indexer, trained by a KL divergence to the main attention,
:mod:`zoo.attention.variants.dsa`) ties it to its output instead::

    y = attach_auxiliary_loss(y, weight * loss)

``y`` is unchanged forwards; backwards, whatever gradient reaches ``y`` passes on as it is, and
``loss`` receives a gradient of one, so one backward pass through a model that uses ``y`` once
gives the gradients of ``task loss + weight * loss``. DeepSeek-V2's Hugging Face modeling code ties
its mixture-of-experts balance loss to the hidden states the same way (``AddAuxiliaryLoss``).

What it does not do: the auxiliary term is not scaled with the task loss (a loss divided by the
number of accumulated batches leaves it whole), and it does not appear in the logged loss.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["attach_auxiliary_loss"]


class _AuxiliaryLoss(torch.autograd.Function):
    """Identity on ``output``; a gradient of one for the scalar ``loss``."""

    @staticmethod
    def forward(ctx: Any, output: Tensor, loss: Tensor) -> Tensor:
        ctx.loss_dtype, ctx.loss_device = loss.dtype, loss.device
        return output.view_as(output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, torch.ones((), dtype=ctx.loss_dtype, device=ctx.loss_device)


def attach_auxiliary_loss(output: Tensor, loss: Tensor) -> Tensor:
    """``output`` as it is, carrying the scalar ``loss`` into every backward pass through it."""
    if loss.dim() != 0:
        raise ValueError(f"attach_auxiliary_loss takes a scalar loss; got shape {tuple(loss.shape)}.")
    return _AuxiliaryLoss.apply(output, loss)
