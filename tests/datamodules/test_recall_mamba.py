"""The Mamba paper's selective copying and induction heads: their structure re-derived from the
tokens, the uniform draws, fresh and resumable training batches, test sets at every length."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.statistics import chi_square_p
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.datamodules.recall import (
    InductionHeadsDataModule,
    SelectiveCopyingDataModule,
    induction_heads,
    selective_copying,
)
from zoo.errors import DataError


def _arrays(examples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return examples.inputs.long().numpy(), examples.targets.long().numpy(), examples.scored.numpy()


def test_selective_copying_copies_the_scattered_data_ids_at_the_markers() -> None:
    inputs, targets, scored = _arrays(selective_copying(np.random.default_rng(0), 3_000, 64, 16, 8))
    region, markers = inputs[:, :56], inputs[:, 56:]
    assert (markers == 15).all() and (region != 15).all()
    data = region[region != 0].reshape(3_000, 8)  # 8 ids of 1 ... 14 among the noise, in order
    assert data.min() >= 1 and data.max() <= 14
    assert (targets[:, 56:] == data).all() and (targets[:, :56] == -100).all() and (scored == (targets != -100)).all()
    assert chi_square_p(np.bincount(data.ravel(), minlength=15)[1:], np.full(14, 1 / 14)) > 1e-3
    places = np.bincount(np.nonzero(region)[1], minlength=56)  # every place of the region equally likely
    assert chi_square_p(places, np.full(56, 1 / 56)) > 1e-3


def test_induction_heads_recall_the_id_after_the_first_special_one() -> None:
    inputs, targets, scored = _arrays(induction_heads(np.random.default_rng(1), 4_000, 32, 16))
    assert (inputs == 15).sum(axis=1).tolist() == [2] * 4_000 and (inputs[:, -1] == 15).all()
    first = np.argmax(inputs == 15, axis=1)
    assert (targets[:, -1] == inputs[np.arange(4_000), first + 1]).all()  # the id that followed it
    assert (targets[:, :-1] == inputs[:, 1:]).all()  # every other target is the next id, as H3 trains
    assert scored[:, -1].all() and scored.sum() == 4_000
    assert chi_square_p(np.bincount(first, minlength=29), np.full(29, 1 / 29)) > 1e-3  # 0 ... L - 4, uniform
    ids = inputs[:, :-1][inputs[:, :-1] != 15]
    assert chi_square_p(np.bincount(ids, minlength=15), np.full(15, 1 / 15)) > 1e-3


def test_induction_heads_trained_on_the_recalled_id_alone_ignore_every_other_target() -> None:
    rng = lambda: np.random.default_rng(2)  # noqa: E731
    every = _arrays(induction_heads(rng(), 500, 32, 16))
    inputs, targets, scored = _arrays(induction_heads(rng(), 500, 32, 16, scored_only=True))
    assert (inputs == every[0]).all() and (scored == every[2]).all()  # the same examples
    assert (targets[:, -1] == every[1][:, -1]).all() and (targets[:, :-1] == -100).all()
    data = InductionHeadsDataModule(seq_len=32, test_lengths=[32], num_test=4, train_batches=2, scored_only=True)
    data.setup()
    batch = next(iter(data.train_dataloader()))
    assert bool((batch["targets"][:, :-1] == -100).all()) and bool((batch["targets"][:, -1] >= 0).all())


@pytest.mark.parametrize("module", [SelectiveCopyingDataModule, InductionHeadsDataModule])
def test_tests_at_every_length_validates_at_the_training_one_and_links_the_longest(module) -> None:
    assert DATAMODULE_REGISTRY.get(module.name) is module
    data = module(seq_len=64, test_lengths=[64, 256, 1024], num_test=6, batch_size=4, train_batches=5)
    assert (data.vocab_size, data.block_size) == (16, 1024)
    data.setup()
    assert [examples.length for examples in data.split("test")] == [64, 256, 1024]
    assert [examples.length for examples in data.split("validation")] == [64]
    lengths = [batch["inputs"].shape[1] for batch in data.test_dataloader()]
    assert lengths == [64, 64, 256, 256, 1024, 1024]  # a batch never mixes lengths
    assert not torch.equal(data.split("validation")[0].inputs, data.split("test")[0].inputs)


def _training(seed: int = 0, generator_seed: int = 0) -> torch.utils.data.DataLoader:
    data = InductionHeadsDataModule(seq_len=32, train_batches=6, batch_size=4, seed=seed, generator_seed=generator_seed)
    data.setup("fit")
    return data.train_dataloader()


def _epoch(loader, epoch: int, stop: int | None = None) -> list[torch.Tensor]:
    loader.sampler.set_epoch(epoch)
    out = []
    for batch in loader:
        out.append(batch["inputs"])
        if len(out) == stop:
            break
    return out


def test_training_batches_are_fresh_each_epoch_fixed_by_the_seeds_and_resumable() -> None:
    first = _epoch(_training(), 0)
    assert len(first) == 6 and all(batch.shape == (4, 32) for batch in first)
    assert all(torch.equal(a, b) for a, b in zip(first, _epoch(_training(), 0)))
    assert not torch.equal(first[0], _epoch(_training(), 1)[0])  # new data every epoch
    assert not torch.equal(first[0], _epoch(_training(seed=1), 0)[0])
    assert not torch.equal(first[0], _epoch(_training(generator_seed=1), 0)[0])

    interrupted = _training()
    assert len(_epoch(interrupted, 2, stop=2)) == 2
    resumed = _training()
    resumed.load_state_dict(interrupted.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(_epoch(resumed, 2), _epoch(_training(), 2)[2:]))


@pytest.mark.parametrize(
    ("module", "arguments", "message"),
    [
        (SelectiveCopyingDataModule, {"seq_len": 30, "num_tokens": 16}, "cannot hold 16 ids.*at least 32"),
        (SelectiveCopyingDataModule, {"test_lengths": [256, 24]}, "seq_len=24 cannot hold 16 ids"),
        (SelectiveCopyingDataModule, {"vocab_size": 2}, "vocab_size >= 3"),
        (InductionHeadsDataModule, {"vocab_size": 2}, "vocab_size >= 3"),
        (InductionHeadsDataModule, {"test_lengths": [3]}, "seq_len of at least 4, got 3"),
        (InductionHeadsDataModule, {"test_lengths": []}, "test_lengths is empty"),
    ],
)
def test_bad_input_is_refused_in_one_line(module, arguments: dict, message: str) -> None:
    with pytest.raises(DataError, match=message) as error:
        module(**arguments)
    assert "\n" not in str(error.value)
