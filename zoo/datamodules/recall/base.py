"""What the recall and copying data modules share: a set of generated examples, how it is
batched, and the data-module base that serves the splits (the draws every generator needs are
:mod:`zoo.datamodules.recall.draws`).

**A batch** is a dict of tensors, every example of it of one length ``L``:

* ``inputs``: ``LongTensor (B, L)``, the token ids the model reads;
* ``targets``: ``LongTensor (B, L)``, what the model is trained to output at each position,
  :data:`IGNORE_INDEX` (-100, ``torch.nn.functional.cross_entropy``'s default ``ignore_index``)
  where the training loss ignores it;
* ``scored``: ``BoolTensor (B, L)``, the positions the benchmark's accuracy counts. Where a
  reference trains on every next token but scores a few (MAD's recall tasks, the induction heads
  of H3 and Mamba) ``targets`` are all next tokens and ``scored`` marks the few; elsewhere
  ``scored`` is ``targets != -100``. At a scored position the target is always the scored answer.
* a data module may add per-example integers that describe the set an example comes from
  (MQAR's ``num_kv_pairs``), as ``LongTensor (B,)``.

**Splits are lists of** :class:`Examples`, one per length (or per setting, MQAR's mixtures): a
batch never mixes two. Training batches are drawn within each set, their order shuffled over all
sets, from ``(seed, epoch)`` alone, so a run resumes exactly (:class:`ShuffledSetBatches` with
:class:`~zoo.datamodules.loaders.ResumableDataLoader`); a data module that generates fresh
training data every step (Mamba's tasks) draws batch ``i`` of epoch ``e`` from
``(generator_seed, seed, e, i)`` (:class:`GeneratedBatches`). Evaluation batches each set in order,
and processes share whole batches (:class:`~zoo.datamodules.loaders.WholeBatchSampler`).

**Determinism**: every draw comes from a NumPy ``Generator`` spawned from the data module's
``generator_seed`` with the split and the set as its key
(:func:`~zoo.datamodules.recall.draws.split_generator`), never from a global random state, so
every process, platform and run builds the same data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from zoo.datamodules.base import SPLITS, STAGE_SPLITS, check_minimums
from zoo.datamodules.loaders import ResumableDataLoader, WholeBatchSampler, loader_options, placement
from zoo.datamodules.recall.draws import split_generator
from zoo.errors import DataError

__all__ = [
    "IGNORE_INDEX",
    "EpochBatches",
    "Examples",
    "GeneratedBatches",
    "RecallDataModule",
    "SetBatches",
    "ShuffledSetBatches",
    "evaluation_batches",
]

IGNORE_INDEX = -100
"""The target of a position the training loss ignores (``cross_entropy``'s default ``ignore_index``)."""


def _storage_dtype(vocab_size: int) -> np.dtype:
    """The smallest signed integer type that holds every id below ``vocab_size`` and -100."""
    return np.dtype(np.int16) if vocab_size <= np.iinfo(np.int16).max else np.dtype(np.int32)


@dataclass(frozen=True)
class Examples:
    """A set of generated examples of one length, stored small and batched as the module
    docstring says.

    Attributes:
        inputs: ``(N, L)`` token ids.
        targets: ``(N, L)`` training targets, -100 where the loss ignores a position.
        scored: ``(N, L)`` booleans, the positions the accuracy counts.
        fields: Integers that describe the whole set (MQAR's ``num_kv_pairs``); each batch
            carries them as ``LongTensor (B,)``.
    """

    inputs: Tensor
    targets: Tensor
    scored: Tensor
    fields: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_arrays(
        cls,
        inputs: np.ndarray,
        targets: np.ndarray,
        scored: np.ndarray,
        vocab_size: int,
        fields: Mapping[str, int] | None = None,
    ) -> Examples:
        """Examples of NumPy arrays, the ids stored in the smallest type that holds them."""
        dtype = _storage_dtype(vocab_size)
        return cls(
            torch.from_numpy(np.ascontiguousarray(inputs, dtype=dtype)),
            torch.from_numpy(np.ascontiguousarray(targets, dtype=dtype)),
            torch.from_numpy(np.ascontiguousarray(scored, dtype=bool)),
            dict(fields or {}),
        )

    def __len__(self) -> int:
        return self.inputs.shape[0]

    @property
    def length(self) -> int:
        """Tokens per example."""
        return self.inputs.shape[1]

    def batch(self, index: Sequence[int] | slice) -> dict[str, Tensor]:
        """The examples at ``index`` as one batch (the module docstring's fields)."""
        inputs = self.inputs[index].long()
        size = inputs.shape[0]
        return {
            "inputs": inputs,
            "targets": self.targets[index].long(),
            "scored": self.scored[index],
            **{name: torch.full((size,), value, dtype=torch.long) for name, value in self.fields.items()},
        }


class SetBatches(Dataset):
    """Batches of a list of :class:`Examples`: item ``(set, indices)`` is the batch of those
    examples of that set. :class:`ShuffledSetBatches` and :func:`evaluation_batches` say which
    items a loader reads."""

    def __init__(self, sets: Sequence[Examples]) -> None:
        self.sets = list(sets)

    def __len__(self) -> int:
        return sum(len(examples) for examples in self.sets)

    def __getitem__(self, key: tuple[int, Sequence[int] | slice]) -> dict[str, Tensor]:
        which, index = key
        return self.sets[which].batch(index)


class ShuffledSetBatches(DistributedSampler):
    """Training batches of :class:`SetBatches`: each set's examples shuffled and cut into batches
    of ``batch_size`` (a set's last batch may be shorter), all batches shuffled together, from
    ``(seed, epoch)`` alone; this process takes batches ``rank, rank + W, ...``. The epoch's
    batches are rounded up to a multiple of ``W`` with its first ones, so that every process runs
    the same number, as DDP needs. A ``DistributedSampler``, so Lightning does not replace it.
    """

    def __init__(
        self, dataset: SetBatches, batch_size: int, seed: int = 0, num_replicas: int = 1, rank: int = 0
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self.sizes = [len(examples) for examples in dataset.sets]
        self.batch_size = batch_size
        batches = sum(math.ceil(size / batch_size) for size in self.sizes)
        self.num_samples = math.ceil(batches / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[tuple[int, list[int]]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        batches = []
        for which, size in enumerate(self.sizes):
            order = rng.permutation(size)
            batches += [
                (which, order[start : start + self.batch_size].tolist()) for start in range(0, size, self.batch_size)
            ]
        batches = [batches[i] for i in rng.permutation(len(batches))]
        batches += batches[: self.total_size - len(batches)]
        return iter(batches[self.rank :: self.num_replicas])


class GeneratedBatches(Dataset):
    """Training batches generated afresh, batch ``i`` of epoch ``e`` from the generator of
    ``(generator_seed, seed, e, i)`` (:func:`split_generator`): as Mamba trains, on new data every
    step, and still resumable. Item ``(e, i)`` is that batch; :class:`EpochBatches` says which a
    process reads.

    Args:
        generate: ``generate(rng, batch_size)``: that many examples of the training distribution.
        batch_size: Examples per batch.
        generator_seed: The data's seed.
        seed: The training stream's seed.
        batches: Batches per epoch, over all processes.
    """

    def __init__(
        self,
        generate: Callable[[np.random.Generator, int], Examples],
        batch_size: int,
        generator_seed: int,
        seed: int,
        batches: int,
    ) -> None:
        self.generate, self.batch_size, self.batches = generate, batch_size, batches
        self.generator_seed, self.seed = generator_seed, seed

    def __len__(self) -> int:
        return self.batches * self.batch_size

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Tensor]:
        epoch, index = key
        rng = split_generator(self.generator_seed, "train", self.seed, epoch, index)
        return self.generate(rng, self.batch_size).batch(slice(None))


class EpochBatches(DistributedSampler):
    """The keys ``(epoch, i)`` of :class:`GeneratedBatches` this process reads: ``i = rank, rank +
    W, ...`` of the epoch's batches, rounded up to a multiple of ``W`` (every process runs as many).
    A ``DistributedSampler``, so Lightning does not replace it."""

    def __init__(self, dataset: GeneratedBatches, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False)
        self.num_samples = math.ceil(dataset.batches / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter((self.epoch, index) for index in range(self.rank, self.total_size, self.num_replicas))


def evaluation_batches(
    sets: Sequence[Examples],
    batch_size: int,
    trainer: L.Trainer | None,
    *,
    max_tokens: int | None = None,
    **kwargs: Any,
) -> DataLoader:
    """A validation or test loader: every example of every set once, each set in order in batches
    of ``batch_size`` (with ``max_tokens``, of at most that many tokens, one example at least, so
    that a set far longer than training is not evaluated sixteen 16k-token examples at once);
    under several processes, process ``r`` of ``W`` takes batches ``r, r + W, ...`` (none
    repeated). Batches are made smaller when there are fewer than processes, as each needs one;
    ``kwargs`` go to the DataLoader.

    Raises:
        DataError: the sets hold fewer examples than there are processes.
    """
    processes, rank = placement(trainer)
    total = sum(len(examples) for examples in sets)
    if total < processes:
        raise DataError(f"An evaluation split of {total} examples cannot give each of {processes} processes one.")
    sizes = [batch_size if max_tokens is None else max(1, min(batch_size, max_tokens // e.length)) for e in sets]
    while sum(math.ceil(len(examples) / size) for examples, size in zip(sets, sizes)) < processes:
        sizes = [math.ceil(size / 2) for size in sizes]
    keys = [
        (which, slice(start, start + size))
        for which, (examples, size) in enumerate(zip(sets, sizes))
        for start in range(0, len(examples), size)
    ]
    dataset = _Keyed(SetBatches(sets), keys)
    sampler = WholeBatchSampler(dataset, [[k] for k in range(len(keys))], num_replicas=processes, rank=rank)
    return DataLoader(dataset, batch_size=None, sampler=sampler, **kwargs)


class _Keyed(Dataset):
    """Item ``k`` of ``dataset`` is its item ``keys[k]``: batches a sampler of integers can name."""

    def __init__(self, dataset: Dataset, keys: Sequence[Any]) -> None:
        self.dataset, self.keys = dataset, list(keys)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[self.keys[index]]


LANGUAGE_MODEL = "language_model"
"""The backbone of every task but one: a causal model trained on its next tokens or answers."""
AUTOENCODER = "autoencoder"
"""MAD's backbone for compression, whose targets are its inputs (:class:`zoo.models.SequenceAutoEncoder`)."""
BACKBONES = (LANGUAGE_MODEL, AUTOENCODER)
"""What a recall data module's ``backbone`` may name (MAD's ``backbone``)."""


class RecallDataModule(L.LightningDataModule):
    """Generated recall and copying data (nothing downloaded): a subclass sets ``name``,
    ``vocab_size`` and ``block_size`` (which the CLI links into a model, with ``backbone``) and
    builds each split as a list of :class:`Examples` (:meth:`build_split`); training is shuffled
    per epoch unless the subclass generates it afresh (:meth:`train_dataloader`). The constructor
    saves the subclass's arguments as hyperparameters (``save_hyperparameters`` reads every
    ``__init__`` on the call stack), so a checkpoint rebuilds the data module.

    Args:
        batch_size: Examples per batch.
        generator_seed: Seed of the generated data: the same seed gives the same examples in every
            process and run, another seed others.
        seed: Seed of the order of training batches (``zoo compare`` varies this one), not of the data.
        num_workers: DataLoader worker processes; ``None``: none on a CPU, a few on a GPU.
    """

    name: ClassVar[str]
    vocab_size: int
    """Token ids run from 0 to ``vocab_size - 1``: rows of a model's embedding and output layer."""
    block_size: int
    """The longest sequence any split holds: what a model's learned positions must cover."""
    backbone: str = LANGUAGE_MODEL
    """The model the task trains (one of :data:`BACKBONES`, linked into the recall model)."""
    eval_batch_tokens: int | None = None
    """Tokens per validation and test batch at the most (one example at least); None:
    ``batch_size`` examples whatever their length. A module whose test sets run far past its
    training length sets it (the needles: a training batch's tokens)."""

    def __init__(self, batch_size: int = 64, generator_seed: int = 0, seed: int = 0, num_workers: int | None = None):
        super().__init__()
        self.save_hyperparameters()  # every subclass's arguments too: Lightning reads each __init__ frame
        check_minimums(
            batch_size=(batch_size, 1), generator_seed=(generator_seed, 0), seed=(seed, 0), num_workers=(num_workers, 0)
        )
        self.batch_size, self.generator_seed, self.seed, self.num_workers = (
            batch_size,
            generator_seed,
            seed,
            num_workers,
        )
        self._splits: dict[str, list[Examples]] = {}

    def build_split(self, split: str) -> list[Examples]:
        """The sets of ``split`` (one of ``train``, ``validation``, ``test``)."""
        raise NotImplementedError

    def split(self, split: str) -> list[Examples]:
        """The sets of ``split``, generated on first use."""
        if split not in self._splits:
            self._splits[split] = self.build_split(split)
        return self._splits[split]

    def setup(self, stage: str | None = None) -> None:
        """Generate the splits that ``stage`` uses (all of them for ``None``)."""
        for split in SPLITS if stage is None else STAGE_SPLITS[stage]:
            self.split(split)

    def train_dataloader(self) -> DataLoader:
        """Batches of the training sets, shuffled from ``(seed, epoch)``; resumable mid-epoch."""
        dataset = SetBatches(self.split("train"))
        processes, rank = placement(self.trainer)
        sampler = ShuffledSetBatches(dataset, self.batch_size, self.seed, num_replicas=processes, rank=rank)
        return ResumableDataLoader(dataset, batch_size=None, sampler=sampler, **self._loader_kwargs())

    def val_dataloader(self) -> DataLoader:
        """Every validation example once, a set at a time."""
        return self._evaluation_batches("validation")

    def test_dataloader(self) -> DataLoader:
        """Every test example once, a set at a time."""
        return self._evaluation_batches("test")

    def _evaluation_batches(self, split: str) -> DataLoader:
        return evaluation_batches(
            self.split(split),
            self.batch_size,
            self.trainer,
            max_tokens=self.eval_batch_tokens,
            **self._loader_kwargs(),
        )

    def generated_train_dataloader(
        self, generate: Callable[[np.random.Generator, int], Examples], batches: int
    ) -> DataLoader:
        """A training loader of fresh batches (:class:`GeneratedBatches`), ``batches`` per epoch;
        resumable mid-epoch. ``generate`` must be picklable (a module-level function or a
        ``functools.partial`` of one) for worker processes."""
        dataset = GeneratedBatches(generate, self.batch_size, self.generator_seed, self.seed, batches)
        processes, rank = placement(self.trainer)
        sampler = EpochBatches(dataset, num_replicas=processes, rank=rank)
        return ResumableDataLoader(dataset, batch_size=None, sampler=sampler, **self._loader_kwargs())

    def _loader_kwargs(self) -> dict[str, Any]:
        return loader_options(self.trainer, self.num_workers)
