"""What the corpus data modules share: checked arguments, the cache, the stage-to-split table,
the setup loop, the four loaders and the predict inputs (:class:`SplitsDataModule`), and the
batching of corpora whose splits are rows (:class:`CorpusDataModule`).

A split may be rows (sentence pairs, labelled texts, expressions) or one token stream (a
language model's text, :class:`~zoo.datamodules.text.TextDataModule`). :class:`SplitsDataModule`
serves any of them through two hooks, :meth:`~SplitsDataModule.training_batches` and
:meth:`~SplitsDataModule.evaluation_batches`, so that each kind says only how its batches are
drawn, and none replaces a loader. :class:`CorpusDataModule` fills them for rows: bucketed by
length, resumable for training, whole batches per process for evaluation (all loaders pinned on
a GPU).

A corpus module says only what is specific to it: how to read and split the corpus
(:meth:`SplitsDataModule.build_split`), its collator, the length each training row is bucketed
by, and its :class:`~zoo.text.codecs.Codec`, through which tasks reach everything else.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from zoo.datamodules.loaders import ResumableDataLoader, evaluation_loader, loader_options
from zoo.datamodules.sampling import BucketBatchSampler, EpochShuffleSampler
from zoo.errors import DataError
from zoo.text.codecs import Codec
from zoo.text.datasets import Columns
from zoo.text.inputs import predict_inputs

__all__ = [
    "SPLITS",
    "STAGE_SPLITS",
    "CorpusDataModule",
    "SplitsDataModule",
    "check_minimums",
    "default_cache_dir",
    "existing_path",
]

SPLITS = ("train", "validation", "test")
STAGE_SPLITS = {"fit": ("train", "validation"), "validate": ("validation",), "test": ("test",), "predict": ()}
"""The splits each Lightning stage reads; ``setup(None)`` reads all of :data:`SPLITS`."""

SplitT = TypeVar("SplitT")
"""What an encoded split is: rows (:class:`~zoo.text.datasets.Columns`), or a token stream (a tensor of ids)."""


def default_cache_dir(name: str) -> Path:
    """``$ZOO_CACHE_DIR/<name>`` if that variable is set, else ``~/.cache/attention-zoo/<name>``."""
    root = os.environ.get("ZOO_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "attention-zoo"
    return base / name


def check_minimums(**values: tuple[int | None, int]) -> None:
    """Refuse ``name=(value, minimum)`` pairs whose value is below the minimum (None passes)."""
    for name, (value, minimum) in values.items():
        if value is not None and value < minimum:
            raise DataError(f"{name} must be at least {minimum}, got {value}.")


def existing_path(path: str | None, *, directory: bool, what: str, expected: str, otherwise: str) -> Path | None:
    """``path`` resolved, or a one-line error at construction (before any training) when it cannot be the corpus.

    Args:
        directory: Whether the corpus is a directory (else a file).
        what: The corpus as messages name it ("The sst2 data directory").
        expected: What the path must hold, quoted in messages.
        otherwise: What happens without a path ("leave --data.path unset to download it").
    """
    if path is None:
        return None
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise FileNotFoundError(f"{what} {path!r} does not exist. Expected {expected}; or {otherwise}.")
    if resolved.is_dir() != directory:
        raise DataError(f"{what} {path!r} is not a {'directory' if directory else 'file'}. Expected {expected}.")
    return resolved


class SplitsDataModule(L.LightningDataModule, Generic[SplitT]):
    """A corpus served as encoded splits of type ``SplitT``; subclasses read it (see the module
    docstring), set ``name`` and ``collator``, and say how a split's batches are drawn.

    Args:
        batch_size: Examples per batch.
        max_length: Most tokens per text (the corpus module says what happens to longer ones).
        num_workers: DataLoader worker processes; ``None``: none on a CPU, a few on a GPU.
        cache_dir: Where downloads and tokenizers are cached; default
            ``~/.cache/attention-zoo/<name>``, or ``$ZOO_CACHE_DIR/<name>`` when that is set.
        limit_train: Use only N training examples, picked by a shuffle seeded by ``seed`` (fast
            experiments and tests); the tokenizer is built from those N only.
        seed: Seeds that shuffle and the order of training batches in each epoch.
        predict_texts: Inputs to predict in the predict stage.
        predict_file: A UTF-8 file of inputs to predict, one a line (blank lines skipped).
    """

    name: ClassVar[str]

    def __init__(
        self,
        batch_size: int = 64,
        max_length: int = 512,
        num_workers: int | None = None,
        cache_dir: str | None = None,
        limit_train: int | None = None,
        seed: int = 0,
        predict_texts: list[str] | None = None,
        predict_file: str | None = None,
    ) -> None:
        super().__init__()
        check_minimums(
            batch_size=(batch_size, 1), max_length=(max_length, 1), num_workers=(num_workers, 0),
            limit_train=(limit_train, 1), seed=(seed, 0),
        )  # fmt: skip
        self.batch_size = batch_size
        self.max_length = max_length
        self.num_workers = num_workers
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir(self.name)
        self.limit_train = limit_train
        self.seed = seed
        self.predict_texts = predict_texts
        self.predict_file = predict_file
        self._datasets: dict[str, SplitT] = {}

    # -- what a corpus module provides -------------------------------------------------------------

    @property
    def codec(self) -> Codec:
        """Raw inputs to batches and ids back to text: everything a task needs from the data."""
        raise NotImplementedError

    collator: Any
    """Turns a list of dataset items into a batch (a picklable object)."""

    def build_split(self, split: str) -> SplitT:
        """The encoded ``split`` (one of :data:`SPLITS`)."""
        raise NotImplementedError

    def training_batches(self, split: SplitT) -> DataLoader:
        """The training loader of ``split``: its order a function of ``seed`` and the epoch, and
        resumable mid-epoch, so that a run resumes exactly."""
        raise NotImplementedError

    def evaluation_batches(self, split: SplitT) -> DataLoader:
        """The validation or test loader of ``split``: every example once; under several processes,
        whole batches each (no repeats)."""
        raise NotImplementedError

    def predict_dataset(self, inputs: list[Any]) -> Columns:
        """The rows of the raw inputs to predict."""
        raise NotImplementedError

    @property
    def predict_batch_size(self) -> int:
        """Inputs per predict batch: ``batch_size``, unless the corpus module cannot batch them."""
        return self.batch_size

    # -- shared machinery -----------------------------------------------------------------------------

    def cache_file(self, prefix: str, key: Mapping[str, Any]) -> Path:
        """``cache_dir/<prefix>-<hash of key>.json``: a cache entry named by everything that changes it."""
        digest = hashlib.sha256(json.dumps({"data_module": self.name, **key}, sort_keys=True).encode()).hexdigest()[:16]
        return self.cache_dir / f"{prefix}-{digest}.json"

    def limited(self, size: int) -> np.ndarray | None:
        """The training rows ``limit_train`` keeps, picked by ``seed``; None without a limit."""
        if self.limit_train is None:
            return None
        return np.random.default_rng(self.seed).permutation(size)[: self.limit_train]

    def setup(self, stage: str | None = None) -> None:
        """Encode the splits that ``stage`` uses (all of them for ``None``)."""
        for split in SPLITS if stage is None else STAGE_SPLITS[stage]:
            if split not in self._datasets:
                self._datasets[split] = self.build_split(split)

    def train_dataloader(self) -> DataLoader:
        """The training split's batches (:meth:`training_batches`)."""
        return self.training_batches(self._dataset("train", "fit"))

    def val_dataloader(self) -> DataLoader:
        """The validation split's batches (:meth:`evaluation_batches`)."""
        return self.evaluation_batches(self._dataset("validation", "validate"))

    def test_dataloader(self) -> DataLoader:
        """The test split's batches (:meth:`evaluation_batches`)."""
        return self.evaluation_batches(self._dataset("test", "test"))

    def predict_dataloader(self) -> DataLoader:
        """Batches of ``predict_texts`` or the lines of ``predict_file``."""
        dataset = self.predict_dataset(predict_inputs(self.predict_texts, self.predict_file))
        return DataLoader(dataset, batch_size=self.predict_batch_size, **self._loader_kwargs())

    def _dataset(self, split: str, stage: str) -> SplitT:
        if split not in self._datasets:
            raise RuntimeError(
                f"The {split} split of {self.name} is not set up: call setup({stage!r}) first (a Trainer does this itself)."
            )
        return self._datasets[split]

    def _loader_kwargs(self) -> dict[str, Any]:
        return {"collate_fn": self.collator, **loader_options(self.trainer, self.num_workers)}


class CorpusDataModule(SplitsDataModule[Columns]):
    """A corpus whose splits are rows of their own lengths, batched with rows of similar length
    (little padding); subclasses also say the length of each row (:meth:`sort_keys`). The
    arguments are those of :class:`SplitsDataModule`.
    """

    def sort_keys(self, rows: Columns) -> np.ndarray:
        """One number per row of a split; batches group rows with close numbers (little padding)."""
        raise NotImplementedError

    def training_batches(self, split: Columns) -> DataLoader:
        """Shuffled batches of rows of similar length, in an order fixed by ``seed`` and the epoch,
        so that a run resumes exactly."""
        sampler = BucketBatchSampler(
            EpochShuffleSampler(len(split), self.seed),
            self.batch_size,
            sort_keys=self.sort_keys(split),
            seed=self.seed,
        )
        return ResumableDataLoader(split, batch_sampler=sampler, **self._loader_kwargs())

    def evaluation_batches(self, split: Columns) -> DataLoader:
        """Batches of rows of similar length; under several processes, each gets whole batches (no repeats)."""
        return evaluation_loader(
            split, self.batch_size, self.trainer, sort_keys=self.sort_keys(split), **self._loader_kwargs()
        )
