"""The fra-eng data and the translation model that ``bench train`` and ``bench decode`` measure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zoo.datamodules import FraEngDataModule
from zoo.tasks import MODEL_REGISTRY
from zoo.tasks import TranslationTask

__all__ = ["RECIPES", "TranslationSetup", "build_data", "build_task"]

#: Sizes that replace a model's defaults in the benchmarks: for ``transformer``, the reference
#: notes' recipe (2 + 2 blocks, 256 hidden, 4 heads, FFN 64, dropout 0.2; batch 128).
RECIPES: dict[str, dict[str, Any]] = {
    "transformer": {"d_model": 256, "num_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2, "ffn_hidden": 64, "dropout": 0.2},
}


@dataclass(frozen=True)
class TranslationSetup:
    """Which model and data a translation benchmark builds."""

    model: str = "transformer"
    data_path: str | None = None
    batch: int = 128
    vocab_size: int = 8000
    limit_train: int | None = None
    attention: str | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    torch_compile: bool = False


def build_data(setup: TranslationSetup) -> FraEngDataModule:
    """The fra-eng data module (downloaded and cached if ``data_path`` is None)."""
    return FraEngDataModule(path=setup.data_path, batch_size=setup.batch, vocab_size=setup.vocab_size, limit_train=setup.limit_train)


def build_task(setup: TranslationSetup, data: FraEngDataModule, checkpoint: str | None = None) -> TranslationTask:
    """The registered translation model with the recipe's sizes, ``model_kwargs`` on top, or
    the model of a checkpoint."""
    task_class = MODEL_REGISTRY.get(setup.model)
    if not issubclass(task_class, TranslationTask):
        translation = [e.name for e in MODEL_REGISTRY.entries() if issubclass(e.obj, TranslationTask)]
        raise ValueError(f"Model {setup.model!r} is not a translation model; these are: {', '.join(translation)}.")
    if checkpoint is not None:
        return task_class.load_from_checkpoint(checkpoint, map_location="cpu", torch_compile=setup.torch_compile)
    kwargs = {**RECIPES.get(MODEL_REGISTRY.resolve(setup.model), {}), **setup.model_kwargs}
    if setup.attention is not None:
        kwargs["attention"] = setup.attention
    links = {name: getattr(data, name) for name in task_class.data_links}
    return task_class(**links, **kwargs, heatmap_examples=0, torch_compile=setup.torch_compile)
