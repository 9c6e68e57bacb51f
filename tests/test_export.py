"""Export and load: every task, trained for a few steps through the CLI, is exported with
``python -m zoo export`` and loaded with ``zoo.from_pretrained``, which predicts exactly as
``zoo.load_checkpoint`` of the same checkpoint does; the folder holds no pickle and loads with
unpickling disabled; the card shows the run's metrics and the command that trained it; a
missing or unexpected tensor, or a missing hyperparameter, is one line naming it; a non-empty
``--out`` is refused; a hybrid attention list survives."""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import zoo
from tests.helpers import SHARED_DATA
from tests.helpers.cli import flags, tiny_fit, trainer_budget
from zoo.commands import main
from zoo.errors import CheckpointError
from zoo.tasks import Classifier

INPUTS: dict[str, list[Any]] = {
    "nadaraya_watson": [0.5, 2.0, 4.5],
    "sentiment": ["a gripping, beautiful film", "dull and far too long", "unknownword"],
    "transformer": ["I am cold.", "Where is the station?"],
    "seq2seq": ["I am cold.", "Where is the station?"],
    "gpt": ["ROMEO:", "JULIET:"],
}
MODELS = list(INPUTS)
HYBRID = ["local", {"name": "dot_product", "scale": 0.5}]
FILES = {
    "nadaraya_watson": ["README.md", "config.json", "model.safetensors"],
    "sentiment": ["README.md", "codec.json", "config.json", "model.safetensors", "tokenizer.json"],
    "transformer": ["README.md", "codec.json", "config.json", "model.safetensors", "tokenizer.json"],
    "seq2seq": ["README.md", "codec.json", "config.json", "model.safetensors", "tokenizer.json"],
    "gpt": ["README.md", "codec.json", "config.json", "model.safetensors"],
}


def _fit(model: str, *extra: str, small: bool = True) -> tuple[Path, str]:
    """A tiny CLI fit: its run directory and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run = tiny_fit(model, *extra, small=small)
    return run, printed.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Each task fitted for a few steps through the CLI (sentiment with a hybrid stack): its run
    directory and the fit's output."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA}")
    root = tmp_path_factory.mktemp("runs")
    fra = flags("data", path=SHARED_DATA / "fra-eng.zip", limit_train=300, vocab_size=300)
    translator = flags("model", heatmap_examples=0, max_decode_len=12, beam_size=2)
    steps = trainer_budget(2, 1)  # an epoch of two steps, then validation: metrics and a best checkpoint
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("ZOO_CACHE_DIR", str(root / "cache"))
        return {
            "nadaraya_watson": _fit(
                "nadaraya_watson", "--trainer.max_epochs", "2", "--test_after_fit", "true", small=False
            ),
            "sentiment": _fit(
                "sentiment",
                *flags("data", path=SHARED_DATA / "sst2", limit_train=192),
                *flags("model", num_layers=2, heatmap_examples=0, attention=HYBRID),
                *steps,
            ),
            "transformer": _fit("transformer", *fra, *translator, *steps),
            "seq2seq": _fit("seq2seq", *fra, *translator, *steps),
            "gpt": _fit(
                "gpt",
                *flags("data", path=SHARED_DATA / "tinyshakespeare" / "input.txt", train_windows=16),
                *flags("model", max_new_tokens=20),
                *steps,
                *flags("trainer", val_check_interval=2),  # the recipe validates every 250 steps
            ),
        }


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each run directory exported with ``python -m zoo export``."""
    root = tmp_path_factory.mktemp("exported")
    for name, (run, _) in runs.items():
        with contextlib.redirect_stdout(io.StringIO()):
            main(["export", "--ckpt_path", str(run), "--out", str(root / name)])
    return {name: root / name for name in runs}


def _best_checkpoint(run: Path) -> Path:
    """The run's best checkpoint: the one beside last.ckpt (the runs keep one best)."""
    (best,) = [path for path in (run / "checkpoints").glob("*.ckpt") if path.name != "last.ckpt"]
    return best


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("something was unpickled")


