"""Batches nearly uniform in length, so little of each batch is padding: for training and for evaluation.

Shared by every text data module: translation pairs sort by source then target length, texts to
classify by their length. Training's samplers are deterministic given ``(seed, epoch)``, so a
resumed run sees the same batches as an uninterrupted one; evaluation's batches
(:func:`length_batches`) are the same on every pass. Everything works on NumPy arrays on the host
(sort keys are the lengths the data module stores at setup), never on tensors, so drawing a batch
never waits on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import BatchSampler, Sampler

__all__ = ["BucketBatchSampler", "EpochShuffleSampler", "length_batches"]


class EpochShuffleSampler(Sampler[int]):
    """A permutation of ``range(size)`` fixed by ``(seed, epoch)``; Lightning calls :meth:`set_epoch`.

    With ``shuffle=False`` it yields ``range(size)`` in order, and still keeps the epoch, which
    :class:`ResumableDataLoader` reads.
    """

    def __init__(self, size: int, seed: int = 0, *, shuffle: bool = True) -> None:
        self.size, self.seed, self.shuffle, self.epoch = size, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.size))
        return iter(np.random.default_rng([self.seed, self.epoch]).permutation(self.size).tolist())

    def __len__(self) -> int:
        return self.size


class BucketBatchSampler(BatchSampler):
    """Batches of similar-length examples, in random order: little padding, still shuffled.

    Takes the (shuffled) indices of ``sampler``, cuts them into chunks of ``bucket_batches``
    batches, sorts each chunk by ``sort_keys`` (one number per example of the dataset, e.g. its
    length), slices it into batches, and shuffles all batches. Examples meet different
    neighbours every epoch, yet each batch is nearly uniform in length. The batch order is
    fixed by ``seed`` and the sampler's ``epoch``.

    It subclasses ``BatchSampler`` and takes ``sampler`` first so that Lightning can rebuild it
    around a ``DistributedSampler`` under DDP: every process then buckets its own shard.
    """

    def __init__(
        self,
        sampler: Sampler[int],
        batch_size: int,
        drop_last: bool = False,
        *,
        sort_keys: Sequence[int],
        bucket_batches: int = 100,
        seed: int = 0,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.sort_keys = np.asarray(sort_keys)
        self.bucket_batches = bucket_batches
        self.seed = seed

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch to the sampler (for plain PyTorch loops; Lightning sets it on the sampler)."""
        if callable(set_epoch := getattr(self.sampler, "set_epoch", None)):
            set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        indices = np.fromiter(self.sampler, dtype=np.int64)
        chunk = self.batch_size * self.bucket_batches
        batches = []
        for start in range(0, len(indices), chunk):
            piece = indices[start : start + chunk]
            piece = piece[np.argsort(self.sort_keys[piece], kind="stable")]
            batches += [piece[i : i + self.batch_size] for i in range(0, len(piece), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()  # chunks are whole batches, so only the very last one can be short
        order = np.random.default_rng([self.seed, getattr(self.sampler, "epoch", 0), 1]).permutation(len(batches))
        for index in order:
            yield batches[index].tolist()


def length_batches(sort_keys: Sequence[int], batch_size: int, seed: int = 0) -> list[list[int]]:
    """All rows in batches of neighbours in ``sort_keys`` order, the batches in an order fixed by ``seed``.

    Evaluation's pass: every row once, and each batch padded to about its own rows' length rather
    than to the longest of ``batch_size`` rows in dataset order, which a quadratic attention pays
    for squared. The batches are shuffled (not shortest first) so that the first few, which a
    sanity check, ``limit_val_batches`` or the heatmap examples read, are a sample of every length.
    The one short batch comes last, so that the rows of the batches, read in order and cut every
    ``batch_size``, give back these batches.
    """
    order = np.argsort(np.asarray(sort_keys), kind="stable")
    batches = [order[start : start + batch_size].tolist() for start in range(0, len(order), batch_size)]
    full = len(order) // batch_size
    shuffled = np.random.default_rng(seed).permutation(full)
    return [batches[i] for i in shuffled] + batches[full:]
