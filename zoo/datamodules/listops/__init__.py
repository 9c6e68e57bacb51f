"""ListOps of the Long Range Arena in one place: its tokens and codec (:mod:`.tokens`), the
expressions' generator (:mod:`.generator`) and the data module with its split files
(:mod:`.datamodule`). The package itself imports the light parts only, so a task restores a
ListOps codec from a checkpoint without the data module's machinery."""

from __future__ import annotations

from typing import Any

from zoo.datamodules.listops.generator import evaluate, generate
from zoo.datamodules.listops.tokens import CLASS_NAMES, VOCABULARY, ListOpsCodec, encode

__all__ = ["CLASS_NAMES", "VOCABULARY", "ListOpsCodec", "ListOpsDataModule", "encode", "evaluate", "generate"]


def __getattr__(name: str) -> Any:
    """``ListOpsDataModule`` on first use (configs written before the package name it here)."""
    if name == "ListOpsDataModule":
        from zoo.datamodules.listops.datamodule import ListOpsDataModule

        return ListOpsDataModule
    raise AttributeError(f"module 'zoo.datamodules.listops' has no attribute {name!r}")
