"""MQAR as Zoology generates it, checked on its statistics: disjoint key and value ids, each key
queried once and answered with its own value, the queries' slots against Zoology's power law,
the labelled positions; seeds; the data module's sets, sizes, links and one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.statistics import chi_square_p, two_sample_chi_square_p
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.datamodules.recall import MIXTURES, MQARDataModule, multiquery_ar
from zoo.errors import DataError

V = 256


def _examples(count: int, seq_len: int, pairs: int, seed: int = 0, **kwargs):
    examples = multiquery_ar(np.random.default_rng(seed), count, seq_len, pairs, vocab_size=V, **kwargs)
    return examples.inputs.long().numpy(), examples.targets.long().numpy(), examples.scored.numpy()


def _slots(inputs: np.ndarray, targets: np.ndarray, pairs: int, passes: int = 1) -> np.ndarray:
    """Each key's query slot, re-derived from the tokens: (examples, pairs), in the pairs' order."""
    context = 2 * pairs * passes
    slots = np.empty((len(inputs), pairs), dtype=np.int64)
    for n, row in enumerate(inputs):
        queries = np.flatnonzero(targets[n] != -100)
        for i, key in enumerate(row[:context:2][:pairs]):
            (where,) = queries[row[queries] == key]
            slots[n, i] = (where - context) // 2
    return slots


@pytest.mark.parametrize("passes", [1, 2])
def test_keys_values_queries_and_labels_are_zoologys(passes: int) -> None:
    inputs, targets, scored = _examples(500, 64, 6, num_passes=passes, random_non_queries=False)
    context = 2 * 6 * passes
    keys, values = inputs[:, 0:12:2], inputs[:, 1:12:2]
    assert keys.min() >= 1 and keys.max() < V // 2 and values.min() >= V // 2 and values.max() < V  # disjoint halves
    assert all(len(set(row)) == 6 for row in keys.tolist()) and all(len(set(row)) == 6 for row in values.tolist())
    assert (inputs[:, :context] == np.tile(inputs[:, :12], passes)).all()  # the pairs, repeated per pass
    query_region = inputs[:, context:]
    assert (np.sort(query_region[query_region > 0].reshape(500, 6), axis=1) == np.sort(keys, axis=1)).all()
    assert (scored == (targets != -100)).all() and scored.sum(axis=1).tolist() == [6] * 500  # the queries alone
    assert not scored[:, :context].any() and not scored[:, context + 1 :: 2].any()  # first token of a slot
    for n in range(500):
        value_of = dict(zip(keys[n].tolist(), values[n].tolist()))
        for position in np.flatnonzero(scored[n]):
            assert targets[n, position] == value_of[inputs[n, position]]  # the queried key's own value


def test_query_slots_follow_zoologys_power_law() -> None:
    inputs, targets, _ = _examples(12_000, 64, 4, seed=1)  # 28 slots after 8 context tokens
    slots = _slots(inputs, targets, 4)
    power_law = np.arange(1, 29, dtype=np.float64) ** (0.01 - 1)  # Zoology's p(g) ~ a (g + 1)^(a - 1)
    power_law /= power_law.sum()
    assert chi_square_p(np.bincount(slots[:, 0], minlength=28), power_law) > 1e-3  # the first key's slot
    legacy = np.random.RandomState(5)  # the later keys draw without replacement, as Zoology's np.random.choice
    reference = np.stack([legacy.choice(28, 4, replace=False, p=power_law) for _ in range(12_000)])
    for i in range(1, 4):
        counts = [np.bincount(draws[:, i], minlength=28) for draws in (slots, reference)]
        assert two_sample_chi_square_p(*counts) > 1e-3
    uniform = np.full(28, 1 / 28)  # the test can tell: the slots are far from uniform
    assert chi_square_p(np.bincount(slots[:, 0], minlength=28), uniform) < 1e-12
    assert np.median(slots[:, 0]) < 28 / 4  # most queries come early, as repeated bigrams in text do


def test_other_tokens_of_the_query_region_are_uniform_ids_or_zeros() -> None:
    inputs, targets, _ = _examples(2_000, 128, 8, seed=2)
    filler = inputs[:, 16:][targets[:, 16:] == -100]
    assert chi_square_p(np.bincount(filler, minlength=V), np.full(V, 1 / V)) > 1e-3
    zeros, zero_targets, _ = _examples(50, 128, 8, seed=2, random_non_queries=False)
    assert (zeros[:, 16:][zero_targets[:, 16:] == -100] == 0).all()


def test_the_same_seed_draws_the_same_examples_another_seed_others() -> None:
    first, second, other = (_examples(64, 64, 4, seed=s)[0] for s in (3, 3, 4))
    assert (first == second).all() and (first != other).any()

    def data(generator_seed: int) -> MQARDataModule:
        module = MQARDataModule(seq_len=64, num_kv_pairs=4, num_train=40, num_test=20, generator_seed=generator_seed)
        module.setup()
        return module

    a, b, c = data(0), data(0), data(1)
    for split in ("train", "validation", "test"):
        assert torch.equal(a.split(split)[0].inputs, b.split(split)[0].inputs)
        assert not torch.equal(a.split(split)[0].inputs, c.split(split)[0].inputs)
    assert not torch.equal(a.split("validation")[0].inputs, a.split("test")[0].inputs)  # two draws of the test sets


def test_the_data_module_serves_one_cell_or_zoologys_mixture_and_links_its_sizes() -> None:
    assert DATAMODULE_REGISTRY.get("mqar") is MQARDataModule
    cell = MQARDataModule(vocab_size=512, seq_len=128, num_kv_pairs=8, num_train=30, num_test=10, batch_size=8)
    assert (cell.vocab_size, cell.block_size) == (512, 128)
    cell.setup()
    batch = next(iter(cell.train_dataloader()))
    assert batch["inputs"].shape == (8, 128) and batch["num_kv_pairs"].tolist() == [8] * 8
    assert sum(b["inputs"].shape[0] for b in cell.test_dataloader()) == 10
    default = MQARDataModule()
    assert (default.vocab_size, default.block_size, default.train_sets[0].num_examples) == (8_192, 256, 100_000)

    mixed = MQARDataModule(mixture="zoology")
    train, test = MIXTURES["zoology"]
    assert mixed.block_size == 1024 and [(s.seq_len, s.num_kv_pairs) for s in train][0] == (64, 4)
    assert sum(s.num_examples for s in train) == 180_000 and {s.num_examples for s in test} == {1_000}
    assert max(s.num_kv_pairs for s in test) == 256  # tested on more pairs than trained


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"seq_len": 63, "num_kv_pairs": 4}, "even seq_len"),
        ({"seq_len": 64, "num_kv_pairs": 17}, "do not fit 64 tokens.*at most 16 pairs"),
        ({"seq_len": 64, "num_kv_pairs": 12, "num_passes": 2}, "do not fit.*at most 10 pairs"),
        ({"vocab_size": 64, "seq_len": 64}, "vocab_size above seq_len"),
        ({"mixture": "arxiv"}, "Unknown MQAR mixture 'arxiv'; known: zoology"),
        ({"mixture": "zoology", "seq_len": 64}, "drop seq_len"),
        ({"power_a": 0.0}, "power_a must be positive"),
        ({"num_train": 0}, "num_train must be at least 1"),
    ],
)
def test_bad_input_is_refused_in_one_line(arguments: dict, message: str) -> None:
    with pytest.raises(DataError, match=message) as error:
        MQARDataModule(**arguments)
    assert "\n" not in str(error.value)
