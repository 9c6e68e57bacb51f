"""``configure_adamw``: a task's optimizer and schedule from its hyperparameters."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lightning.fabric.utilities.data import AttributeDict
from lightning.pytorch.plugins.precision import Precision

from zoo.tasks.optim import configure_adamw


def _task(**hparams: float) -> SimpleNamespace:
    trainer = SimpleNamespace(estimated_stepping_batches=10, precision_plugin=Precision(), gradient_clip_val=None)
    return SimpleNamespace(model=torch.nn.Linear(4, 4), hparams=AttributeDict(hparams), trainer=trainer)


def _rates(recipe: dict) -> list[float]:
    optimizer, scheduler = recipe["optimizer"], recipe["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(10):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates + [optimizer.param_groups[0]["lr"]]


@pytest.mark.parametrize(("min_lr", "end"), [(None, 0.0), (1e-3, 1e-3)])
def test_the_schedule_warms_up_to_lr_and_ends_at_min_lr_or_zero(min_lr: float | None, end: float) -> None:
    hparams = {"lr": 1e-2, "weight_decay": 0.1, "warmup_steps": 2} | ({} if min_lr is None else {"min_lr": min_lr})
    rates = _rates(configure_adamw(_task(**hparams)))
    assert rates[0] == pytest.approx(5e-3) and rates[1] == pytest.approx(1e-2)  # linear warm-up over 2 steps
    assert rates[-1] == pytest.approx(end)


def test_options_reach_the_optimizer() -> None:
    recipe = configure_adamw(_task(lr=1e-3, weight_decay=0.1, warmup_steps=0), betas=(0.9, 0.999), decay_all=True)
    groups = recipe["optimizer"].param_groups
    assert groups[0]["betas"] == (0.9, 0.999)
    assert len(groups[0]["params"]) == 2 and not groups[1]["params"]  # the bias decayed too
