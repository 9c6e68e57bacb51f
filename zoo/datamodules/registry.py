"""The data-module registry: names like ``sst2`` mapped to LightningDataModule classes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import lightning as L

from zoo.registry import Registry

__all__ = ["BUILTIN_MODULES", "DATAMODULE_REGISTRY", "list_datamodules", "register_datamodule"]

T = TypeVar("T")

#: the modules of the built-in data modules, imported on the registry's first lookup
BUILTIN_MODULES = (
    "zoo.datamodules.fra_eng",
    "zoo.datamodules.listops.datamodule",
    "zoo.datamodules.lra_text",
    "zoo.datamodules.recall",
    "zoo.datamodules.shakespeare",
    "zoo.datamodules.synthetic",
    "zoo.datamodules.text",
    "zoo.datamodules.text_classification",
)

DATAMODULE_REGISTRY: Registry[type[L.LightningDataModule]] = Registry(
    "data module", base=L.LightningDataModule, entry_point_group="zoo.datamodules", builtin_modules=BUILTIN_MODULES
)


def register_datamodule(
    name: str | None = None, *, aliases: tuple[str, ...] = (), override: bool = False
) -> Callable[[T], T]:
    """Class decorator registering a LightningDataModule under a name."""
    return DATAMODULE_REGISTRY.register(name, aliases=aliases, override=override)  # type: ignore[return-value]


def list_datamodules(pattern: str | None = None) -> list[str]:
    """Registered data-module names, naturally sorted, filtered by a wildcard."""
    return DATAMODULE_REGISTRY.list(pattern)
