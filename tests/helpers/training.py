"""Short in-process training runs: a small task linked to its data module, a quiet Trainer, and
the fits whose losses and metrics the learning tests compare with their floors.

The small sizes are written here once; the floors stay in the tests that assert them.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L

from tests.helpers import LossRecorder
from zoo.datamodules import FraEngDataModule, SST2DataModule
from zoo.tasks import Sentiment, Seq2SeqTranslator, TransformerTranslator

__all__ = ["mean", "quiet_trainer", "small_sentiment", "small_translator", "train_sentiment", "train_translator"]


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def quiet_trainer(root: Path, **options) -> L.Trainer:
    """A Trainer that writes nothing (no logger, no checkpoints, no progress bar, no summary)
    unless ``options`` say otherwise (``logger=CSVLogger(...)``)."""
    quiet = {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return L.Trainer(default_root_dir=root, **{**quiet, **options})


def small_sentiment(data: SST2DataModule, **kwargs) -> Sentiment:
    """A one-layer sentiment classifier (d_model 64) over ``data``'s vocabulary and classes."""
    return Sentiment(
        vocab_size=data.vocab_size,
        padding_idx=data.padding_idx,
        num_classes=data.num_classes,
        d_model=64,
        num_heads=4,
        num_layers=1,
        ffn_hidden=128,
        warmup_steps=20,
        heatmap_examples=0,
        **kwargs,
    )


def small_translator(kind: str, data: FraEngDataModule, **kwargs) -> TransformerTranslator | Seq2SeqTranslator:
    """A one-layer ``transformer`` or ``seq2seq`` translator (width 64) over ``data``'s vocabulary."""
    links = {
        "vocab_size": data.vocab_size,
        "padding_idx": data.padding_idx,
        "bos_idx": data.bos_idx,
        "eos_idx": data.eos_idx,
    }
    if kind == "transformer":
        return TransformerTranslator(
            **links,
            d_model=64,
            num_heads=4,
            num_encoder_layers=1,
            num_decoder_layers=1,
            ffn_hidden=128,
            warmup_steps=20,
            lr=2e-3,
            heatmap_examples=0,
            **kwargs,
        )
    return Seq2SeqTranslator(
        **links, embed_dim=64, hidden_size=64, num_layers=1, warmup_steps=20, lr=3e-3, heatmap_examples=0, **kwargs
    )


def train_sentiment(
    data: SST2DataModule, root: Path, max_steps: int, **model_kwargs
) -> tuple[list[float], dict[str, float]]:
    """Seed 0, ``max_steps`` steps of :func:`small_sentiment`; the loss of every step and the
    validation metrics after."""
    L.seed_everything(0)
    task = small_sentiment(data, **model_kwargs)
    recorder = LossRecorder()
    trainer = quiet_trainer(root, max_steps=max_steps, callbacks=[recorder], num_sanity_val_steps=0)
    trainer.fit(task, datamodule=data)
    return recorder.losses, trainer.validate(task, datamodule=data, verbose=False)[0]


def train_translator(kind: str, data: FraEngDataModule, root: Path, max_steps: int, **model_kwargs) -> list[float]:
    """Seed 0, ``max_steps`` steps of :func:`small_translator` without validation (it decodes
    with beam search); the loss of every step."""
    L.seed_everything(0)
    task = small_translator(kind, data, **model_kwargs)
    recorder = LossRecorder()
    quiet_trainer(root, max_steps=max_steps, callbacks=[recorder], limit_val_batches=0).fit(task, datamodule=data)
    return recorder.losses
