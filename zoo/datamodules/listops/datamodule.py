"""ListOps of the Long Range Arena: nested MIN/MAX/MED/SM expressions over digits, answer one digit.

The splits are generated once from ``generator_seed`` (:mod:`~zoo.datamodules.listops.generator`)
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

import numpy as np

from zoo.datamodules.base import CorpusDataModule, check_minimums
from zoo.datamodules.listops.generator import generate
from zoo.datamodules.listops.tokens import CLASS_NAMES, PAD_ID, VOCABULARY, ListOpsCodec, encode
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError
from zoo.text.codecs import check_texts
from zoo.text.collators import PadCollator
from zoo.text.datasets import Columns, TokenIds
from zoo.text.files import atomic_write_text

__all__ = ["SPLIT_FILES", "ListOpsDataModule", "read_tsv", "write_tsv"]

log = logging.getLogger(__name__)

SPLIT_FILES = {"train": "basic_train.tsv", "validation": "basic_val.tsv", "test": "basic_test.tsv"}
"""The benchmark's file of each split."""
SETTINGS_FILE = "settings.json"


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
class ListOpsDataModule(CorpusDataModule):
    """ListOps (Long Range Arena): classify a nested expression of 500 to 2,000 tokens by its value.

    Train with the ``classifier`` model (``configs/classifier_listops.yaml``; ``vocab_size``,
    ``padding_idx`` and ``num_classes`` are linked from here). Generating the default 100,000
    examples takes minutes, once per settings.

    Args:
        path: Directory of the TSV files; generated there when absent. Default: a directory per
            settings under ``cache_dir``.
        num_train, num_val, num_test: Examples per split (distinct across splits).
        min_length, max_length: Kept expressions have ``min_length < tokens < max_length``, as in
            the benchmark; a file read as it is may not hold a longer one.
        max_depth: Deepest nesting of operations.
        max_args: Most arguments of one operation (at least 2).
        generator_seed: Seed of the generated data: the same seed gives the same files.
        seed: Seed of the order of training batches and of ``limit_train`` (``zoo compare``
            varies this one), not of the data.
        kwargs: The other shared arguments of :class:`~zoo.datamodules.base.CorpusDataModule`
            (``batch_size``, ``num_workers``, ``cache_dir``, ``limit_train``, ``predict_texts``,
            ``predict_file``: expressions to evaluate).
    """

    name = "listops"
    vocab_size = len(VOCABULARY)
    padding_idx = PAD_ID
    num_classes = len(CLASS_NAMES)

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
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length, **kwargs)
        self.save_hyperparameters()
        check_minimums(
            num_train=(num_train, 1), num_val=(num_val, 1), num_test=(num_test, 1),
            min_length=(min_length, 0), max_depth=(max_depth, 2), max_args=(max_args, 2),
        )  # fmt: skip
        if max_length <= min_length + 4:
            raise DataError(
                f"max_length ({max_length}) must exceed min_length ({min_length}) by more than 4 to leave room for an expression."
            )
        self.settings = {
            "num_train": num_train, "num_val": num_val, "num_test": num_test, "min_length": min_length,
            "max_length": max_length, "max_depth": max_depth, "max_args": max_args, "generator_seed": generator_seed,
        }  # fmt: skip
        self.root = (
            Path(path).expanduser() if path is not None else self.cache_dir / "-".join(map(str, self.settings.values()))
        )
        self.collator = PadCollator(PAD_ID)
        self._codec = ListOpsCodec()

    @property
    def codec(self) -> ListOpsCodec:
        """Expressions to batches, ids to tokens, labels to digits."""
        return self._codec

    @property
    def class_names(self) -> list[str]:
        """The value each label stands for."""
        return list(CLASS_NAMES)

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
        counts = {
            "train": self.settings["num_train"],
            "validation": self.settings["num_val"],
            "test": self.settings["num_test"],
        }
        for split, file in SPLIT_FILES.items():
            examples = generate(
                counts[split], rng, self.settings["min_length"], self.settings["max_length"],
                self.settings["max_depth"], self.settings["max_args"], exclude=seen,
            )  # fmt: skip
            write_tsv(self.root / file, examples)
        atomic_write_text(settings_file, json.dumps(self.settings, indent=2) + "\n")

    def build_split(self, split: str) -> Columns:
        path = self.root / SPLIT_FILES[split]
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: prepare_data generates it (a Trainer calls it first).")
        rows = read_tsv(path)
        chosen = self.limited(len(rows)) if split == "train" else None
        if chosen is not None:
            rows = [rows[i] for i in chosen]
        return Columns(
            tokens=self._token_ids([text for text, _ in rows], str(path)), labels=[target for _, target in rows]
        )

    def sort_keys(self, rows: Columns) -> np.ndarray:
        return rows.tokens.lengths

    def predict_dataset(self, inputs: list[Any]) -> Columns:
        where = "predict_texts" if self.predict_file is None else f"the lines of {self.predict_file}"
        check_texts(inputs, where, action="evaluate")
        return Columns(tokens=self._token_ids(inputs, where), texts=inputs)

    def _token_ids(self, texts: Sequence[str], where: str) -> TokenIds:
        """The expressions' ids, none of ``max_length`` tokens or more (longer inputs than the model was sized for)."""
        ids = [encode(text).tolist() for text in texts]
        longest = max(map(len, ids))
        if longest >= self.max_length:
            raise DataError(
                f"{where} holds an expression of {longest} tokens, not below max_length={self.max_length}; "
                f"raise --data.max_length or drop it."
            )
        return TokenIds(ids)
