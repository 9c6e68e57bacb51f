"""What every zoo task shares: how the CLI finds its defaults and links data sizes, what its
checkpoints record, predicting from raw inputs, the ``torch_compile`` option, and saving and
loading Hugging Face folders (:mod:`zoo.tasks.hub`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn

from zoo.arguments import check_kwargs
from zoo.provenance import RECORD_KEY, run_record
from zoo.tasks.hub import HubMixin
from zoo.tasks.registry import MODEL_REGISTRY
from zoo.text.codecs import Codec, restore_codec

__all__ = ["Codec", "ZooTask"]


class ZooTask(L.LightningModule, HubMixin):
    """Base of the registered models' LightningModules.

    Class attributes tell the CLI what it needs before parsing, and an exported folder what the
    model is:

    * ``default_datamodule``: registered data-module name used when none is given; ``None``:
      the model has no data of its own, so ``--data`` or a config must name one.
    * ``data_links``: constructor arguments filled from data-module attributes of the same
      name at instantiation (vocabulary size, padding id, class count), so users never type them.
    * ``monitor``: the validation metric checkpoints track, and whether higher is better.
    * ``codecs``: the kinds of :class:`Codec` the task predicts with (the first is what a saved
      codec that names no kind is), if it needs one.
    * ``kind``: what the task does (``regression``, ``classification``, ``translation``,
      ``language_model``), recorded in an exported folder's ``config.json`` and card.

    Subclasses hold their architecture in ``self.model``. Checkpoints carry the zoo's record
    under ``checkpoint["zoo"]``: the registered model name, the seed, the package versions and,
    for tasks with a codec, the data module's codec as plain data, so that
    :func:`zoo.load_checkpoint` can rebuild the model and :meth:`predict` from the checkpoint alone.
    ``save_pretrained``, ``push_to_hub`` and ``from_pretrained`` write and read the model as a
    Hugging Face folder (:class:`~zoo.tasks.hub.HubMixin`).

    Args:
        torch_compile: Compile ``self.model`` with :func:`torch.compile` when the trainer sets
            the model up (``--model.torch_compile true``). Checkpoints are the same with and
            without it, so a run may be resumed, tested or served either way.
    """

    default_datamodule: ClassVar[str | None] = None
    data_links: ClassVar[tuple[str, ...]] = ()
    monitor: ClassVar[tuple[str, str]] = ("val/loss", "min")
    codecs: ClassVar[tuple[type[Codec], ...]] = ()
    kind: ClassVar[str | None] = None
    model: nn.Module

    def __init__(self, torch_compile: bool = False) -> None:
        super().__init__()
        self.torch_compile = torch_compile
        self._model_compiled = False
        self.codec: Codec | None = None

    def save_model_hyperparameters(
        self, architecture: Callable[..., nn.Module], model_kwargs: Mapping[str, Any]
    ) -> None:
        """Add every hyperparameter of ``architecture`` that the task does not hold itself to
        ``self.hparams``, its defaults included, so that a checkpoint rebuilds the same model
        even after a default changes.

        The tasks take the architecture's hyperparameters as ``**model_kwargs`` and forward them,
        so each is written once, in the plain ``nn.Module``'s signature and docstring; the CLI
        still offers each as ``--model.NAME`` (jsonargparse follows the forwarded ``**kwargs``).
        Call it before building the model: a misspelt name fails here with the closest ones.
        """
        check_kwargs(architecture, dict(model_kwargs), what=getattr(architecture, "__name__", "the model"))
        bound = inspect.signature(architecture).bind_partial(**model_kwargs)
        bound.apply_defaults()
        self.hparams.update({name: value for name, value in bound.arguments.items() if name not in self.hparams})

    def configure_model(self) -> None:
        """Compile ``self.model`` in place, once, if ``torch_compile`` is set.

        ``nn.Module.compile`` compiles the module's call and leaves the module itself in place,
        so parameter names and checkpoint keys do not change; ``torch.compile(model)`` would
        wrap it and prefix every key with ``_orig_mod.``.
        """
        if self.torch_compile and not self._model_compiled:
            self.model.compile()
            self._model_compiled = True

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip as the Trainer asks; under FSDP, by the norm over every shard.

        Lightning's FSDP precision refuses ``gradient_clip_algorithm="norm"``, since one shard's
        norm is not the model's; the sharded module's own ``clip_grad_norm_`` reduces over the
        shards (Lightning's FSDP guide clips so). Every recipe clips, so without this none would
        train under ``--trainer.strategy fsdp``.
        """
        sharded = isinstance(self.trainer.strategy, FSDPStrategy)
        if sharded and gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            self.trainer.model.clip_grad_norm_(gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def setup(self, stage: str) -> None:
        """Adopt the data module's codec, so that checkpoints carry what predicting needs."""
        codec = getattr(self.trainer.datamodule, "codec", None)
        if self.codecs and isinstance(codec, self.codecs):
            self.codec = codec

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        record = run_record(MODEL_REGISTRY.name_of(type(self)))
        if self.codec is not None:
            record["codec"] = self.codec.state_dict()
        checkpoint[RECORD_KEY] = record

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = (checkpoint.get(RECORD_KEY) or {}).get("codec")
        if state is not None and self.codecs:
            self.codec = restore_codec(state, self.codecs)

    def predict(self, inputs: Sequence[Any]) -> list[dict[str, Any]]:
        """Predictions for raw inputs, one dictionary per input (the rows ``zoo predict`` prints)."""
        raise NotImplementedError(f"{type(self).__name__} does not predict from raw inputs.")

    def require_codec(self) -> Codec:
        """The codec, or an error that says where one comes from."""
        if self.codec is None:
            raise RuntimeError(
                f"{type(self).__name__} has no codec to turn raw inputs into tensors: load it with "
                f"zoo.load_checkpoint from a checkpoint that holds one, or train it with a data module "
                f"that provides one (its 'codec' attribute)."
            )
        return self.codec

    @contextmanager
    def inference(self) -> Iterator[None]:
        """Evaluation mode without gradients for the block; the previous mode is restored after."""
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.train(was_training)
