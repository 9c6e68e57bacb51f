"""Checkpoints: every model's checkpoint loads with ``weights_only``, ``zoo.load_checkpoint``
rebuilds the model through the registry and predicts like the trained model, the CLI predicts
from a checkpoint alone, runs record their seed, versions and config, and bad files are one
clear error."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import yaml

import zoo
from tests.helpers import SHARED_DATA
from tests.helpers.cli import QUIET
from tests.helpers.training import quiet_trainer
from zoo.commands import main
from zoo.datamodules import FraEngDataModule, SST2DataModule, SyntheticRegressionDataModule
from zoo.errors import CheckpointError
from zoo.provenance import RECORD_FORMAT, package_versions
from zoo.tasks import NadarayaWatson, Sentiment, Seq2SeqTranslator, TransformerTranslator

INPUTS: dict[str, list[Any]] = {
    "nadaraya_watson": [0.5, 2.0, 4.5],
    "sentiment": ["a gripping, beautiful film", "dull and far too long", "unknownword"],
    "transformer": ["I am cold.", "Where is the station?"],
    "seq2seq": ["I am cold.", "Where is the station?"],
}


def _fit(task: L.LightningModule, data: L.LightningDataModule, root: Path, name: str) -> Path:
    trainer = quiet_trainer(root, max_steps=3, limit_val_batches=1, num_sanity_val_steps=0)
    trainer.fit(task, datamodule=data)
    path = root / f"{name}.ckpt"
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[L.LightningModule, Path]]:
    """Each registered model trained for a few steps on real data, with its checkpoint."""
    root = tmp_path_factory.mktemp("trained")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZOO_CACHE_DIR", str(root / "cache"))
        models: dict[str, tuple[L.LightningModule, Path]] = {}
        L.seed_everything(0)
        task = NadarayaWatson()
        models["nadaraya_watson"] = (task, _fit(task, SyntheticRegressionDataModule(), root, "nadaraya_watson"))
        sst2 = SST2DataModule(path=str(SHARED_DATA / "sst2"), limit_train=300, batch_size=32)
        task = Sentiment(
            vocab_size=sst2.vocab_size, d_model=16, num_heads=2, num_layers=1, ffn_hidden=32, heatmap_examples=0
        )
        models["sentiment"] = (task, _fit(task, sst2, root, "sentiment"))
        fra = FraEngDataModule(path=str(SHARED_DATA / "fra-eng.zip"), limit_train=300, vocab_size=200, batch_size=32)
        links = {
            "vocab_size": fra.vocab_size,
            "padding_idx": fra.padding_idx,
            "bos_idx": fra.bos_idx,
            "eos_idx": fra.eos_idx,
        }
        small = {"heatmap_examples": 0, "max_decode_len": 12, "beam_size": 2}
        task = TransformerTranslator(
            **links, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, ffn_hidden=32, **small
        )
        models["transformer"] = (task, _fit(task, fra, root, "transformer"))
        task = Seq2SeqTranslator(**links, embed_dim=16, hidden_size=16, num_layers=1, **small)
        models["seq2seq"] = (task, _fit(task, fra, root, "seq2seq"))
    return models


MODELS = list(INPUTS)


@pytest.mark.parametrize("name", MODELS)
def test_every_checkpoint_loads_with_weights_only_and_records_the_run(trained, name) -> None:
    checkpoint = torch.load(trained[name][1], weights_only=True)
    record = checkpoint["zoo"]
    assert record["model"] == name and record["seed"] == 0 and record["format"] == RECORD_FORMAT
    assert record["versions"] == package_versions()
    assert (
        record["versions"]["torch"] == str(torch.__version__) and record["versions"]["attention-zoo"] == zoo.__version__
    )
    assert ("codec" in record) == (name != "nadaraya_watson"), "text models carry their vocabulary or tokenizer"


@pytest.mark.parametrize("name", MODELS)
def test_load_checkpoint_rebuilds_the_model_and_predicts_like_the_trained_one(
    trained, name, tmp_path, monkeypatch
) -> None:
    task, path = trained[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "empty-cache"))  # nothing but the checkpoint
    loaded = zoo.load_checkpoint(path)
    assert type(loaded) is zoo.tasks.MODEL_REGISTRY.get(name) and not loaded.training
    expected_state = task.state_dict()
    assert loaded.state_dict().keys() == expected_state.keys()
    assert all(torch.equal(value, expected_state[key]) for key, value in loaded.state_dict().items())
    if task.codec is not None:
        assert loaded.codec is not task.codec and loaded.codec.state_dict() == task.codec.state_dict()
    predictions = loaded.predict(INPUTS[name])
    assert len(predictions) == len(INPUTS[name])
    expected = task.predict(INPUTS[name])
    for got, want in zip(predictions, expected):
        assert got.keys() == want.keys()
        for key in got:
            assert got[key] == (pytest.approx(want[key], abs=1e-5) if isinstance(want[key], float) else want[key])


@pytest.mark.parametrize("name", ["sentiment", "transformer"])
def test_predict_from_raw_inputs_equals_the_lightning_predict_path(trained, name, shared_data, in_tmp) -> None:
    task, _ = trained[name]
    texts = INPUTS[name]
    if name == "sentiment":
        data = SST2DataModule(path=str(shared_data / "sst2"), limit_train=300, predict_texts=texts)
    else:
        data = FraEngDataModule(
            path=str(shared_data / "fra-eng.zip"), limit_train=300, vocab_size=200, predict_texts=texts
        )
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    through_lightning = [row for batch in trainer.predict(task, datamodule=data) for row in batch]
    direct = task.predict(texts)
    assert [row.keys() for row in direct] == [row.keys() for row in through_lightning]
    for got, want in zip(direct, through_lightning):
        for key in got:
            assert got[key] == (pytest.approx(want[key], abs=1e-5) if isinstance(want[key], float) else want[key])


@pytest.mark.parametrize("name", ["sentiment", "transformer", "nadaraya_watson"])
def test_cli_predicts_from_a_checkpoint_alone(trained, name, tmp_path, monkeypatch, capsys) -> None:
    _, path = trained[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "empty-cache"))
    main(["predict", "--ckpt_path", str(path), "--data.predict_texts", json.dumps(INPUTS[name])])
    lines = capsys.readouterr().out.strip().splitlines()
    expected = zoo.load_checkpoint(path).predict(INPUTS[name])
    assert lines == [
        "\t".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()) for row in expected
    ]
    assert not (tmp_path / "empty-cache").exists(), "no data was read"


def test_cli_predict_file_from_a_checkpoint_alone(trained, tmp_path, capsys) -> None:
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("I am cold.\n\nWhere is the station?\n")
    main(["predict", "--ckpt_path", str(trained["transformer"][1]), "--data.predict_file", str(inputs)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["I am cold.", "Where is the station?"]


def test_checkpoint_without_a_zoo_record_is_found_by_its_cli_class_path(trained, tmp_path) -> None:
    """Checkpoints from before the record: LightningCLI's class path names the registered model."""
    checkpoint = torch.load(trained["nadaraya_watson"][1], weights_only=True)
    del checkpoint["zoo"]
    checkpoint["hyper_parameters"]["_class_path"] = "zoo.tasks.regression.NadarayaWatson"
    torch.save(checkpoint, tmp_path / "old.ckpt")
    loaded = zoo.load_checkpoint(tmp_path / "old.ckpt")
    assert type(loaded) is NadarayaWatson
    assert loaded.predict([1.0]) == trained["nadaraya_watson"][0].predict([1.0])


