"""The model registry: names like ``transformer`` mapped to their task's LightningModule class.

It lives beside the classes that fill it (the tasks register themselves when :mod:`zoo.tasks`
is imported), so ``zoo.tasks.list_models()`` is complete as soon as it can be called.
:mod:`zoo.models` holds the plain ``nn.Module`` architectures and stays free of Lightning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from zoo.registry import Registry

__all__ = ["MODEL_REGISTRY", "list_models", "register_model"]

T = TypeVar("T")

MODEL_REGISTRY: Registry[type] = Registry("model", entry_point_group="zoo.models")


def register_model(
    name: str | None = None, *, aliases: tuple[str, ...] = (), override: bool = False
) -> Callable[[T], T]:
    """Class decorator registering a task LightningModule under a model name."""
    return MODEL_REGISTRY.register(name, aliases=aliases, override=override)  # type: ignore[return-value]


def list_models(pattern: str | None = None) -> list[str]:
    """Registered model names, naturally sorted, filtered by a wildcard."""
    return MODEL_REGISTRY.list(pattern)
