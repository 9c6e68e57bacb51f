"""What the recall data modules share: the draws (checked against NumPy's own sampling), sets
batched one length at a time, training batches shuffled by (seed, epoch) and resumable,
evaluation shared between processes without repeats."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from jsonargparse import ArgumentParser

from tests.helpers.statistics import chi_square_p, two_sample_chi_square_p
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.datamodules.loaders import ResumableDataLoader
from zoo.datamodules.recall.base import Examples, RecallDataModule, SetBatches, ShuffledSetBatches, evaluation_batches
from zoo.datamodules.recall.draws import (
    distinct_integers,
    shared_generator,
    split_generator,
    weighted_draws_without_replacement,
)


def _trainer(processes: int, rank: int) -> SimpleNamespace:
    return SimpleNamespace(distributed_sampler_kwargs={"num_replicas": processes, "rank": rank})


def test_distinct_integers_are_a_uniform_ordered_sample_without_replacement() -> None:
    draws = distinct_integers(np.random.default_rng(0), 20_000, 4, 10)
    assert draws.min() == 0 and draws.max() == 9
    assert all(len(set(row)) == 4 for row in draws.tolist())
    for column in range(4):  # each place of the order is uniform over the ten values, as in rng.choice
        assert chi_square_p(np.bincount(draws[:, column], minlength=10), np.full(10, 0.1)) > 1e-3
    pairs = draws[:, 0] * 10 + draws[:, 1]  # the first two together: uniform over the 90 ordered pairs
    expected = np.array([0 if a == b else 1 / 90 for a in range(10) for b in range(10)])
    assert chi_square_p(np.bincount(pairs, minlength=100)[expected > 0], expected[expected > 0]) > 1e-3


def test_weighted_draws_follow_numpy_choice_without_replacement() -> None:
    weights = np.array([8.0, 4.0, 2.0, 1.0, 1.0, 0.5])
    ours = weighted_draws_without_replacement(np.random.default_rng(1), 20_000, 3, weights)
    legacy = np.random.RandomState(2)  # the call Zoology makes, row by row
    theirs = np.stack([legacy.choice(6, 3, replace=False, p=weights / weights.sum()) for _ in range(20_000)])
    assert all(len(set(row)) == 3 for row in ours.tolist())
    assert chi_square_p(np.bincount(ours[:, 0], minlength=6), weights / weights.sum()) > 1e-3
    for column in (1, 2):  # later draws come from the weights left, in order
        counts = [np.bincount(draws[:, column], minlength=6) for draws in (ours, theirs)]
        assert two_sample_chi_square_p(*counts) > 1e-3
    uniform = distinct_integers(np.random.default_rng(1), 20_000, 3, 6)  # the test can tell a uniform draw
    assert chi_square_p(np.bincount(uniform[:, 0], minlength=6), weights / weights.sum()) < 1e-9


def _sets() -> list[Examples]:
    """Three sets of other lengths, each example's id in its tokens (its set * 100 + its index)."""
    sets = []
    for which, (size, length) in enumerate([(7, 4), (5, 6), (12, 3)]):
        ids = np.repeat(which * 100 + np.arange(size)[:, None], length, axis=1)
        sets.append(Examples.from_arrays(ids, ids, ids % 2 == 0, vocab_size=1_000, fields={"set": which}))
    return sets


def _ids(batch: dict[str, torch.Tensor]) -> list[int]:
    return batch["inputs"][:, 0].tolist()


def test_a_batch_holds_one_set_its_fields_and_the_ids_as_int64() -> None:
    examples = _sets()[1]
    assert examples.inputs.dtype == torch.int16  # stored small
    batch = SetBatches(_sets())[(1, [4, 0])]
    assert batch["inputs"].dtype == torch.long and batch["inputs"].shape == (2, 6)
    assert _ids(batch) == [104, 100] and batch["set"].tolist() == [1, 1]
    assert batch["scored"].dtype == torch.bool and batch["targets"].tolist() == batch["inputs"].tolist()


def _epoch(sampler: ShuffledSetBatches, epoch: int) -> list[tuple[int, list[int]]]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_training_batches_cover_every_example_once_a_set_at_a_time_in_an_order_of_seed_and_epoch() -> None:
    dataset = SetBatches(_sets())
    sampler = ShuffledSetBatches(dataset, batch_size=4, seed=3)
    first = _epoch(sampler, 0)
    assert len(first) == len(sampler) == 2 + 2 + 3
    seen = sorted((which, i) for which, indices in first for i in indices)
    assert seen == sorted((w, i) for w, size in enumerate([7, 5, 12]) for i in range(size))
    assert _epoch(ShuffledSetBatches(dataset, 4, seed=3), 0) == first  # a function of (seed, epoch)...
    assert _epoch(sampler, 1) != first and _epoch(ShuffledSetBatches(dataset, 4, seed=4), 0) != first
    assert [w for w, _ in first] != sorted(w for w, _ in first)  # sets interleaved, not served in turn


