"""``local`` and ``linear`` attention train inside the registered models, from the CLI and the Trainer."""

from __future__ import annotations

import pytest

from tests.helpers.cli import flags, hparams, tiny_fit, trainer_budget
from tests.helpers.training import mean, train_sentiment, train_translator
from zoo.datamodules import FraEngDataModule, SST2DataModule

VARIANTS = [("local", {"window": 4}), ("linear", {"chunk_size": 8})]
IDS = ["local", "linear"]


@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_transformer_fits_from_the_cli(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    run = tiny_fit(
        "transformer",
        *flags("data", path=shared_data / "fra-eng.zip", limit_train=1000, vocab_size=600),
        *flags("model", attention=attention, attention_kwargs=kwargs),
        *trainer_budget(5, 2),
    )
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "images" / "cross_attention_example0.png").is_file()
    assert hparams(run)["attention"] == attention


@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_sentiment_fits_from_the_cli(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    run = tiny_fit(
        "sentiment",
        *flags("data", path=shared_data / "sst2", limit_train=2000),
        *flags("model", attention=attention, attention_kwargs=kwargs),
        *trainer_budget(10, 2),
    )
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "images" / "attention_example0.png").is_file()


@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_short_sst2_run_lowers_the_loss(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    data = SST2DataModule(path=str(shared_data / "sst2"), batch_size=64, limit_train=8000)
    losses, metrics = train_sentiment(data, in_tmp, max_steps=200, attention=attention, attention_kwargs=kwargs)
    assert mean(losses[-30:]) < mean(losses[:30]) - 0.05
    assert metrics["val/acc"] > 0.58


@pytest.mark.slow  # 26 s; the default run has their SST-2 learning and their translation fit from the CLI
@pytest.mark.parametrize(("attention", "kwargs"), VARIANTS, ids=IDS)
def test_short_translation_run_lowers_the_loss(shared_data, in_tmp, attention: str, kwargs: dict) -> None:
    """As for ``dot_product`` in test_translation: far below the unigram level (about 5.5 nats)."""
    data = FraEngDataModule(path=str(shared_data / "fra-eng.zip"), batch_size=32, vocab_size=1000, limit_train=256)
    losses = train_translator(
        "transformer", data, in_tmp, max_steps=300, label_smoothing=0.0, attention=attention, attention_kwargs=kwargs
    )
    first, last = mean(losses[:8]), mean(losses[-8:])
    assert last < 0.5 * first and last < 4.0
