"""The efficient-attention families train inside the registered models, from the CLI, on the real corpora."""

from __future__ import annotations

import warnings

import pytest

from tests.helpers.cli import flags, hparams, tiny_fit, trainer_budget
from tests.helpers.training import mean, train_sentiment
from zoo.attention import IncompatibleAttentionError
from zoo.datamodules import SST2DataModule
from zoo.models import Transformer

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
    run = tiny_fit(
        "sentiment",
        *flags("data", path=shared_data / "sst2", limit_train=500),
        *flags("model", attention=attention, attention_kwargs=VARIANTS[attention]),
        *trainer_budget(3, 1),
    )
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "images" / "attention_example0.png").is_file()
    assert hparams(run)["attention"] == attention


@pytest.mark.parametrize(
    "attention", [a if a in FAST_CAUSAL else pytest.param(a, marks=pytest.mark.slow) for a in CAUSAL]
)
def test_transformer_fits_from_the_cli(shared_data, in_tmp, attention: str) -> None:
    run = tiny_fit(
        "transformer",
        *flags("data", path=shared_data / "fra-eng.zip", limit_train=500, vocab_size=600),
        *flags("model", attention=attention, attention_kwargs=VARIANTS[attention]),
        *trainer_budget(3, 0),  # translation's validation decodes with beam search: skipped
    )
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert hparams(run)["attention"] == attention


def test_transformer_refuses_linformer_with_the_compatible_names() -> None:
    with pytest.raises(
        IncompatibleAttentionError,
        match=r"'linformer' cannot be used by the Transformer's decoder .* causal masking\. Compatible .*performer",
    ):
        Transformer(vocab_size=50, d_model=16, num_heads=2, attention="linformer")


@pytest.mark.slow
@pytest.mark.parametrize("attention", list(VARIANTS))
def test_short_sst2_run_lowers_the_loss(shared_data, in_tmp, attention: str) -> None:
    data = SST2DataModule(path=str(shared_data / "sst2"), batch_size=64, limit_train=8000)
    losses, metrics = train_sentiment(
        data, in_tmp, max_steps=200, attention=attention, attention_kwargs=VARIANTS[attention]
    )
    assert mean(losses[-30:]) < mean(losses[:30]) - 0.05
    assert metrics["val/acc"] > 0.58
