"""Windows of a token stream for language modelling: random ones to train on, fixed ones to evaluate.

Every batch is ``{"tokens": LongTensor (B, L)}``, ``L`` consecutive ids of a split; a model
predicts ``tokens[:, 1:]`` from ``tokens[:, :-1]``.

**Training** draws windows as nanoGPT's ``get_batch`` does: ``block_size + 1`` ids from an offset
drawn uniformly from ``[0, len(ids) - block_size)``, every offset whose window fits. The offsets
of an epoch come from a generator seeded by ``(seed, epoch)`` alone (:class:`RandomWindowSampler`),
so a run resumed mid-epoch by :class:`~zoo.datamodules.loaders.ResumableDataLoader` draws exactly
the windows the interrupted run would have. Under several processes, process ``r`` of ``W`` takes
draws ``r, r + W, ...`` of the epoch's: every process sees other windows, and all run the same
number of batches, as DDP needs (the epoch's windows are rounded up to whole batches on every
process). The sampler is a ``DistributedSampler``, so Lightning does not replace it.

**Evaluation** covers a split of ``T`` ids exactly once (:class:`EvaluationWindows`): window ``i``
starts at ``i * block_size``, so its targets (its ids but the first) are ids
``i * block_size + 1 ... (i + 1) * block_size``, and together the windows' targets are every id
of the split but the first, which nothing precedes. The ``(T - 1) % block_size`` targets left
at the end form one shorter window, kept so that every target counts once (a loss, perplexity
or bits per unit is then over the whole split, not its first ``block_size`` multiple); it is a
batch of its own, so no batch needs padding. A task that averages batch losses must therefore
weigh each batch by its targets, ``tokens[:, 1:].numel()``. The batches are made once, in order,
and processes share whole batches, rank ``r`` taking batches ``r, r + W, ...``
(:class:`~zoo.datamodules.loaders.WholeBatchSampler`): no window is repeated or left out, and
every batch is the one a single process would see.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from zoo.datamodules.loaders import ResumableDataLoader, WholeBatchSampler, placement
from zoo.errors import DataError

__all__ = ["EvaluationWindows", "RandomWindowSampler", "TokenWindows", "evaluation_windows", "random_windows"]


class TokenWindows(Dataset):
    """Every window of ``length`` consecutive ids of ``ids``: item ``offset`` is
    ``{"tokens": ids[offset : offset + length]}`` as int64 (the ids may be stored smaller)."""

    def __init__(self, ids: Tensor, length: int) -> None:
        if len(ids) < length:
            raise ValueError(f"{len(ids)} ids hold no window of {length}.")
        self.ids, self.length = ids, length

    def __len__(self) -> int:
        return len(self.ids) - self.length + 1

    def __getitem__(self, offset: int) -> dict[str, Tensor]:
        return {"tokens": self.ids[offset : offset + self.length].long()}


class RandomWindowSampler(DistributedSampler):
    """Offsets of random windows of ``dataset``, ``windows`` per epoch over all processes, drawn
    from ``(seed, epoch)`` alone; this process's share is draws ``rank, rank + W, ...``.

    The epoch's windows are rounded up so that each process gets whole batches of
    ``batch_size``, the same number on every process.
    """

    def __init__(
        self, dataset: TokenWindows, windows: int, batch_size: int, seed: int = 0, num_replicas: int = 1, rank: int = 0
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, seed=seed)
        self.num_samples = math.ceil(windows / (batch_size * num_replicas)) * batch_size
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        offsets = np.random.default_rng([self.seed, self.epoch]).integers(len(self.dataset), size=self.total_size)  # type: ignore[arg-type]
        return iter(offsets[self.rank :: self.num_replicas].tolist())


def random_windows(
    ids: Tensor, block_size: int, batch_size: int, windows: int, seed: int, trainer: L.Trainer | None, **kwargs: Any
) -> ResumableDataLoader:
    """The training loader: batches of ``batch_size`` random windows of ``block_size + 1`` ids,
    ``windows`` per epoch (see the module docstring); ``kwargs`` go to the DataLoader."""
    dataset = TokenWindows(ids, block_size + 1)
    processes, rank = placement(trainer)
    sampler = RandomWindowSampler(dataset, windows, batch_size, seed, num_replicas=processes, rank=rank)
    return ResumableDataLoader(dataset, batch_size=batch_size, sampler=sampler, **kwargs)


class EvaluationWindows(Dataset):
    """A split's fixed windows (see the module docstring) in batches: item ``k`` is batch ``k``,
    ``{"tokens": LongTensor (b, block_size + 1)}``, and the last item the shorter window alone,
    ``(1, (T - 1) % block_size + 1)``, when the split leaves one."""

    def __init__(self, ids: Tensor, block_size: int, batch_size: int) -> None:
        full, rest = divmod(len(ids) - 1, block_size)
        if full == 0:
            raise ValueError(f"{len(ids)} ids hold no window of {block_size + 1}.")
        self.windows = ids[: full * block_size + 1].unfold(
            0, block_size + 1, block_size
        )  # (full, block_size + 1), a view
        self.rest = ids[full * block_size :] if rest else None
        self.batch_size = batch_size
        self.full_batches = math.ceil(full / batch_size)

    def __len__(self) -> int:
        return self.full_batches + (self.rest is not None)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        if index == self.full_batches and self.rest is not None:
            return {"tokens": self.rest.long().unsqueeze(0)}
        return {"tokens": self.windows[index * self.batch_size : (index + 1) * self.batch_size].long()}


def evaluation_windows(
    ids: Tensor, block_size: int, batch_size: int, trainer: L.Trainer | None, **kwargs: Any
) -> DataLoader:
    """The validation or test loader: every window of the split once, in order; under several
    processes, this process's whole batches. A split with fewer batches than processes is cut into
    smaller ones, as each process needs one; ``kwargs`` go to the DataLoader.

    Raises:
        DataError: the split has fewer windows than there are processes.
    """
    processes, rank = placement(trainer)
    full, rest = divmod(len(ids) - 1, block_size)
    short = int(rest > 0)
    if full + short < processes:
        raise DataError(
            f"An evaluation split of {full + short} windows of {block_size + 1} tokens cannot give each of "
            f"{processes} processes one."
        )
    if math.ceil(full / batch_size) + short < processes:
        batch_size = full // (processes - short)
    dataset = EvaluationWindows(ids, block_size, batch_size)
    sampler = WholeBatchSampler(dataset, [[k] for k in range(len(dataset))], num_replicas=processes, rank=rank)
    return DataLoader(dataset, batch_size=None, sampler=sampler, **kwargs)
