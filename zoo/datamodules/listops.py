"""ListOps of the Long Range Arena: nested MIN/MAX/MED/SM expressions over digits, answer one digit.

The splits are generated once from ``generator_seed`` (:mod:`zoo.datamodules.listops_generator`)
and written atomically as the benchmark's tab-separated files (``basic_train.tsv``,
``basic_val.tsv``, ``basic_test.tsv``; columns ``Source`` and ``Target``), so other tools can
read them; ``settings.json`` beside them records what generated them. A directory that already
holds the three files, the benchmark's released ones included, is read as it is.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from zoo.datamodules.files import atomic_write_text
from zoo.datamodules.listops_generator import CLOSE, OPERATORS, generate
from zoo.datamodules.loaders import ResumableDataLoader, evaluation_loader
from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.sampling import EpochShuffleSampler
from zoo.datamodules.text_classification import EncodedTexts, PadCollator, default_cache_dir
from zoo.errors import DataError

__all__ = ["SPLIT_FILES", "VOCABULARY", "ListOpsDataModule", "encode", "read_tsv", "write_tsv"]

log = logging.getLogger(__name__)

#: The benchmark's tokens; id 0 pads. Parentheses of the released files are dropped, as its tokenizer does.
VOCABULARY = ("<pad>", *(str(digit) for digit in range(10)), *OPERATORS, CLOSE)
_IDS = {token: i for i, token in enumerate(VOCABULARY)}
SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
SETTINGS_FILE = "settings.json"


def encode(text: str) -> Tensor:
    """Token ids of an expression (``[MAX 2 9 ]``; ``(`` and ``)`` are skipped)."""
    tokens = [token for token in text.split() if token not in ("(", ")")]
    unknown = sorted(set(tokens) - _IDS.keys())
    if unknown:
        raise DataError(f"Not a ListOps expression: unknown tokens {unknown[:5]}; expected digits, {', '.join(OPERATORS)} and {CLOSE}.")
    return torch.tensor([_IDS[token] for token in tokens], dtype=torch.long)


def write_tsv(path: Path, examples: Sequence[tuple[str, int]]) -> None:
    """Write ``Source``/``Target`` rows to ``path`` through a temporary file and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["Source", "Target"])
            writer.writerows(examples)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_tsv(path: Path) -> list[tuple[str, int]]:
    """The ``(Source, Target)`` rows of a ListOps file, checked."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows or not {"Source", "Target"} <= rows[0].keys():
        raise DataError(f"{path} is not a ListOps file: expected a header 'Source<TAB>Target' and at least one row.")
    try:
        return [(row["Source"], int(row["Target"])) for row in rows]
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path} has a Target that is not a digit ({exc}).") from exc


@register_datamodule("listops")
class ListOpsDataModule(L.LightningDataModule):
    """ListOps (Long Range Arena): classify a nested expression of 500 to 2,000 tokens by its value.

    Train with the ``sentiment`` model (``vocab_size``, ``padding_idx`` and ``num_classes`` are
    linked from here). Generating the default 100,000 examples takes minutes, once per settings.

    Args:
        path: Directory of the TSV files; generated there when absent. Default: a cache directory
            per settings, ``$ZOO_CACHE_DIR/listops/<settings>`` (or ``~/.cache/attention-zoo/...``).
        num_train, num_val, num_test: Examples per split (distinct across splits).
        min_length, max_length: Kept expressions have ``min_length < tokens < max_length``, as in the benchmark.
        max_depth: Deepest nesting of operations.
        max_args: Most arguments of one operation (at least 2).
        generator_seed: Seed of the generated data: the same seed gives the same files.
        seed: Seed of the order of training batches (``zoo compare`` varies this one).
        batch_size: Examples per batch.
        num_workers: DataLoader worker processes.
    """

    vocab_size = len(VOCABULARY)
    padding_idx = 0
    num_classes = 10

    def __init__(
        self,
        path: str | None = None,
        num_train: int = 96_000,
        num_val: int = 2_000,
        num_test: int = 2_000,
        min_length: int = 500,
        max_length: int = 2_000,
        max_depth: int = 10,
        max_args: int = 10,
        generator_seed: int = 0,
        seed: int = 0,
        batch_size: int = 32,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        for name, value, minimum in (("num_train", num_train, 1), ("num_val", num_val, 1), ("num_test", num_test, 1),
                                     ("min_length", min_length, 0), ("max_depth", max_depth, 2), ("max_args", max_args, 2)):
            if value < minimum:
                raise DataError(f"{name} must be at least {minimum}, got {value}.")
        if max_length <= min_length + 4:
            raise DataError(f"max_length ({max_length}) must exceed min_length ({min_length}) by more than 4 to leave room for an expression.")
        self.save_hyperparameters()
        self.settings = {
            "num_train": num_train, "num_val": num_val, "num_test": num_test, "min_length": min_length,
            "max_length": max_length, "max_depth": max_depth, "max_args": max_args, "generator_seed": generator_seed,
        }
        name = "-".join(f"{value}" for value in self.settings.values())
        self.root = Path(path).expanduser() if path is not None else default_cache_dir("listops") / name
        self.seed, self.batch_size, self.num_workers = seed, batch_size, num_workers
        self._datasets: dict[str, EncodedTexts] = {}

    def prepare_data(self) -> None:
        """Generate and write the splits unless the directory holds them (rank 0 only)."""
        settings_file = self.root / SETTINGS_FILE
        if settings_file.is_file():
            recorded = json.loads(settings_file.read_text(encoding="utf-8"))
            if recorded != self.settings:
                raise DataError(
                    f"{self.root} holds ListOps generated with other settings ({recorded}); give another "
                    f"--data.path, or leave it unset for a cache directory per settings."
                )
        if all((self.root / file).is_file() for file in SPLIT_FILES.values()):
            return
        log.info("Generating ListOps into %s", self.root)
        rng, seen = random.Random(self.settings["generator_seed"]), set()
        for split, file in SPLIT_FILES.items():
            examples = generate(self.settings[f"num_{split}"], rng, self.settings["min_length"], self.settings["max_length"],
                                self.settings["max_depth"], self.settings["max_args"], exclude=seen)
            write_tsv(self.root / file, examples)
        atomic_write_text(settings_file, json.dumps(self.settings, indent=2) + "\n")

    def setup(self, stage: str | None = None) -> None:
        for split, file in SPLIT_FILES.items():
            if split not in self._datasets:
                path = self.root / file
                if not path.is_file():
                    raise FileNotFoundError(f"{path} does not exist: prepare_data generates it (a Trainer calls it first).")
                rows = read_tsv(path)
                self._datasets[split] = EncodedTexts([encode(text) for text, _ in rows], [target for _, target in rows])

    def decode_tokens(self, ids: Sequence[int]) -> list[str]:
        """Token strings of ids (attention heatmaps' labels)."""
        return [VOCABULARY[i] for i in ids]

    def train_dataloader(self) -> DataLoader:
        dataset = self._datasets["train"]
        sampler = EpochShuffleSampler(len(dataset), self.seed)
        return ResumableDataLoader(dataset, batch_size=self.batch_size, sampler=sampler, **self._loader_kwargs())

    def val_dataloader(self) -> DataLoader:
        return evaluation_loader(self._datasets["val"], self.batch_size, self.trainer, **self._loader_kwargs())

    def test_dataloader(self) -> DataLoader:
        return evaluation_loader(self._datasets["test"], self.batch_size, self.trainer, **self._loader_kwargs())

    def _loader_kwargs(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "collate_fn": PadCollator(self.padding_idx), "persistent_workers": self.num_workers > 0}

