"""Data loaders that behave the same on one process or many, and resume mid-epoch.

Two problems of multi-process training that Lightning leaves to the data module:

**Evaluation must see every example exactly once.** Under DDP, Lightning gives a validation
or test loader a ``DistributedSampler``, which pads each process's share by repeating examples
so that all processes run the same number of batches; a metric over the split then counts
those examples twice. :func:`evaluation_loader` shards *whole batches* instead
(:class:`WholeBatchSampler`): process ``r`` of ``W`` gets batches ``r, r + W, ...`` of the
single-process pass, each identical to the batch one process would see (same examples, same
padding), so summed metric states, and hence BLEU, accuracy and the rest, are exactly those of
one process. Processes may run one batch more than others, which evaluation allows: the tasks'
metrics are torchmetrics objects synchronised once, at epoch end, and nothing communicates per
evaluation step. Each process needs at least one batch, so a split with fewer batches than
processes is cut into smaller ones. Given the rows' lengths, the pass batches rows of similar
length (:func:`~zoo.datamodules.sampling.length_batches`), as training does: the metrics are sums
over rows, so only the padding, and the time spent on it, changes.

**Training must resume where it stopped.** :class:`ResumableDataLoader` implements the
``state_dict``/``load_state_dict`` pair that Lightning saves with a checkpoint, recording how
many batches of which epoch it has served; a run resumed from a checkpoint taken mid-epoch
skips exactly those batches. That reproduces the interrupted epoch only because its order is
a function of ``(seed, epoch)`` (:class:`~zoo.datamodules.sampling.EpochShuffleSampler`), never of the global random
state, also when Lightning shards it across processes.

**Feeding a GPU.** :func:`loader_options` pins host memory (faster, asynchronous copies) and
starts worker processes when the trainer runs on a GPU; on a CPU everything stays in the main
process, as copying to pinned memory would only cost time there.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence, Sized
from typing import Any

import lightning as L
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from zoo.datamodules.sampling import length_batches

__all__ = [
    "GPU_WORKERS",
    "ResumableDataLoader",
    "WholeBatchSampler",
    "evaluation_loader",
    "loader_options",
    "placement",
]

GPU_WORKERS = 4
"""Worker processes per GPU process when ``num_workers`` is not given: enough to keep padding
and copying off the training loop, few enough to leave cores to the node's other processes."""


def loader_options(trainer: L.Trainer | None, num_workers: int | None) -> dict[str, Any]:
    """DataLoader settings for where the trainer runs: ``num_workers``, ``persistent_workers``, ``pin_memory``.

    On a GPU, host memory is pinned and ``num_workers=None`` means :data:`GPU_WORKERS` (at most
    the cores of this process's share of the node); elsewhere, or without a trainer, ``None``
    means 0 (load in the main process) and nothing is pinned.
    """
    on_gpu = trainer is not None and trainer.strategy.root_device.type == "cuda"
    if num_workers is None:
        share = (os.cpu_count() or 1) // max(1, trainer.num_devices if on_gpu else 1)  # type: ignore[union-attr]
        num_workers = min(GPU_WORKERS, share) if on_gpu else 0
    return {"num_workers": num_workers, "persistent_workers": num_workers > 0, "pin_memory": on_gpu}


def placement(trainer: L.Trainer | None) -> tuple[int, int]:
    """``(processes, rank)``: how many processes share the data, and which one this is (``(1, 0)``
    without a trainer or on one device)."""
    kwargs = (trainer.distributed_sampler_kwargs if trainer is not None else None) or {"num_replicas": 1, "rank": 0}
    return kwargs["num_replicas"], kwargs["rank"]


class WholeBatchSampler(DistributedSampler):
    """The rows of batches ``rank, rank + W, ...`` of ``batches`` (the single-process pass), in order.

    Cut into batches of ``batch_size`` again by the DataLoader, this process's share yields
    exactly those batches, provided only the last of ``batches`` is short: every share is made of
    whole batches, and the short one ends the share it belongs to. No row is repeated or dropped.
    A ``DistributedSampler`` subclass, so that Lightning does not replace it.
    """

    def __init__(self, dataset: Sized, batches: Sequence[Sequence[int]], num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False)  # type: ignore[arg-type]
        self.indices = [index for batch in batches[rank::num_replicas] for index in batch]
        self.num_samples, self.total_size = len(self.indices), len(dataset)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples


def evaluation_loader(
    dataset: Dataset, batch_size: int, trainer: L.Trainer | None, sort_keys: Sequence[int] | None = None, **kwargs: Any
) -> DataLoader:
    """A validation or test loader: one pass over every row; under several processes, this process's whole batches.

    ``trainer`` is the data module's (None outside a Trainer: one process). With ``sort_keys``
    (one number per row, e.g. its length) rows are batched with their neighbours in that order
    (:func:`~zoo.datamodules.sampling.length_batches`); without, in dataset order. ``kwargs`` go
    to the DataLoader (``collate_fn``, ``num_workers``, ...).

    Raises:
        ValueError: the split has fewer examples than there are processes.
    """
    size = len(dataset)  # type: ignore[arg-type]
    processes, rank = placement(trainer)
    if size < processes:
        raise ValueError(f"An evaluation split of {size} examples cannot give each of {processes} processes one.")
    if math.ceil(size / batch_size) < processes:
        batch_size = size // processes  # at least one batch per process, or a process would wait forever
    if sort_keys is None:
        batches = [range(start, min(size, start + batch_size)) for start in range(0, size, batch_size)]
    else:
        batches = length_batches(sort_keys, batch_size)
    sampler = WholeBatchSampler(dataset, batches, num_replicas=processes, rank=rank)  # type: ignore[arg-type]
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **kwargs)


class ResumableDataLoader(DataLoader):
    """A training DataLoader whose position within the epoch is saved and restored with checkpoints.

    :meth:`state_dict` records the epoch of the pass in progress (the epoch its sampler was
    given through ``set_epoch``) and how many batches it has served. After
    :meth:`load_state_dict`, the next pass over the *same* epoch skips that many batches (they
    are loaded and dropped, so any sampler works); a pass over another epoch, as after a
    checkpoint taken at the end of an epoch, starts at its first batch. The sampler must make
    the epoch's order reproducible: :class:`EpochShuffleSampler`, or the ``DistributedSampler``
    Lightning wraps around it. A loader whose sampler has no epoch never skips.

    The pass starts lazily, at its first batch, after Lightning has set the epoch; a state loaded
    between ``iter()`` and the first batch applies to that pass.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._position: dict[str, int | None] = {"epoch": None, "batches": 0}
        self._restored: dict[str, int | None] | None = None

    def state_dict(self) -> dict[str, int | None]:
        return dict(self._position)

    def load_state_dict(self, state_dict: dict[str, int | None]) -> None:
        self._restored = dict(state_dict)

    def _epoch(self) -> int | None:
        sampler = getattr(self.batch_sampler, "sampler", None)
        epoch = getattr(sampler if sampler is not None else self.sampler, "epoch", None)
        return None if epoch is None else int(epoch)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return self._pass()

    def _pass(self) -> Iterator[Any]:
        restored, self._restored = self._restored, None  # at the first batch: a state loaded after iter() counts
        epoch = self._epoch()
        skip = 0
        if restored is not None and epoch is not None and restored["epoch"] == epoch:
            skip = int(restored["batches"] or 0)
        self._position = {"epoch": epoch, "batches": 0}
        for index, batch in enumerate(super().__iter__()):
            self._position["batches"] = index + 1
            if index >= skip:
                yield batch
