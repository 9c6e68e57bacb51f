"""Plugins from the outside: an installed distribution's entry points, ``--import`` of a file or a
dotted module, ``ZOO_IMPORTS`` in child processes, and the CLI's answers when a plugin is wrong.

The installed plugin is a real distribution (a module plus ``.dist-info`` with
``entry_points.txt``) on ``sys.path``, found by ``importlib.metadata``; the global registries
rediscover entry points as a fresh process would.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import zoo
from tests.helpers import write_distribution
from tests.helpers.cli import QUIET, SMALL, flags
from zoo.commands import main
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.errors import PluginImportError
from zoo.plugins import ENV_VAR, pop_import_flags
from zoo.tasks import MODEL_REGISTRY

REGISTRIES = (zoo.ATTENTION_REGISTRY, MODEL_REGISTRY, DATAMODULE_REGISTRY)

ATTENTION_SOURCE = '''
import torch
import zoo


class {name}(zoo.Attention):
    """Cosine similarity with a learned temperature; counts its calls so tests see it ran."""

    calls = 0

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.temperature = torch.nn.Parameter(torch.tensor(5.0))

    def score(self, queries, keys):
        type(self).calls += 1
        q = torch.nn.functional.normalize(queries, dim=-1)
        k = torch.nn.functional.normalize(keys, dim=-1)
        return self.temperature * q @ k.transpose(-2, -1)
'''

INSTALLED_SOURCE = (
    ATTENTION_SOURCE.format(name="CosineAttention")
    + '''

class BidirectionalOnly(CosineAttention):
    """Cannot mask the future, and says so."""

    supports_causal = False


from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer


class DecayingSum(RecurrentLayer):
    """A layer of its own: a running sum of key-value products that decays by a gate of the input."""

    calls = 0

    def __init__(self, embed_dim: int, num_heads: int, *, conv_size: int = 4, **options) -> None:
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=embed_dim, conv_size=conv_size, **options)
        self.forget = torch.nn.Linear(embed_dim, num_heads)

    def prepare(self, queries, keys, values, layer_input):
        type(self).calls += 1
        log_decay = torch.nn.functional.logsigmoid(self.forget(layer_input)).to(queries.dtype)
        return Recurrence(queries, keys, values, log_decay.transpose(-1, -2).unsqueeze(-1))


from zoo.datamodules import SyntheticRegressionDataModule
from zoo.tasks import NadarayaWatson


class FewerPoints(SyntheticRegressionDataModule):
    """The synthetic regression data with fewer points."""

    def __init__(self, num_train: int = 20, seed: int = 0) -> None:
        super().__init__(num_train=num_train, num_val=10, num_test=10, seed=seed)


class PluginRegression(NadarayaWatson):
    """Kernel regression whose default data is the plugin's."""

    default_datamodule = "plugin_points"
