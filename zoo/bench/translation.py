"""The fra-eng data and the translation model that ``bench train`` and ``bench decode`` measure.

Both are built through the CLI (:func:`~zoo.bench.build.build_from_cli`), so a benchmark
measures what ``python -m zoo fit --model NAME`` trains: the model's code defaults and its
default config's data settings, with the benchmark's flags on top. There is no separate recipe
to keep in step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from zoo.bench.build import build_from_cli
from zoo.datamodules import FraEngDataModule
from zoo.errors import ConfigurationError
from zoo.tasks import MODEL_REGISTRY, TranslationTask

__all__ = ["TranslationSetup", "build", "cli_arguments"]


@dataclass(frozen=True)
class TranslationSetup:
    """Which model and data a translation benchmark builds (``None``: the zoo's default)."""

    model: str = "transformer"
    data_path: str | None = None
    batch: int | None = None
    vocab_size: int | None = None
    limit_train: int | None = None
    attention: str | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    torch_compile: bool = False


def cli_arguments(setup: TranslationSetup) -> list[str]:
    """The ``python -m zoo`` flags that build ``setup``'s model and data."""
    args = ["--model", setup.model, "--model.heatmap_examples", "0", "--trainer.logger", "false"]
    for flag, value in (
        ("--data.path", setup.data_path),
        ("--data.batch_size", setup.batch),
        ("--data.vocab_size", setup.vocab_size),
        ("--data.limit_train", setup.limit_train),
        ("--model.attention", setup.attention),
    ):
        if value is not None:
            args += [flag, str(value)]
    for name, value in setup.model_kwargs.items():
        args += [f"--model.{name}", json.dumps(value)]
    if setup.torch_compile:
        args += ["--model.torch_compile", "true"]
    return args


def build(setup: TranslationSetup, checkpoint: str | None = None) -> tuple[TranslationTask, FraEngDataModule]:
    """The registered translation model and its fra-eng data module, as ``zoo fit`` would build
    them (the data downloaded and cached if ``data_path`` is None); with ``checkpoint``, the
    model of that checkpoint instead."""
    task_class = MODEL_REGISTRY.get(setup.model)
    if not issubclass(task_class, TranslationTask):
        translation = [e.name for e in MODEL_REGISTRY.entries() if issubclass(e.obj, TranslationTask)]
        raise ConfigurationError(
            f"Model {setup.model!r} is not a translation model; these are: {', '.join(translation)}."
        )
    cli = build_from_cli(cli_arguments(setup))
    task = cli.model
    if checkpoint is not None:
        task = task_class.load_from_checkpoint(checkpoint, map_location="cpu", torch_compile=setup.torch_compile)
    return task, cli.datamodule
