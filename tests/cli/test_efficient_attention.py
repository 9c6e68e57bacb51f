"""The efficient-attention families train inside the registered models, from the CLI, on the real corpora."""

from __future__ import annotations

import json
import warnings

import lightning as L
import pytest
import yaml

from tests.helpers import LossRecorder
from zoo.attention import IncompatibleAttentionError
from zoo.cli import main
from zoo.datamodules import SST2DataModule
from zoo.models import Transformer
from zoo.tasks import Sentiment

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
FAST = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1", *QUIET]
# translation's validation decodes with beam search: the transformer runs skip it
NO_VALIDATION = [
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "3",
    "--trainer.limit_val_batches",
    "0",
    *QUIET,
]
VARIANTS = {
    "performer": {"num_features": 16, "chunk_size": 8},
    "linformer": {"max_len": 256, "k": 8},
    "longformer": {"window": 4},
    "bigbird": {"block_size": 2, "num_random_blocks": 1},
    "sparse": {"block_size": 4},
}
CAUSAL = ["performer", "longformer", "sparse"]
FAST_CAUSAL = {"performer", "longformer"}  # sparse shares longformer's pattern machinery: slow only


@pytest.fixture(autouse=True)
def _quiet_short_sequences():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="BigBirdAttention: .* computed exactly")
        yield


@pytest.mark.parametrize("attention", list(VARIANTS))
def test_sentiment_fits_from_the_cli(shared_data, in_tmp, attention: str) -> None:
    main(
        [
            "fit",
            "--model",
            "sentiment",
            "--data.path",
            str(shared_data / "sst2"),
            "--data.limit_train",
            "500",
            "--model.d_model",
            "32",
            "--model.ffn_hidden",
            "64",
            "--model.num_layers",
            "1",
            "--model.attention",
            attention,
            "--model.attention_kwargs",
            json.dumps(VARIANTS[attention]),
            *FAST,
        ]
    )
    run = max((in_tmp / "runs" / "sentiment").glob("version_*"))
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "images" / "attention_example0.png").is_file()
    assert yaml.safe_load((run / "hparams.yaml").read_text())["attention"] == attention


@pytest.mark.parametrize(
    "attention", [a if a in FAST_CAUSAL else pytest.param(a, marks=pytest.mark.slow) for a in CAUSAL]
)
def test_transformer_fits_from_the_cli(shared_data, in_tmp, attention: str) -> None:
    main(
        [
            "fit",
            "--model",
            "transformer",
            "--data.path",
            str(shared_data / "fra-eng.zip"),
            "--data.limit_train",
            "500",
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
            json.dumps(VARIANTS[attention]),
            *NO_VALIDATION,
        ]
    )
    run = max((in_tmp / "runs" / "transformer").glob("version_*"))
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert yaml.safe_load((run / "hparams.yaml").read_text())["attention"] == attention


def test_transformer_refuses_linformer_with_the_compatible_names() -> None:
    with pytest.raises(
        IncompatibleAttentionError,
        match=r"'linformer' cannot be used by the Transformer .* causal masking\. Compatible .*performer",
    ):
        Transformer(vocab_size=50, d_model=16, num_heads=2, attention="linformer")


@pytest.mark.slow
@pytest.mark.parametrize("attention", list(VARIANTS))
def test_short_sst2_run_lowers_the_loss(shared_data, in_tmp, attention: str) -> None:
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
        attention_kwargs=VARIANTS[attention],
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
    assert sum(recorder.losses[-30:]) / 30 < sum(recorder.losses[:30]) / 30 - 0.05
    assert trainer.validate(task, datamodule=data, verbose=False)[0]["val/acc"] > 0.58
