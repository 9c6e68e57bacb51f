"""The default optimization recipe: AdamW with linear warm-up then cosine decay."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn

__all__ = ["adamw_with_warmup", "configure_adamw", "fused_allowed", "warmup_cosine"]


def fused_allowed(trainer: L.Trainer) -> bool:
    """Whether the fused AdamW kernel may run under ``trainer``: Lightning refuses to clip the
    gradients of an optimizer that unscales them itself (a fused one) under mixed precision
    (``16-mixed`` and ``bf16-mixed`` alike), so clipping plus mixed precision takes the
    multi-tensor (foreach) kernel instead."""
    return not (isinstance(trainer.precision_plugin, MixedPrecision) and trainer.gradient_clip_val)


def warmup_cosine(step: int, *, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """Learning-rate multiplier: linear from 0 to 1 over ``warmup_steps``, then cosine to ``min_ratio``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if total_steps <= warmup_steps:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def adamw_with_warmup(
    model: nn.Module,
    *,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    total_steps: int,
    betas: tuple[float, float] = (0.9, 0.98),
    min_ratio: float = 0.0,
    fused: bool = True,
    decay_all: bool = False,
) -> dict[str, Any]:
    """AdamW and a per-step schedule (:func:`warmup_cosine`, ending at ``min_ratio * lr``), in the
    dictionary form ``LightningModule.configure_optimizers`` returns.

    By default weight decay applies to weights only: exempt are parameters of fewer than two dimensions,
    those named ``*bias`` (Hugging Face's rule, which also exempts bias tables such as ``local``
    attention's ``relative_bias``, as Swin and T5 do) and those of modules named ``*norm*``;
    ``decay_all=True`` decays every parameter (``AdamW(model.parameters())``, as Zoology and MAD
    train). ``fused=False`` keeps the unfused kernel (see :func:`fused_allowed`)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        exempt = not decay_all and (param.dim() < 2 or "norm" in name or name.endswith("bias"))
        (no_decay if exempt else decay).append(param)
    # The fused kernel updates every parameter in one pass (about 10% of a small model's step on CPU).
    fused = fused and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in decay + no_decay)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=betas,
        fused=fused or None,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: warmup_cosine(step, warmup_steps=warmup_steps, total_steps=total_steps, min_ratio=min_ratio),
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def configure_adamw(module: L.LightningModule, **options: Any) -> dict[str, Any]:
    """:func:`adamw_with_warmup` over ``module.model`` from the module's hyperparameters ``lr``,
    ``weight_decay``, ``warmup_steps`` and, where it has one, ``min_lr`` (the schedule's end; 0
    otherwise), over the trainer's estimated steps with the fused kernel where it may run: a task's
    ``configure_optimizers``. ``options`` (``betas``, ``decay_all``) go to :func:`adamw_with_warmup`."""
    hp = module.hparams
    return adamw_with_warmup(
        module.model,
        lr=hp.lr,
        weight_decay=hp.weight_decay,
        warmup_steps=hp.warmup_steps,
        total_steps=module.trainer.estimated_stepping_batches,
        min_ratio=hp.get("min_lr", 0.0) / hp.lr,
        fused=fused_allowed(module.trainer),
        **options,
    )