def test_processes_get_as_many_training_batches_and_together_all() -> None:
    dataset = SetBatches(_sets())
    shares = [_epoch(ShuffledSetBatches(dataset, 4, seed=3, num_replicas=3, rank=r), 2) for r in range(3)]
    assert {len(share) for share in shares} == {3}  # 7 batches rounded up to 9: DDP needs equal counts
    single = _epoch(ShuffledSetBatches(dataset, 4, seed=3), 2)
    assert {(w, tuple(i)) for share in shares for w, i in share} == {(w, tuple(i)) for w, i in single}


def test_evaluation_covers_every_example_once_in_order_and_shares_whole_batches() -> None:
    sets = _sets()
    single = [_ids(batch) for batch in evaluation_batches(sets, 4, None)]
    assert single == [
        [0, 1, 2, 3], [4, 5, 6], [100, 101, 102, 103], [104], [200, 201, 202, 203], [204, 205, 206, 207], [208, 209, 210, 211]
    ]  # fmt: skip
    shares = [[_ids(b) for b in evaluation_batches(sets, 4, _trainer(2, rank))] for rank in range(2)]
    assert sorted(map(tuple, shares[0] + shares[1])) == sorted(map(tuple, single))
    many = [[_ids(b) for b in evaluation_batches(sets, 8, _trainer(5, rank))] for rank in range(5)]
    assert all(many) and sorted(i for share in many for b in share for i in b) == sorted(i for b in single for i in b)


def test_a_token_budget_shrinks_the_batches_of_long_sets_alone() -> None:
    sets = _sets()  # lengths 4, 6 and 3
    batches = [_ids(batch) for batch in evaluation_batches(sets, 4, None, max_tokens=12)]
    assert batches == [
        [0, 1, 2], [3, 4, 5], [6], [100, 101], [102, 103], [104], [200, 201, 202, 203], [204, 205, 206, 207],
        [208, 209, 210, 211],
    ]  # fmt: skip
    one = [_ids(batch) for batch in evaluation_batches(sets, 4, None, max_tokens=1)]
    assert [len(batch) for batch in one] == [1] * 24  # one example at least, however long


class _Tiny(RecallDataModule):
    name = "tiny"
    vocab_size, block_size = 1_000, 6

    def build_split(self, split: str) -> list[Examples]:
        return _sets()


def test_a_resumed_training_loader_serves_the_rest_of_the_interrupted_epoch() -> None:
    def loader() -> ResumableDataLoader:
        data = _Tiny(batch_size=3, seed=5)
        data.setup("fit")
        return data.train_dataloader()

    def epoch(loader: ResumableDataLoader, number: int, stop: int | None = None) -> list[list[int]]:
        loader.sampler.set_epoch(number)
        out = []
        for batch in loader:
            out.append(_ids(batch))
            if len(out) == stop:
                break
        return out

    full = epoch(loader(), 1)
    interrupted = loader()
    assert epoch(interrupted, 1, stop=3) == full[:3]
    resumed = loader()
    resumed.load_state_dict(interrupted.state_dict())
    assert epoch(resumed, 1) == full[3:]
    assert epoch(resumed, 2) == epoch(loader(), 2)


def test_splits_and_sets_draw_apart_and_every_call_draws_the_same() -> None:
    keys = [(), (0,), (0, 0), (1,), (0, 1), (1, 0)]  # trailing zeros too: a plain list of seeds confuses them
    draws = {
        (split, key): split_generator(7, split, *key).integers(1 << 60) for split in ("train", "test") for key in keys
    }
    assert len(set(draws.values())) == len(draws)
    assert split_generator(7, "train", 0, 1).integers(1 << 60) == draws["train", (0, 1)]
    assert shared_generator(7).integers(1 << 60) not in draws.values()


@pytest.mark.parametrize(
    ("name", "arguments", "sizes"),
    [
        ("mqar", ["--data.mixture", "zoology"], (8_192, 1_024)),
        ("mad", ["--data.task", "noisy-in-context-recall", "--data.setting", "frac_noise=0.4"], (32, 127)),
        ("selective_copying", ["--data.test_lengths", "[256, 1024]", "--data.num_tokens", "8"], (16, 1_024)),
        ("induction_heads", ["--data.test_lengths", "[64, 128]", "--data.vocab_size", "20"], (20, 256)),
    ],
)
def test_the_command_line_builds_each_module_from_its_arguments(name: str, arguments: list[str], sizes) -> None:
    module = DATAMODULE_REGISTRY.get(name)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(module, "data")
    parsed = vars(parser.parse_args(arguments).data)
    data = module(**parsed)
    assert (data.vocab_size, data.block_size) == sizes  # what the CLI links into a model
    assert dict(data.hparams) == parsed  # every argument, the base's too: what a checkpoint rebuilds it from