def test_a_sentiment_checkpoint_still_loads_as_sentiment(trained, tmp_path) -> None:
    """``sentiment`` is now the classifier in its sentiment configuration; checkpoints named by its
    record or by its LightningCLI class path load as that model, not as ``classifier``."""
    task, path = trained["sentiment"]
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["zoo"]["model"] == "sentiment"
    del checkpoint["zoo"]["model"]
    checkpoint["hyper_parameters"]["_class_path"] = "zoo.tasks.classification.Sentiment"
    torch.save(checkpoint, tmp_path / "old.ckpt")
    loaded = zoo.load_checkpoint(tmp_path / "old.ckpt")
    assert type(loaded) is Sentiment
    assert loaded.predict(INPUTS["sentiment"]) == task.predict(INPUTS["sentiment"])


# -- bad checkpoints --------------------------------------------------------------------------------


class _Payload:
    """Unpickling this object calls ``os.mkdir(marker)``: what a malicious checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


@pytest.fixture
def malicious(trained, tmp_path) -> tuple[Path, Path]:
    """A real checkpoint with an object that runs code when unpickled, and the marker it would create."""
    checkpoint = torch.load(trained["sentiment"][1], weights_only=True)
    marker = tmp_path / "code-was-executed"
    checkpoint["zoo"]["payload"] = _Payload(marker)
    path = tmp_path / "malicious.ckpt"
    torch.save(checkpoint, path)
    return path, marker


def test_a_malicious_checkpoint_is_refused_and_never_executed(malicious, in_tmp, capsys) -> None:
    path, marker = malicious
    with pytest.raises(CheckpointError, match="holds objects that would run code when loaded.*posix.mkdir"):
        zoo.load_checkpoint(path)
    for args in (
        ["predict", "--ckpt_path", str(path), "--data.predict_texts", '["fine"]'],
        ["predict", "--model", "sentiment", "--ckpt_path", str(path)],
        ["fit", "--model", "sentiment", "--ckpt_path", str(path)],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: Refusing to load") and "Traceback" not in err
    assert not marker.exists(), "the payload never ran"


@pytest.fixture
def bad_files(trained, tmp_path) -> dict[str, Path]:
    good = trained["nadaraya_watson"][1].read_bytes()
    files = {
        "truncated": good[: len(good) // 2],
        "text": b"epoch: 3\nthis is not a checkpoint\n",
        "empty": b"",
    }
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / f"{name}.ckpt"
        paths[name].write_bytes(content)
    paths["tensor_list"] = tmp_path / "tensor_list.ckpt"
    torch.save([torch.zeros(2)], paths["tensor_list"])
    return paths


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("truncated", "is not a readable checkpoint: it is truncated, damaged or another kind of file (RuntimeError"),
        ("text", "is not a readable checkpoint"),
        ("empty", "is not a readable checkpoint"),
        ("tensor_list", "is a PyTorch file but not a Lightning checkpoint"),
    ],
)
def test_unreadable_files_are_one_clear_error(bad_files, kind, message, in_tmp, capsys) -> None:
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(")):
        zoo.load_checkpoint(bad_files[kind])
    for args in (
        ["predict", "--ckpt_path", str(bad_files[kind]), "--data.predict_texts", "[1.0]"],
        ["test", "--model", "nadaraya_watson", "--ckpt_path", str(bad_files[kind])],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message.split(" (")[0] in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 2  # the message and the ZOO_DEBUG hint


def test_missing_checkpoint_file(in_tmp, capsys) -> None:
    with pytest.raises(FileNotFoundError, match="No checkpoint file at 'nowhere.ckpt'"):
        zoo.load_checkpoint("nowhere.ckpt")
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--ckpt_path", "nowhere.ckpt", "--data.predict_texts", "[1.0]"])
    assert exit_info.value.code == 2 and "No checkpoint file at 'nowhere.ckpt'" in capsys.readouterr().err


@pytest.mark.parametrize(("model", "subcommand"), [("transformer", "predict"), ("nadaraya_watson", "test")])
def test_checkpoint_of_another_model_is_refused_before_anything_runs(
    trained, model, subcommand, in_tmp, capsys
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([subcommand, "--model", model, "--ckpt_path", str(trained["sentiment"][1])])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"holds a 'sentiment' model, not '{model}': pass --model sentiment" in err and "Traceback" not in err
    assert not (in_tmp / "runs").exists()


def test_checkpoint_of_a_model_outside_the_zoo(tmp_path) -> None:
    class Outsider(L.LightningModule):
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(width, 1)

    path = tmp_path / "outsider.ckpt"
    torch.save({"state_dict": Outsider().state_dict(), "hyper_parameters": {"width": 3}}, path)
    with pytest.raises(
        CheckpointError, match="was not saved by a registered zoo model. Registered models: .*sentiment"
    ):
        zoo.load_checkpoint(path)


def test_weights_that_do_not_fit_their_hyperparameters(trained, tmp_path) -> None:
    checkpoint = torch.load(trained["sentiment"][1], weights_only=True)
    checkpoint["hyper_parameters"]["d_model"] = 24  # as if the file were edited or mixed up
    torch.save(checkpoint, tmp_path / "mixed.ckpt")
    with pytest.raises(
        CheckpointError, match="do not fit the 'sentiment' model its hyperparameters describe: .*size mismatch"
    ):
        zoo.load_checkpoint(tmp_path / "mixed.ckpt")


# -- what the CLI records with every run --------------------------------------------------------------


def test_cli_run_records_seed_versions_and_config(in_tmp, caplog) -> None:
    caplog.set_level(logging.INFO)
    main(["fit", "--model", "nadaraya_watson", "--seed_everything", "true", "--trainer.max_epochs", "2", *QUIET])
    run = in_tmp / "runs" / "nadaraya_watson" / "version_0"
    config = yaml.safe_load((run / "config.yaml").read_text())
    seed = config["seed_everything"]
    assert isinstance(seed, int) and not isinstance(seed, bool), "the seed actually drawn, not 'true'"
    assert config["model"]["init_args"]["attention"] == "gaussian_kernel" and config["trainer"]["max_epochs"] == 2
    versions = json.loads((run / "versions.json").read_text())
    assert versions == package_versions()
    record = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["zoo"]
    assert record["seed"] == seed and record["versions"] == versions and record["model"] == "nadaraya_watson"

    main(
        [
            "fit",
            "--model",
            "nadaraya_watson",
            "--ckpt_path",
            str(run / "checkpoints" / "last.ckpt"),
            "--trainer.max_epochs",
            "3",
            *QUIET,
        ]
    )
    resumed_run = in_tmp / "runs" / "nadaraya_watson" / "version_1"
    resumed = yaml.safe_load((resumed_run / "config.yaml").read_text())
    assert resumed["weights_only"] is True, "Lightning resumes from the checkpoint with weights_only"
    assert "Restoring states from the checkpoint path" in caplog.text