@pytest.mark.parametrize("name", MODELS)
def test_export_then_from_pretrained_predicts_as_the_checkpoint(runs, exported, name, monkeypatch) -> None:
    folder, checkpoint = exported[name], _best_checkpoint(runs[name][0])
    assert sorted(path.name for path in folder.iterdir()) == FILES[name]
    for path in folder.iterdir():  # JSON, safetensors and the card's Markdown: nothing else
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".safetensors":
            with safe_open(path, framework="pt") as weights:
                assert weights.metadata()["format"] == "pt"
        else:
            assert path.name == "README.md" and path.read_text(encoding="utf-8").startswith("---\n")
    for unpickle in (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load"):
        monkeypatch.setattr(*unpickle, _refuse)
    loaded = zoo.from_pretrained(folder)
    monkeypatch.undo()

    expected = zoo.load_checkpoint(checkpoint)
    assert type(loaded) is type(expected) and not loaded.training
    assert loaded.state_dict().keys() == expected.state_dict().keys()
    assert all(torch.equal(value, expected.state_dict()[key]) for key, value in loaded.state_dict().items())
    if expected.codec is not None:
        assert loaded.codec.state_dict() == expected.codec.state_dict()
    assert loaded.predict(INPUTS[name]) == expected.predict(INPUTS[name])


def test_the_card_shows_the_metrics_and_the_command_that_trained_the_run(runs, exported) -> None:
    for name in ("nadaraya_watson", "sentiment"):
        run, printed = runs[name]
        card = (exported[name] / "README.md").read_text(encoding="utf-8")
        (command,) = (json.loads(line)["argv"] for line in (run / "commands.jsonl").read_text().splitlines())
        assert command[:5] == ["python", "-m", "zoo", "fit", "--model"] and command[5] == name
        assert f"measured by `{shlex.join(command)}`" in card
        assert f"```bash\n{shlex.join(command)}\n```" in card, "the command that trained it"
        # the closing line of the fit: "zoo fit: test/mse 0.2527, val/mse 0.309, ..."
        (summary,) = [line for line in printed.splitlines() if line.startswith("zoo fit: ")]
        metrics = dict(item.split(" ") for item in summary.removeprefix("zoo fit: ").split(", "))
        assert metrics, "the fit logged metrics"
        for metric, value in metrics.items():
            assert f"| `{metric}` | {value} |" in card
        assert f"exported from `{_best_checkpoint(run)}` (the best by `" in card
        assert "seed_everything: " in card and "## Data" in card and "licence" in card
    sentiment = (exported["sentiment"] / "README.md").read_text(encoding="utf-8")
    assert "| test: not measured in this run |" in sentiment
    assert "Socher et al. 2013" in sentiment and "pipeline_tag: text-classification" in sentiment
    assert "CC-BY 2.0" in (exported["transformer"] / "README.md").read_text(encoding="utf-8")


def test_a_hybrid_attention_list_survives_export(exported) -> None:
    config = json.loads((exported["sentiment"] / "config.json").read_text())
    assert config["attention"] == HYBRID and config["zoo"]["model"] == "sentiment"
    model = zoo.from_pretrained(exported["sentiment"])
    layers = [(block.attention.spec.name, dict(block.attention.spec.kwargs)) for block in model.model.blocks]
    assert layers == [("local", {}), ("dot_product", {"scale": 0.5})]


def test_predict_pretrained_prints_what_predict_from_the_checkpoint_prints(runs, exported, capsys) -> None:
    texts = json.dumps(INPUTS["transformer"])
    main(["predict", "--pretrained", str(exported["transformer"]), "--data.predict_texts", texts])
    from_folder = capsys.readouterr().out
    main(["predict", "--ckpt_path", str(_best_checkpoint(runs["transformer"][0])), "--data.predict_texts", texts])
    assert from_folder == capsys.readouterr().out and from_folder.count("\n") == len(INPUTS["transformer"])


@pytest.fixture
def sentiment_copy(exported, tmp_path) -> Path:
    """A copy of the exported sentiment folder, to damage."""
    return Path(shutil.copytree(exported["sentiment"], tmp_path / "sentiment"))


def _expect_one_line(folder: Path, message: str, capsys) -> None:
    """Loading ``folder`` fails with one line holding ``message``, in Python and on the command line."""
    with pytest.raises(CheckpointError) as error:
        zoo.from_pretrained(folder)
    assert message in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--pretrained", str(folder), "--data.predict_texts", '["fine"]'])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err.splitlines()[0] and len(err.splitlines()) == 2


def test_a_missing_and_an_unexpected_tensor_are_each_one_line_naming_it(sentiment_copy, capsys) -> None:
    path = sentiment_copy / "model.safetensors"
    weights = load_file(path)
    dropped = sorted(weights)[0]
    save_file({key: value for key, value in weights.items() if key != dropped}, path, metadata={"format": "pt"})
    _expect_one_line(sentiment_copy, f"missing tensor {dropped}.", capsys)
    save_file({**weights, "model.extra": torch.zeros(2)}, path, metadata={"format": "pt"})
    _expect_one_line(sentiment_copy, "unexpected tensor model.extra.", capsys)


def test_a_config_without_what_the_model_needs_is_one_line_naming_it(sentiment_copy, capsys) -> None:
    path = sentiment_copy / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({key: value for key, value in config.items() if key != "vocab_size"}))
    _expect_one_line(sentiment_copy, "config.json lacks 'vocab_size', which the 'sentiment' model needs.", capsys)
    del config["zoo"]["model"]
    path.write_text(json.dumps(config))
    _expect_one_line(sentiment_copy, "config.json lacks zoo.model (str), which loading the model needs.", capsys)


def test_loading_refuses_what_is_not_there_or_not_of_its_class(exported, tmp_path) -> None:
    with pytest.raises(CheckpointError, match="Cannot load 'no/such/folder': there is no such folder here"):
        zoo.from_pretrained("no/such/folder")
    with pytest.raises(CheckpointError, match=f"'{tmp_path}' has no config.json"):
        zoo.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="holds a 'transformer' model, not a Classifier"):
        Classifier.from_pretrained(exported["transformer"])
    assert type(Classifier.from_pretrained(exported["sentiment"])).__name__ == "Sentiment"


def test_a_hub_id_loads_from_the_hub_cache(exported, tmp_path) -> None:
    """A Hub model id, offline (HF_HUB_OFFLINE=1): the folder laid out as huggingface_hub caches a download."""
    commit = "0" * 40
    repository = tmp_path / "cache" / "models--user--kernel-regression"
    shutil.copytree(exported["nadaraya_watson"], repository / "snapshots" / commit)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(commit)
    model = zoo.from_pretrained("user/kernel-regression", cache_dir=tmp_path / "cache")
    assert model.predict([1.0]) == zoo.from_pretrained(exported["nadaraya_watson"]).predict([1.0])


def test_export_refuses_a_folder_that_holds_something_unless_overwrite(runs, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    export = ["export", "--ckpt_path", str(runs["nadaraya_watson"][0]), "--out", str(out)]
    with pytest.raises(SystemExit) as exit_info:
        main(export)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"'{out}' is not empty" in err and len(err.splitlines()) == 2
    assert [path.name for path in out.iterdir()] == ["notes.txt"]
    main([*export, "--overwrite"])
    assert sorted(path.name for path in out.iterdir()) == FILES["nadaraya_watson"]
    assert [path.name for path in tmp_path.iterdir()] == ["out"], "no temporary folder left beside it"
