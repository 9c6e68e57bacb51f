"""What every zoo task shares: how the CLI finds its defaults and how it links data sizes."""

from __future__ import annotations

from typing import ClassVar

import lightning as L

__all__ = ["ZooTask"]


class ZooTask(L.LightningModule):
    """Base of the registered models' LightningModules.

    Class attributes tell the CLI what it needs before parsing:

    * ``default_datamodule``: registered data-module name used when none is given.
    * ``data_links``: constructor arguments filled from data-module attributes of the same
      name at instantiation (vocabulary size, padding id, class count), so users never type them.
    * ``monitor``: the validation metric checkpoints track, and whether higher is better.
    """

    default_datamodule: ClassVar[str]
    data_links: ClassVar[tuple[str, ...]] = ()
    monitor: ClassVar[tuple[str, str]] = ("val/loss", "min")
