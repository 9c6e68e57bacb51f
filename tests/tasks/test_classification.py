"""The classifier and its sentiment configuration on real SST-2: it learns, any registered scoring
trains, the CLI works, ``--model classifier`` names its data and pools a classification token."""

from __future__ import annotations

import pytest
import torch
import yaml

import zoo
from tests.helpers import PROJECT_ROOT
from tests.helpers.cli import QUIET, flags, hparams, tiny_fit, trainer_budget
from tests.helpers.training import mean, train_sentiment
from zoo.commands import main
from zoo.datamodules import SST2DataModule
from zoo.tasks import Classifier, Sentiment


@pytest.fixture
def sst2_slice(shared_data, in_tmp) -> SST2DataModule:
    return SST2DataModule(path=str(shared_data / "sst2"), batch_size=64, limit_train=8000)


def test_short_sst2_run_lowers_the_loss_and_beats_chance(sst2_slice, tmp_path) -> None:
    losses, metrics = train_sentiment(sst2_slice, tmp_path, max_steps=250)
    assert mean(losses[-30:]) < mean(losses[:30]) - 0.1
    assert metrics["val/acc"] > 0.62  # chance on the balanced validation split is about 0.51
    assert 0.0 < metrics["val/f1"] <= 1.0


@zoo.register_attention("test_cosine")
class CosineAttention(zoo.Attention):
    """A user's variant: cosine similarity with a learned temperature."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.temperature = torch.nn.Parameter(torch.tensor(5.0))

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q, k = torch.nn.functional.normalize(queries, dim=-1), torch.nn.functional.normalize(keys, dim=-1)
        return self.temperature * q @ k.transpose(-2, -1)


@pytest.mark.parametrize("attention", ["additive", "test_cosine"])
def test_other_scoring_attentions_train(sst2_slice, tmp_path, attention) -> None:
    losses, metrics = train_sentiment(sst2_slice, tmp_path, max_steps=200, attention=attention)
    assert mean(losses[-30:]) < mean(losses[:30]) - 0.05
    assert metrics["val/acc"] > 0.58


def test_cli_fit_predict_and_print_config_round_trip(shared_data, in_tmp, capsys) -> None:
    data = flags("data", path=shared_data / "sst2", limit_train=2000)
    run = tiny_fit("sentiment", *data, *trainer_budget(10, 2), small=False)
    recorded = hparams(run)
    assert recorded["vocab_size"] > 1000 and recorded["padding_idx"] == 0  # linked from the data module
    assert (run / "images" / "attention_example0.png").is_file()
    capsys.readouterr()

    main(
        [
            "predict",
            "--model",
            "sentiment",
            "--ckpt_path",
            str(run / "checkpoints" / "last.ckpt"),
            *data,
            "--data.predict_texts",
            '["a gripping, beautiful film", "dull and far too long"]',
            *QUIET,
        ]
    )
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines() if line.count("\t") == 2]
    assert [line[0] for line in lines] == ["a gripping, beautiful film", "dull and far too long"]
    assert all(label in ("negative", "positive") and 0.5 <= float(p) <= 1.0 for _, label, p in lines)

    with pytest.raises(SystemExit):
        main(["fit", "--model", "sentiment", *data, "--model.num_heads", "2", "--print_config"])
    printed = in_tmp / "sentiment.yaml"
    printed.write_text(capsys.readouterr().out)
    main(["fit", "--config", str(printed), "--trainer.fast_dev_run", "true", *QUIET])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--data.path", "does/not/exist"], "does/not/exist"),
        (["--data.predict_texts", '["  "]'], "empty"),
        (["--model.attention", "multi_head"], "Compatible registered names"),
        (["--model.attention", "dot_prodcut"], "Did you mean 'dot_product'"),
    ],
)
def test_cli_bad_input_is_one_clear_message(shared_data, in_tmp, capsys, extra, message) -> None:
    args = [
        "predict" if "predict_texts" in extra[0] else "fit",
        "--model",
        "sentiment",
        *flags("data", path=shared_data / "sst2", limit_train=500),
        *extra,
        *QUIET,
    ]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(("config", "corpus"), [("sentiment_imdb.yaml", "imdb"), ("sentiment_local.yaml", "sst2")])
def test_recipe_configs_reach_the_model(shared_data, in_tmp, config, corpus) -> None:
    """Every model setting of a recipe YAML is what the trained model was built with."""
    path = PROJECT_ROOT / "configs" / config
    run = tiny_fit(
        "sentiment",
        "--config",
        str(path),
        *flags("data", path=shared_data / corpus, limit_train=300),
        *flags("trainer", max_steps=2, limit_val_batches=1),
        small=False,
    )
    recorded = hparams(run)
    recipe = yaml.safe_load(path.read_text())["model"]["init_args"]
    assert {key: recorded[key] for key in recipe} == recipe


def test_cli_fits_the_classifier_with_a_classification_token(shared_data, in_tmp, capsys) -> None:
    """``classifier`` is the general model: it takes the data it is given (here SST-2), pools a
    classification token, and draws its attention with the token labelled."""
    run = tiny_fit(
        "classifier",
        "--data",
        "sst2",
        *flags("data", path=shared_data / "sst2", limit_train=300),
        *flags("model", pooling="cls", d_model=32),
        *flags("trainer", max_epochs=1, limit_train_batches=3, limit_val_batches=1),
        small=False,
    )
    recorded = hparams(run)
    assert recorded["pooling"] == "cls" and recorded["vocab_size"] > 100  # linked from the data module
    assert (run / "images" / "attention_example0.png").is_file()
    task = zoo.load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert type(task) is Classifier and task.model.cls_token is not None
    assert task.predict(["a gripping, beautiful film"])[0]["label"] in ("negative", "positive")

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "classifier", "--trainer.fast_dev_run", "true", *QUIET])
    assert exit_info.value.code == 2 and "data" in capsys.readouterr().err


def test_sentiment_is_the_classifier_with_sst2_by_default() -> None:
    assert issubclass(Sentiment, Classifier) and Sentiment.default_datamodule == "sst2"
    assert Classifier.default_datamodule is None
    assert zoo.tasks.MODEL_REGISTRY.get("sentiment_classifier") is Sentiment
