"""The shipped YAMLs against the code: each parses, each value it sets is the one a run uses,
model settings are written once (in the code's defaults), and overlays set only what differs."""

from __future__ import annotations

import inspect
from pathlib import Path

import lightning as L
import pytest
import yaml

from zoo.cli import CONFIG_DIR
from zoo.commands import main
from zoo.tasks import MODEL_REGISTRY

CONFIGS = sorted(CONFIG_DIR.glob("*.yaml"))
DEFAULTS = [path for path in CONFIGS if path.stem in MODEL_REGISTRY]
OVERLAYS = [path for path in CONFIGS if path.stem not in MODEL_REGISTRY]


def _stack(path: Path) -> list[Path]:
    """The configs a run of ``path`` loads after the model's default, in order: an overlay named
    ``<overlay>_<suffix>`` (the CPU-sized ``classifier_listops_cpu``) goes on ``<overlay>``."""
    parent = CONFIG_DIR / f"{path.stem.rsplit('_', 1)[0]}.yaml"
    return [*_stack(parent), path] if parent != path and parent in OVERLAYS else [path]


def _model_name(path: Path) -> str:
    if path.stem in MODEL_REGISTRY:
        return path.stem
    class_path = yaml.safe_load(_stack(path)[0].read_text())["model"]["class_path"]
    return next(e.name for e in MODEL_REGISTRY.entries() if f"{e.obj.__module__}.{e.obj.__qualname__}" == class_path)


def _resolved(capsys, *args: str) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def _code_defaults(task: type) -> dict:
    """The defaults of the task's own arguments and of the architecture it forwards the rest to."""
    parameters = inspect.signature(task).parameters
    probe = {name: value for name, value in {"vocab_size": 11, "num_classes": 2}.items() if name in parameters}
    instance = task(**probe)
    return {name: value for name, value in instance.hparams.items() if name not in probe}


def test_there_is_a_default_config_per_model_and_overlays_exist() -> None:
    assert {path.stem for path in DEFAULTS} == set(MODEL_REGISTRY.list())
    assert {path.stem for path in OVERLAYS} == {
        "classifier_listops",
        "classifier_listops_cpu",
        "classifier_lra_text",
        "classifier_lra_text_cpu",
        "gpt_shakespeare",
        "gpt_shakespeare_cpu",
        "gpt_shakespeare_cpu_tuned",
        *(
            f"gpt_shakespeare_cpu_{recipe}"
            for recipe in (
                *("deepseekv32", "deepseekv4", "falconh1", "gemma3", "gemma4", "gptoss", "jamba", "kimilinear"),
                *("mimov2flash", "minimax01", "olmohybrid", "qwen35", "qwen3next", "samba"),
            )
        ),
        "recall_mad",
        "recall_mqar",
        "recall_parity",
        "sentiment_imdb",
        "sentiment_local",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_every_value_a_shipped_config_sets_is_the_one_a_run_uses(path, capsys, in_tmp) -> None:
    config = yaml.safe_load(path.read_text())
    stack = [arg for layer in _stack(path) for arg in ("--config", str(layer))]
    resolved = _resolved(capsys, "--model", _model_name(path), *stack)
    for section in ("model", "data"):
        for key, value in (config.get(section) or {}).get("init_args", {}).items():
            assert resolved[section]["init_args"][key] == value, (section, key)
    for key, value in (config.get("trainer") or {}).items():
        assert resolved["trainer"][key] == value, key


@pytest.mark.parametrize("path", DEFAULTS, ids=lambda path: path.stem)
def test_default_configs_leave_the_model_to_its_code_defaults(path) -> None:
    """A model's hyperparameters are written once, in the code; its YAML holds data and trainer."""
    assert set(yaml.safe_load(path.read_text())) <= {"seed_everything", "data", "trainer"}


@pytest.mark.parametrize("path", OVERLAYS, ids=lambda path: path.stem)
def test_overlays_set_only_what_differs_from_the_defaults(path) -> None:
    """Each overlay's model and trainer settings differ from what the configs beneath it (the
    model's default config, and the overlay it goes on, if any) and the code (the task's and the
    Trainer's defaults) already give."""
    name = _model_name(path)
    defaults = _code_defaults(MODEL_REGISTRY.get(name))
    trainer = {arg: p.default for arg, p in inspect.signature(L.Trainer).parameters.items()}
    trainer |= yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())["trainer"]
    for layer in _stack(path)[:-1]:
        beneath = yaml.safe_load(layer.read_text())
        defaults |= beneath["model"]["init_args"]
        trainer |= beneath.get("trainer") or {}
    config = yaml.safe_load(path.read_text())
    for key, value in config["model"]["init_args"].items():
        assert key in defaults and defaults[key] != value, key
    for key, value in (config.get("trainer") or {}).items():
        assert trainer[key] != value, key


def test_the_transformer_defaults_are_the_readme_recipe(capsys, in_tmp) -> None:
    """README "Results": 2 + 2 pre-LN blocks, d_model 256, 4 heads, FFN 1024, no dropout,
    AdamW at 2e-3 with 400 warm-up steps, label smoothing 0.1, 4700 steps of batch 128."""
    resolved = _resolved(capsys, "--model", "transformer")
    model = resolved["model"]["init_args"]
    assert {
        k: model[k]
        for k in (
            "d_model",
            "num_heads",
            "num_encoder_layers",
            "num_decoder_layers",
            "ffn_hidden",
            "dropout",
            "norm_first",
            "lr",
            "warmup_steps",
            "label_smoothing",
        )
    } == {
        "d_model": 256,
        "num_heads": 4,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "ffn_hidden": 1024,
        "dropout": 0.0,
        "norm_first": True,
        "lr": 0.002,
        "warmup_steps": 400,
        "label_smoothing": 0.1,
    }
    assert resolved["trainer"]["max_steps"] == 4700 and resolved["data"]["init_args"]["batch_size"] == 128


def test_architecture_arguments_are_checked_and_recorded_with_their_defaults() -> None:
    """Forwarded model arguments: a misspelt one names the closest; the hyperparameters a
    checkpoint keeps include every architecture default, so a later default change cannot
    rebuild a different model from an old checkpoint."""
    from zoo.models import Transformer
    from zoo.registry import UnknownArgumentError
    from zoo.tasks import TransformerTranslator

    with pytest.raises(UnknownArgumentError, match="did you mean 'd_model'"):
        TransformerTranslator(vocab_size=11, d_modle=32)
    task = TransformerTranslator(vocab_size=11, d_model=32, num_heads=2)
    architecture = {
        name: p.default for name, p in inspect.signature(Transformer).parameters.items() if name != "vocab_size"
    }
    assert {name: task.hparams[name] for name in architecture} == architecture | {"d_model": 32, "num_heads": 2}
    rebuilt = TransformerTranslator(**task.hparams)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in task.state_dict().items()}