'''
)

DIST = "zoo-cli-plugin"
MODULE = "zoo_cli_plugin"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Leave the registries, sys.modules, sys.path and ZOO_IMPORTS as they were."""
    before = {registry: set(registry.list()) for registry in REGISTRIES}
    modules = set(sys.modules)
    monkeypatch.setattr(sys, "path", [*sys.path])
    saved_env = os.environ.pop(ENV_VAR, None)
    yield
    for registry, names in before.items():
        for name in set(registry.list()) - names:
            registry.unregister(name)
        registry.failed_plugins.clear()
        registry.conflicts.clear()
    for name in set(sys.modules) - modules:
        if name.startswith(("zoo_cli_plugin", "zoo_file_plugin", "zoo_dotted_plugin", "broken_plugin")):
            del sys.modules[name]
    os.environ.pop(ENV_VAR, None)
    if saved_env is not None:
        os.environ[ENV_VAR] = saved_env


@pytest.fixture
def installed(tmp_path: Path) -> object:
    """The distribution ``zoo-cli-plugin`` with an attention, a model and a data module."""
    site = tmp_path / "site"
    site.mkdir()
    write_distribution(
        site,
        DIST,
        {MODULE: INSTALLED_SOURCE},
        {
            "zoo.attention": {
                "plugin_cosine": f"{MODULE}:CosineAttention",
                "plugin_bidirectional": f"{MODULE}:BidirectionalOnly",
            },
            "zoo.attention_layers": {"plugin_decaying_sum": f"{MODULE}:DecayingSum"},
            "zoo.models": {"plugin_regression": f"{MODULE}:PluginRegression"},
            "zoo.datamodules": {"plugin_points": f"{MODULE}:FewerPoints"},
        },
    )
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    for registry in REGISTRIES:  # what a fresh process does on its first lookup
        registry.reload_plugins()
    return importlib.import_module(MODULE)


def _fra_eng(shared_data: Path) -> list[str]:
    data = flags("data", path=shared_data / "fra-eng.zip", limit_train=500, vocab_size=300)
    return [*data, *SMALL["transformer"], *flags("model", heatmap_examples=0)]


def _sst2(shared_data: Path) -> list[str]:
    return [*flags("data", path=shared_data / "sst2", limit_train=500), *SMALL["sentiment"]]


# -- installed distributions: entry points ------------------------------------------------------


def test_list_shows_plugins_of_every_group_with_their_distribution(installed, capsys) -> None:
    main(["list"])
    out = capsys.readouterr().out
    attention, models = out.split("models:")
    models, data = models.split("data modules:")
    scoring, layers = attention.split("attention layers:")
    assert f"plugin_cosine [from {DIST}]" in scoring and f"plugin_bidirectional [from {DIST}]" in scoring
    assert f"plugin_decaying_sum [from {DIST}]" in layers and "plugin_decaying_sum" not in scoring
    assert f"plugin_regression [from {DIST}]" in models
    assert f"plugin_points [from {DIST}]" in data
    assert "dot_product (aliases: scaled_dot_product)\n" in attention, "built-ins carry no source tag"


def test_plugin_model_data_and_attention_train_from_the_cli(installed, in_tmp, capsys) -> None:
    main(
        [
            "fit",
            "--model",
            "plugin_regression",
            "--model.attention",
            "plugin_cosine",
            "--trainer.max_epochs",
            "2",
            *QUIET,
        ]
    )
    assert installed.CosineAttention.calls > 0
    run = in_tmp / "runs" / "plugin_regression" / "version_0"
    config = (run / "config.yaml").read_text()
    assert f"class_path: {MODULE}.FewerPoints" in config, "the plugin model's default data is the plugin's"
    assert "num_train: 20" in config and "attention: plugin_cosine" in config


def test_an_installed_layer_trains_a_gpt_in_a_hybrid_stack_and_keeps_the_contract(installed, in_tmp) -> None:
    corpus = in_tmp / "corpus.txt"
    corpus.write_text("a layer of its own, found through its entry point.\n" * 40)
    main(
        [
            "fit",
            "--model",
            "gpt",
            "--data",
            "zoo.datamodules.text.TextDataModule",
            *flags("data", path=corpus, block_size=16, batch_size=4),
            *flags("model", d_model=16, num_heads=2, num_layers=2),
            "--model.attention",
            "[plugin_decaying_sum, dot_product]",
            "--trainer.max_steps",
            "2",
            *QUIET,
        ]
    )
    assert installed.DecayingSum.calls > 0
    assert zoo.check_attention("plugin_decaying_sum", dtypes=()).passed[-2:] == ("state_decoding", "state_size")


def test_transformer_trains_with_an_installed_attention(installed, shared_data, in_tmp) -> None:
    main(
        [
            "fit",
            "--model",
            "transformer",
            "--model.attention",
            "plugin_cosine",
            *_fra_eng(shared_data),
            "--trainer.fast_dev_run",
            "true",
            *QUIET,
        ]
    )
    assert installed.CosineAttention.calls > 0


def test_sentiment_trains_with_an_installed_attention(installed, shared_data, in_tmp) -> None:
    main(
        [
            "fit",
            "--model",
            "sentiment",
            "--model.attention",
            "plugin_cosine",
            *_sst2(shared_data),
            "--trainer.fast_dev_run",
            "true",
            *QUIET,
        ]
    )
    assert installed.CosineAttention.calls > 0


def test_transformer_refuses_a_plugin_that_cannot_mask_the_future(installed, shared_data, in_tmp, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--model",
                "transformer",
                "--model.attention",
                "plugin_bidirectional",
                *_fra_eng(shared_data),
                *QUIET,
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    message = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(message) == 1 and "Traceback" not in err
    assert "'plugin_bidirectional' cannot be used by the Transformer" in message[0] and "causal masking" in message[0]
    compatible = message[0].split("Compatible registered names: ")[1].rstrip(".").split(", ")
    assert "plugin_cosine" in compatible and "dot_product" in compatible and "plugin_bidirectional" not in compatible
    assert installed.BidirectionalOnly.calls == 0 and not list(in_tmp.glob("runs/transformer/*/checkpoints"))


def test_sentiment_accepts_the_plugin_the_transformer_refuses(installed, shared_data, in_tmp) -> None:
    main(
        [
            "fit",
            "--model",
            "sentiment",
            "--model.attention",
            "plugin_bidirectional",
            *_sst2(shared_data),
            "--trainer.fast_dev_run",
            "true",
            *QUIET,
        ]
    )
    assert installed.BidirectionalOnly.calls > 0, "an encoder needs no causal mask"


# -- modules that are not installed: --import -----------------------------------------------------


@pytest.fixture
def plugin_file(tmp_path: Path) -> Path:
    """A plugin being developed: a lone .py file registering ``file_cosine``."""
    file = tmp_path / "plugins" / "zoo_file_plugin.py"
    file.parent.mkdir()
    source = ATTENTION_SOURCE.format(name="FileCosine").replace(
        "class FileCosine", '@zoo.register_attention("file_cosine")\nclass FileCosine'
    )
    file.write_text(source)
    return file


@pytest.fixture
def dotted_module(tmp_path: Path) -> str:
    """A package on sys.path (not installed) whose submodule registers ``dotted_cosine``."""
    package = tmp_path / "packages" / "zoo_dotted_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    source = ATTENTION_SOURCE.format(name="DottedCosine").replace(
        "class DottedCosine", '@zoo.register_attention("dotted_cosine")\nclass DottedCosine'
    )
    (package / "attention.py").write_text(source)
    sys.path.insert(0, str(package.parent))
    importlib.invalidate_caches()
    return "zoo_dotted_plugin.attention"


def test_pop_import_flags_takes_both_spellings_anywhere() -> None:
    args = ["--import", "a.py", "fit", "--model", "x", "--import=pkg.mod", "--trainer.fast_dev_run", "true"]
    assert pop_import_flags(args) == (["fit", "--model", "x", "--trainer.fast_dev_run", "true"], ["a.py", "pkg.mod"])
    with pytest.raises(PluginImportError, match="needs a value"):
        pop_import_flags(["fit", "--import"])


def test_import_file_before_parsing_sentiment(plugin_file, shared_data, in_tmp, capsys) -> None:
    main(
        [
            "fit",
            "--import",
            str(plugin_file),
            "--model",
            "sentiment",
            "--model.attention",
            "file_cosine",
            *_sst2(shared_data),
            "--trainer.fast_dev_run",
            "true",
            *QUIET,
        ]
    )
    module = sys.modules["zoo_file_plugin"]
    assert module.FileCosine.calls > 0
    assert os.environ[ENV_VAR] == str(plugin_file.resolve()), "child processes import it too"
    assert str(plugin_file.parent) in sys.path, "spawned children can unpickle its classes"
    main(["list", "--import", str(plugin_file)])  # importing the same file again is a no-op
    assert "file_cosine [from zoo_file_plugin]" in capsys.readouterr().out


def test_import_dotted_module_before_parsing(dotted_module, in_tmp, capsys) -> None:
    main(
        [
            "fit",
            "--model",
            "nadaraya_watson",
            f"--import={dotted_module}",
            "--model.attention",
            "dotted_cosine",
            "--trainer.fast_dev_run",
            "true",
            *QUIET,
        ]
    )
    assert sys.modules[dotted_module].DottedCosine.calls > 0
    assert os.environ[ENV_VAR] == dotted_module


def test_zoo_imports_reach_a_child_process(plugin_file, dotted_module, tmp_path) -> None:
    """A process that never sees the command line (a spawned rank or worker) finds the plugins."""
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise RuntimeError('this plugin is broken')\n")
    packages = str(tmp_path / "packages")  # where dotted_module lives: on the child's path like any package
    env = {
        **os.environ,
        ENV_VAR: os.pathsep.join([str(plugin_file), dotted_module, str(broken)]),
        "PYTHONPATH": os.pathsep.join([packages, os.environ.get("PYTHONPATH", "")]),
    }
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("always")
        import zoo
        print(zoo.get_attention("file_cosine").__name__, zoo.get_attention("dotted_cosine").__name__)
    """)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["FileCosine", "DottedCosine"]
    assert "Skipping ZOO_IMPORTS entry" in result.stderr and "RuntimeError: this plugin is broken" in result.stderr


@pytest.mark.parametrize(
    ("source", "spec", "message"),
    [
        (None, "missing_plugin.py", "Cannot import plugin file 'missing_plugin.py': no such file."),
        (
            "raise RuntimeError('needs a GPU library')\n",
            "broken_plugin.py",
            "Could not import plugin file 'broken_plugin.py': RuntimeError: needs a GPU library",
        ),
        ("def oops(:\n", "broken_plugin.py", "Could not import plugin file 'broken_plugin.py': SyntaxError"),
        (
            None,
            "zoo_no_such_package.attention",
            "Could not import plugin module 'zoo_no_such_package.attention': ModuleNotFoundError",
        ),
        (None, "not a module", "give a .py file or a dotted module name"),
    ],
)
def test_import_errors_are_one_line_with_exit_code_2(in_tmp, capsys, source, spec, message) -> None:
    if source is not None:
        (in_tmp / spec).write_text(source)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "nadaraya_watson", "--import", spec, "--trainer.fast_dev_run", "true"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert "broken_plugin" not in sys.modules and ENV_VAR not in os.environ
