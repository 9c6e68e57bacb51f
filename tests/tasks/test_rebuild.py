"""A checkpoint and a Hugging Face folder are rebuilt by the one path (:mod:`zoo.tasks.rebuild`):
the same model stored both ways is refused with the same one line, naming each its own file, and
a tensor tied to another loads from either when it is stored once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from torch import Tensor, nn

import zoo
from zoo.errors import CheckpointError
from zoo.tasks import Classifier, ZooTask
from zoo.tasks.registry import MODEL_REGISTRY
from zoo.text.bytes import VOCAB_SIZE, ByteCodec

SMALL = {"d_model": 8, "num_heads": 2, "num_layers": 1, "ffn_hidden": 16, "heatmap_examples": 0}
FIT = "do not fit the 'classifier' model its hyperparameters describe:"

Damage = Callable[[dict[str, Tensor], dict[str, Any]], None]
"""Changes stored weights and hyperparameters in place."""


def _store(task: ZooTask, name: str, tmp_path: Path, damage: Damage) -> tuple[Path, Path]:
    """``task`` as a checkpoint and as a folder holding the same weights and hyperparameters,
    both changed by ``damage`` first."""
    folder = tmp_path / "folder"
    task.save_pretrained(folder)
    weights = {key: value.clone() for key, value in task.state_dict().items()}
    hyperparameters = dict(task.hparams)
    damage(weights, hyperparameters)
    checkpoint = tmp_path / "model.ckpt"
    torch.save({"state_dict": weights, "hyper_parameters": hyperparameters, "zoo": {"model": name}}, checkpoint)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({"zoo": config["zoo"], **hyperparameters}))
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return checkpoint, folder


def _drop(weights: dict[str, Tensor], hyperparameters: dict[str, Any]) -> None:
    del weights["model.classifier.bias"]


def _add(weights: dict[str, Tensor], hyperparameters: dict[str, Any]) -> None:
    weights["model.extra"] = torch.zeros(2)


def _reshape(weights: dict[str, Tensor], hyperparameters: dict[str, Any]) -> None:
    weights["model.classifier.weight"] = torch.zeros(3, 3)


def _forget_the_vocabulary(weights: dict[str, Tensor], hyperparameters: dict[str, Any]) -> None:
    del hyperparameters["vocab_size"]


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_drop, "The weights in {weights} " + FIT + " missing tensor model.classifier.bias."),
        (_add, "The weights in {weights} " + FIT + " unexpected tensor model.extra."),
        (_reshape, "The weights in {weights} " + FIT + " size mismatch for model.classifier.weight"),
        (_forget_the_vocabulary, "{hyperparameters} lacks 'vocab_size', which the 'classifier' model needs."),
    ],
    ids=["missing", "unexpected", "shape", "hyperparameter"],
)
def test_a_checkpoint_and_a_folder_are_refused_alike(damage: Damage, expected: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    task = Classifier(vocab_size=VOCAB_SIZE, num_classes=2, **SMALL)
    task.codec = ByteCodec(16, ["neg", "pos"])
    checkpoint, folder = _store(task, "classifier", tmp_path, damage)
    with pytest.raises(CheckpointError) as from_checkpoint:
        zoo.load_checkpoint(checkpoint)
    with pytest.raises(CheckpointError) as from_folder:
        zoo.from_pretrained(folder)
    files = {
        "checkpoint": {"weights": checkpoint, "hyperparameters": checkpoint},
        "folder": {"weights": folder / "model.safetensors", "hyperparameters": folder / "config.json"},
    }
    messages = {"checkpoint": str(from_checkpoint.value), "folder": str(from_folder.value)}
    for kind, message in messages.items():
        assert expected.format(**files[kind]) in message and "\n" not in message, kind
        for path in files[kind].values():
            messages[kind] = messages[kind].replace(str(path), "FILE")
    assert messages["checkpoint"] == messages["folder"]


class _Tied(nn.Module):
    """An embedding whose matrix is also the output layer's: two names, one tensor."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(5, width)
        self.output = nn.Linear(width, 5, bias=False)
        self.output.weight = self.embedding.weight


class TiedTask(ZooTask):
    """A task whose model ties two parameters."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = _Tied(width)


@pytest.fixture
def tied_task() -> Iterator[TiedTask]:
    MODEL_REGISTRY.add("tied_task", TiedTask)
    torch.manual_seed(0)
    try:
        yield TiedTask(width=3)
    finally:
        MODEL_REGISTRY.unregister("tied_task")


def _store_the_tied_tensor_once(weights: dict[str, Tensor], hyperparameters: dict[str, Any]) -> None:
    del weights["model.output.weight"]  # as safetensors' save_model writes it


def test_a_tied_tensor_stored_once_loads_into_both_names(tied_task: TiedTask, tmp_path: Path) -> None:
    checkpoint, folder = _store(tied_task, "tied_task", tmp_path, _store_the_tied_tensor_once)
    for loaded in (zoo.load_checkpoint(checkpoint), zoo.from_pretrained(folder)):
        assert loaded.model.output.weight is loaded.model.embedding.weight
        assert torch.equal(loaded.model.embedding.weight, tied_task.model.embedding.weight)
