"""The README's first command, ``make train``: the Makefile's parity comparison resolves, and each of
its attention stacks trains on the data it names (a few steps, on a few examples)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml

from zoo.commands import main
from zoo.compare.grid import parse_grid

ROOT = Path(__file__).resolve().parents[1]


def _train_command() -> list[str]:
    """``make train``'s zoo command, as make would run it (the grid variable substituted)."""
    makefile = (ROOT / "Makefile").read_text()
    grid = re.search(r"^FRONT_GRID := (.+)$", makefile, re.MULTILINE).group(1)
    recipe = re.search(r"^train: setup\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    line = recipe.replace("\\\n", " ").replace("$(FRONT_GRID)", grid).replace("$(BIN)/python", "python")
    return shlex.split(line)


COMMAND = _train_command()
GRID = parse_grid([COMMAND[COMMAND.index("--grid") + 1]])
CONFIG = ROOT / COMMAND[COMMAND.index("--config") + 1]


def test_make_train_compares_softmax_and_gated_deltanet_with_and_without_negative_eigenvalues_on_parity() -> None:
    assert COMMAND[:6] == ["python", "-m", "zoo", "compare", "--model", "recall"]
    assert GRID == {
        "model.attention": [
            "[{name: softmax, conv_size: 4}]",
            "gated_deltanet",
            "[{name: gated_deltanet, negative_eigenvalues: true}]",
        ]
    }
    assert COMMAND[COMMAND.index("--plot_against") + 1] == "length"
    config = yaml.safe_load(CONFIG.read_text())
    assert config["data"]["class_path"].endswith("ParityDataModule")


def test_make_train_runs_parity_as_grazzi_et_al_do(capsys) -> None:
    """Resolved as the runs resolve it: parity's vocabulary of 3 and batches of 256, not the MQAR
    defaults of the recall model's own configuration."""
    with pytest.raises(SystemExit):
        main(["fit", "--model", "recall", "--config", str(CONFIG), "--print_config"])
    data = yaml.safe_load(capsys.readouterr().out)["data"]["init_args"]
    assert (data["vocab_size"], data["batch_size"], data["train_lengths"]) == (3, 256, [3, 40])


@pytest.mark.parametrize("attention", GRID["model.attention"])
def test_each_stack_of_make_train_trains_on_its_data(attention: str, in_tmp: Path) -> None:
    main(["fit", "--model", "recall", "--config", str(CONFIG), "--model.attention", attention,
          "--data.train_batches", "3", "--trainer.val_check_interval", "3", "--data.num_test", "16",
          "--data.num_validation", "4",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"])  # fmt: skip
    (checkpoint,) = in_tmp.glob("runs/recall/version_0/checkpoints/last.ckpt")
    assert torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"] == 3
