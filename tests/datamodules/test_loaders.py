"""Evaluation sharding without repeats, in batches of similar length, and training loaders that resume
mid-epoch (no processes started)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from zoo.datamodules.loaders import ResumableDataLoader, WholeBatchSampler, evaluation_loader
from zoo.datamodules.sampling import EpochShuffleSampler, length_batches


def _trainer(processes: int, rank: int) -> SimpleNamespace:
    """What the loaders read from a Trainer: where this process sits among the others."""
    return SimpleNamespace(distributed_sampler_kwargs={"num_replicas": processes, "rank": rank})


def _batches(loader) -> list[list[int]]:
    return [batch[0].tolist() for batch in loader]


@pytest.mark.parametrize("by_length", [False, True])
@pytest.mark.parametrize(
    ("size", "batch_size", "processes"), [(10, 4, 2), (12, 4, 2), (23, 4, 3), (5, 2, 4), (50, 50, 2)]
)
def test_processes_share_whole_batches_without_repeats(size, batch_size, processes, by_length) -> None:
    dataset = TensorDataset(torch.arange(size))
    keys = np.random.default_rng(size).integers(1, 100, size) if by_length else None
    single = _batches(evaluation_loader(dataset, batch_size, None, keys))
    shares = [
        _batches(evaluation_loader(dataset, batch_size, _trainer(processes, rank), keys)) for rank in range(processes)
    ]
    assert all(shares), "every process needs at least one batch, or the others wait for it forever"
    examples = sorted(i for share in shares for batch in share for i in batch)
    assert examples == list(range(size))  # each example exactly once
    if len(single) >= processes:  # then every batch is the one a single process sees
        assert sorted(map(tuple, (b for share in shares for b in share))) == sorted(map(tuple, single))


def test_whole_batch_sampler_is_left_alone_by_lightning() -> None:
    loader = evaluation_loader(TensorDataset(torch.arange(9)), 2, _trainer(2, 1))
    assert isinstance(loader.sampler, torch.utils.data.distributed.DistributedSampler)  # Lightning injects no other
    assert isinstance(loader.sampler, WholeBatchSampler) and _batches(loader) == [[2, 3], [6, 7]]


def test_evaluation_batches_rows_of_similar_length_in_a_fixed_shuffled_order() -> None:
    lengths = np.random.default_rng(0).integers(10, 2000, 203)
    batches = _batches(evaluation_loader(TensorDataset(torch.arange(203)), 8, None, lengths))
    assert batches == length_batches(lengths, 8)  # the same pass every time
    assert sorted(i for batch in batches for i in batch) == list(range(203))
    assert [len(batch) for batch in batches] == [8] * 25 + [3]  # the short batch last
    spans = sorted((int(lengths[batch].min()), int(lengths[batch].max())) for batch in batches)
    assert all(high <= next_low for (_, high), (next_low, _) in zip(spans, spans[1:]))  # runs of neighbours
    firsts = [int(lengths[batch].min()) for batch in batches[:-1]]
    assert firsts != sorted(firsts)  # not shortest first: the first batches sample every length

    def padded(batches: list[list[int]]) -> int:
        return sum(int(lengths[batch].max()) * len(batch) - int(lengths[batch].sum()) for batch in batches)

    in_order = [list(range(start, min(203, start + 8))) for start in range(0, 203, 8)]
    assert padded(batches) * 20 < padded(in_order)


def test_too_small_a_split_for_the_processes_is_refused() -> None:
    with pytest.raises(ValueError, match="3 examples"):
        evaluation_loader(TensorDataset(torch.arange(3)), 8, _trainer(4, 0))


def _training_loader(size: int = 20, batch_size: int = 3) -> ResumableDataLoader:
    return ResumableDataLoader(
        TensorDataset(torch.arange(size)), batch_size=batch_size, sampler=EpochShuffleSampler(size, seed=5)
    )


def _epoch(loader: ResumableDataLoader, epoch: int, stop: int | None = None) -> list[list[int]]:
    loader.sampler.set_epoch(epoch)
    out = []
    for batch in loader:
        out.append(batch[0].tolist())
        if stop is not None and len(out) == stop:
            break
    return out


def test_resumed_loader_serves_the_rest_of_the_interrupted_epoch() -> None:
    reference = _training_loader()
    full = [_epoch(reference, epoch) for epoch in range(3)]
    assert full[1] != full[2]  # the order changes with the epoch...
    assert _epoch(_training_loader(), 1) == full[1]  # ...and only with it

    interrupted = _training_loader()
    assert _epoch(interrupted, 1, stop=3) == full[1][:3]
    state = interrupted.state_dict()
    assert state == {"epoch": 1, "batches": 3}

    resumed = _training_loader()
    resumed.load_state_dict(state)
    assert _epoch(resumed, 1) == full[1][3:]
    assert _epoch(resumed, 2) == full[2]  # skipping applies to one pass only


def test_checkpoint_at_the_end_of_an_epoch_resumes_at_the_next_one() -> None:
    loader = _training_loader()
    _epoch(loader, 0)
    resumed = _training_loader()
    resumed.load_state_dict(loader.state_dict())
    assert _epoch(resumed, 1) == _epoch(_training_loader(), 1)
