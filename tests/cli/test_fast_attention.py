"""``local`` and ``linear`` attention train inside the registered models, from the CLI and the Trainer."""

from __future__ import annotations

import json

import lightning as L
import pytest
import yaml

from tests.helpers import LossRecorder
from zoo.cli import main
from zoo.datamodules import FraEngDataModule, SST2DataModule
from zoo.tasks import Sentiment, TransformerTranslator

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
VARIANTS = [("local", {"window": 4}), ("linear", {"chunk_size": 8})]
IDS = ["local", "linear"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_transformer_fits_from_the_cli(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    main(
        [
            "fit",
            "--model",
            "transformer",
            "--data.path",
            str(shared_data / "fra-eng.zip"),
            "--data.limit_train",
            "1000",
            "--data.vocab_size",
            "600",
            "--model.d_model",
            "32",
            "--model.ffn_hidden",
            "64",
            "--model.num_encoder_layers",
            "1",
            "--model.num_decoder_layers",
            "1",
            "--model.attention",
            attention,
            "--model.attention_kwargs",
            json.dumps(kwargs),
            "--trainer.max_epochs",
            "1",
            "--trainer.limit_train_batches",
            "5",
            "--trainer.limit_val_batches",
            "2",
            *QUIET,
        ]
    )
    run = sorted((in_tmp / "runs" / "transformer").glob("version_*"))[-1]
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "images" / "cross_attention_example0.png").is_file()
    assert yaml.safe_load((run / "hparams.yaml").read_text())["attention"] == attention


@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_sentiment_fits_from_the_cli(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    main(
        [
            "fit",
            "--model",
            "sentiment",
            "--data.path",
            str(shared_data / "sst2"),
            "--data.limit_train",
            "2000",
            "--model.attention",
            attention,
            "--model.attention_kwargs",
            json.dumps(kwargs),
            "--trainer.max_epochs",
            "1",
            "--trainer.limit_train_batches",
            "10",
            "--trainer.limit_val_batches",
            "2",
            *QUIET,
        ]
    )
    run = sorted((in_tmp / "runs" / "sentiment").glob("version_*"))[-1]
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "images" / "attention_example0.png").is_file()


@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_short_sst2_run_lowers_the_loss(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    data = SST2DataModule(path=str(shared_data / "sst2"), batch_size=64, limit_train=8000)
    L.seed_everything(0)
    task = Sentiment(
        vocab_size=data.vocab_size,
        padding_idx=data.padding_idx,
        num_classes=data.num_classes,
        d_model=64,
        num_heads=4,
        num_layers=1,
        ffn_hidden=128,
        warmup_steps=20,
        heatmap_examples=0,
        attention=attention,
        attention_kwargs=kwargs,
    )
    recorder = LossRecorder()
    trainer = L.Trainer(
        max_steps=200,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
        default_root_dir=in_tmp,
        num_sanity_val_steps=0,
    )
    trainer.fit(task, datamodule=data)
    assert _mean(recorder.losses[-30:]) < _mean(recorder.losses[:30]) - 0.05
    assert trainer.validate(task, datamodule=data, verbose=False)[0]["val/acc"] > 0.58


@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_short_translation_run_lowers_the_loss(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    """As for ``dot_product`` in test_translation: far below the unigram level (about 5.5 nats)."""
    data = FraEngDataModule(path=str(shared_data / "fra-eng.zip"), batch_size=32, vocab_size=1000, limit_train=256)
    L.seed_everything(0)
    task = TransformerTranslator(
        vocab_size=data.vocab_size,
        padding_idx=data.padding_idx,
        bos_idx=data.bos_idx,
        eos_idx=data.eos_idx,
        d_model=64,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=1,
        ffn_hidden=128,
        warmup_steps=20,
        lr=2e-3,
        heatmap_examples=0,
        label_smoothing=0.0,
        attention=attention,
        attention_kwargs=kwargs,
    )
    recorder = LossRecorder()
    trainer = L.Trainer(
        max_steps=300,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
        default_root_dir=in_tmp,
        limit_val_batches=0,
    )
    trainer.fit(task, datamodule=data)
    first, last = _mean(recorder.losses[:8]), _mean(recorder.losses[-8:])
    assert last < 0.5 * first and last < 4.0
