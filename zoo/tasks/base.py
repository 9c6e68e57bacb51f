"""What every zoo task shares: how the CLI finds its defaults, how it links data sizes, and the
``torch_compile`` option."""

from __future__ import annotations

from typing import ClassVar

import lightning as L
from torch import nn

__all__ = ["ZooTask"]


class ZooTask(L.LightningModule):
    """Base of the registered models' LightningModules.

    Class attributes tell the CLI what it needs before parsing:

    * ``default_datamodule``: registered data-module name used when none is given.
    * ``data_links``: constructor arguments filled from data-module attributes of the same
      name at instantiation (vocabulary size, padding id, class count), so users never type them.
    * ``monitor``: the validation metric checkpoints track, and whether higher is better.

    Subclasses hold their architecture in ``self.model``.

    Args:
        torch_compile: Compile ``self.model`` with :func:`torch.compile` when the trainer sets
            the model up (``--model.torch_compile true``). Checkpoints are the same with and
            without it, so a run may be resumed, tested or served either way.
    """

    default_datamodule: ClassVar[str]
    data_links: ClassVar[tuple[str, ...]] = ()
    monitor: ClassVar[tuple[str, str]] = ("val/loss", "min")
    model: nn.Module

    def __init__(self, torch_compile: bool = False) -> None:
        super().__init__()
        self.torch_compile = torch_compile
        self._model_compiled = False

    def configure_model(self) -> None:
        """Compile ``self.model`` in place, once, if ``torch_compile`` is set.

        ``nn.Module.compile`` compiles the module's call and leaves the module itself in place,
        so parameter names and checkpoint keys do not change; ``torch.compile(model)`` would
        wrap it and prefix every key with ``_orig_mod.``.
        """
        if self.torch_compile and not self._model_compiled:
            self.model.compile()
            self._model_compiled = True
