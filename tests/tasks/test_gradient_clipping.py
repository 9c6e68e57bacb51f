"""Gradient clipping under FSDP: Lightning's FSDP precision refuses to clip by norm itself, so a
task clips through the sharded module (the CUDA group trains a GPT so; this checks the routing
on the CPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.strategies import FSDPStrategy, SingleDeviceStrategy

from zoo.tasks.regression import NadarayaWatson


class _ShardedModule:
    """Stands in for the FSDP-wrapped model: records what it is asked to clip to."""

    def __init__(self) -> None:
        self.clipped_to: list[float] = []

    def clip_grad_norm_(self, max_norm: float) -> None:
        self.clipped_to.append(max_norm)


def _task(strategy: object, model: object) -> NadarayaWatson:
    task = NadarayaWatson()
    task._trainer = SimpleNamespace(strategy=strategy, model=model)
    return task


@pytest.mark.parametrize("algorithm", [None, "norm"])
def test_under_fsdp_the_norm_is_clipped_by_the_sharded_module(monkeypatch, algorithm: str | None) -> None:
    sharded = _ShardedModule()
    task = _task(FSDPStrategy(), sharded)
    monkeypatch.setattr(task, "clip_gradients", lambda *args, **kwargs: pytest.fail("Lightning's path would refuse"))
    task.configure_gradient_clipping(torch.optim.SGD(task.parameters(), lr=0.1), 1.0, algorithm)
    assert sharded.clipped_to == [1.0]


def test_elsewhere_lightning_clips_as_usual(monkeypatch) -> None:
    sharded, calls = _ShardedModule(), []
    task = _task(SingleDeviceStrategy("cpu"), sharded)
    monkeypatch.setattr(task, "clip_gradients", lambda optimizer, **kwargs: calls.append(kwargs))
    task.configure_gradient_clipping(torch.optim.SGD(task.parameters(), lr=0.1), 0.5, "value")
    assert calls == [{"gradient_clip_val": 0.5, "gradient_clip_algorithm": "value"}] and not sharded.clipped_to
