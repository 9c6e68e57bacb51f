"""MAD's six tasks, each checked against a re-derivation written here from the tokens alone
(which positions are answers, what they must be, what noise and padding look like), MAD's
settings, and the ``mad`` data module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.statistics import chi_square_p
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.datamodules.recall import MAD_TASKS, MADDataModule, mad_setting, mad_settings
from zoo.datamodules.recall.mad_tasks import (
    compression,
    fuzzy_in_context_recall,
    in_context_recall,
    memorization,
    memorization_map,
    selective_copying,
)
from zoo.errors import DataError


def _arrays(examples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return examples.inputs.long().numpy(), examples.targets.long().numpy(), examples.scored.numpy()


def _next_token_sequences(inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The whole sequences of a task trained on every next token (checking that it is)."""
    assert (targets[:, :-1] == inputs[:, 1:]).all()
    return np.concatenate([inputs, targets[:, -1:]], axis=1)


def _expected_recall_answers(sequence: list[int], is_noise) -> list[bool]:
    """Walk the pairs: a value is an answer when its key came (in a pair that is not noise)
    before; the last pair's value always is. Also checks each key keeps one value."""
    answers, value_of = [False] * len(sequence), {}
    for start in range(0, len(sequence), 2):
        key, value = sequence[start : start + 2]
        if is_noise(key):
            assert is_noise(value)
            continue
        if start == len(sequence) - 2:
            assert key in value_of  # the last key is one shown before
        answers[start + 1] = key in value_of or start == len(sequence) - 2
        assert value_of.setdefault(key, value) == value
    return answers


@pytest.mark.parametrize(("vocab_size", "noise", "fraction"), [(16, 0, 0.0), (32, 16, 0.2), (32, 16, 0.8)])
def test_in_context_and_noisy_recall_answers_are_the_values_of_keys_seen_before(vocab_size, noise, fraction) -> None:
    inputs, targets, scored = _arrays(in_context_recall(np.random.default_rng(0), 300, vocab_size, 64, noise, fraction))
    assert inputs.shape == (300, 63)  # the model reads all but the last token
    sequences = _next_token_sequences(inputs, targets)
    non_special = vocab_size - noise
    keys = sequences[:, :-2:2][sequences[:, :-2:2] < non_special]
    assert (
        keys.max() < non_special // 2 and sequences[:, 1::2][sequences[:, 1::2] < non_special].min() >= non_special // 2
    )
    noise_pairs = 0
    for n, sequence in enumerate(sequences.tolist()):
        answers = _expected_recall_answers(sequence, lambda token: token >= non_special)
        assert scored[n].tolist() == answers[1:]  # scored where the answer is predicted
        noise_pairs += sum(token >= non_special for token in sequence[:-2:2])
    slots = 300 * 31
    expected = fraction * slots * (1 - 1 / 32)  # each pair but one random index of 32 may become noise
    assert abs(noise_pairs - expected) <= 4 * np.sqrt(slots * fraction * (1 - fraction)) + 1e-9
    assert not scored[inputs >= non_special].any()  # noise is never scored


def _fuzzy_pairs(sequence: list[int], keys_below: int, pad: int) -> list[tuple[tuple, tuple, int]]:
    """The (key, value, value's start) runs of a fuzzy sequence: padding, then a run of key ids
    followed by a run of value ids, pair after pair."""
    position = 0
    while sequence[position] == pad:
        position += 1
    pairs = []
    while position < len(sequence):
        key_start = position
        while sequence[position] < keys_below:
            position += 1
        value_start = position
        while position < len(sequence) and keys_below <= sequence[position] < pad:
            position += 1
        pairs.append((tuple(sequence[key_start:value_start]), tuple(sequence[value_start:position]), value_start))
    return pairs


@pytest.mark.parametrize("training", [True, False])
def test_fuzzy_recall_keys_and_values_are_runs_and_answers_follow_keys_seen_before(training: bool) -> None:
    inputs, targets, scored = _arrays(
        fuzzy_in_context_recall(np.random.default_rng(1), 300, 16, 128, training=training)
    )
    assert inputs.shape == (300, 128)
    sequences = _next_token_sequences(inputs, targets)
    key_sizes, shown_before = [], 0
    for n, sequence in enumerate(sequences.tolist()):
        pairs = _fuzzy_pairs(sequence, keys_below=7, pad=15)  # 15 ids but the pad: 7 for keys, 8 for values
        answers, value_of = [False] * len(sequence), {}
        for index, (key, value, start) in enumerate(pairs):
            assert len(set(key)) == len(key) <= 3 and len(set(value)) == len(value) <= 3 and value
            if key in value_of or index == len(pairs) - 1:
                answers[start : start + len(value)] = [True] * len(value)
            assert value_of.setdefault(key, value) == value  # a key keeps its value
            key_sizes.append(len(key))
        shown_before += pairs[-1][0] in {key for key, _, _ in pairs[:-1]}
        assert scored[n].tolist() == answers[1:]
    if training:
        assert chi_square_p(np.bincount(key_sizes, minlength=4)[1:], np.full(3, 1 / 3)) > 1e-3
    else:
        assert set(key_sizes) == {3}  # MAD tests on keys of the longest size
    assert shown_before >= 0.9 * 300  # (MAD's loop can end before it inserts the probe pair)


def test_memorization_answers_each_key_with_its_fixed_value_at_the_insert_token() -> None:
    value_of = memorization_map(np.random.default_rng(2), 256)
    assert (
        len(value_of) == 127 and len(set(value_of.tolist())) == 127 and 127 <= value_of.min() and value_of.max() < 255
    )
    inputs, targets, scored = _arrays(memorization(np.random.default_rng(3), 200, 256, 32, value_of))
    assert inputs.shape == (200, 32) and (inputs[:, 1::2] == 255).all() and inputs[:, ::2].max() < 127
    assert (targets[:, ::2] == -100).all() and (targets[:, 1::2] == value_of[inputs[:, ::2]]).all()
    assert (scored == (targets != -100)).all()


def test_compression_targets_are_the_inputs_all_scored() -> None:
    inputs, targets, scored = _arrays(compression(np.random.default_rng(4), 200, 16, 32))
    assert (inputs[:, -1] == 15).all() and inputs[:, :-1].max() < 15 and (targets == inputs).all() and scored.all()
    assert chi_square_p(np.bincount(inputs[:, :-1].ravel(), minlength=15), np.full(15, 1 / 15)) > 1e-3


def test_selective_copying_answers_are_the_data_tokens_in_order_after_the_copy_token() -> None:
    inputs, targets, scored = _arrays(selective_copying(np.random.default_rng(5), 2_000, 16, 64, 8))
    blank, copy = 14, 15
    assert (inputs[:, 64 - 9] == copy).all() and (inputs[:, 64 - 8 :] == blank).all()
    assert (inputs[:, 64 - 10] != blank).all()  # the last token to copy sits just before the copy token
    data = inputs[:, : 64 - 9][inputs[:, : 64 - 9] != blank].reshape(2_000, 8)  # exactly 8, in order
    assert (targets[:, 64 - 8 :] == data).all() and (targets[:, : 64 - 8] == -100).all()
    assert (scored == (targets != -100)).all()
    blanks_first = np.argmax(inputs != blank, axis=1)  # each of the 47 blanks goes before one of the 8 tokens
    assert abs(blanks_first.mean() - 47 / 8) < 4 * np.sqrt(47 * (1 / 8) * (7 / 8) / 2_000)


def test_the_settings_are_mads_one_factor_at_a_time() -> None:
    assert list(MAD_TASKS) == [
        "in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall",
        "memorization", "compression", "selective_copying",
    ]  # fmt: skip
    assert {task: len(mad_settings(task)) for task in MAD_TASKS} == {
        "in_context_recall": 11, "noisy_in_context_recall": 14, "fuzzy_in_context_recall": 11,
        "memorization": 6, "compression": 11, "selective_copying": 13,
    }  # fmt: skip
    assert mad_settings("noisy-in-context-recall")[1:4] == ["vocab_size=48", "vocab_size=80", "vocab_size=144"]
    assert mad_setting("noisy_in_context_recall") == {
        "vocab_size": 32, "seq_len": 128, "num_train_examples": 12_800, "noise_vocab_size": 16, "frac_noise": 0.2,
    }  # fmt: skip
    assert mad_setting("selective_copying", "num_tokens_to_copy=96")["num_tokens_to_copy"] == 96
    for task in MAD_TASKS:
        baseline = mad_setting(task)
        for setting in mad_settings(task)[1:]:
            changed = {k for k, v in mad_setting(task, setting).items() if baseline[k] != v}
            assert changed == {setting.split("=")[0]}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"task": "copying"}, "MAD has no task 'copying'; its tasks: in_context_recall, "),
        (
            {"task": "memorization", "setting": "seq_len=64"},
            "no setting 'seq_len=64' for memorization; its settings: baseline, vocab_size=512",
        ),
        ({"task": "compression", "setting": "vocab_size=48"}, "no setting 'vocab_size=48'"),
        ({"num_test": 0}, "num_test must be at least 1"),
    ],
)
def test_a_task_or_setting_mad_does_not_define_is_refused_in_one_line(arguments: dict, message: str) -> None:
    with pytest.raises(DataError, match=message) as error:
        MADDataModule(**arguments)
    assert "\n" not in str(error.value)


def test_the_data_module_serves_the_setting_with_mads_test_distribution() -> None:
    assert DATAMODULE_REGISTRY.get("mad") is MADDataModule
    recall = MADDataModule("in_context_recall", "num_train_examples=800", num_test=50, batch_size=32)
    assert (recall.vocab_size, recall.block_size, recall.num_train) == (16, 127, 800)
    recall.setup()
    assert len(recall.split("train")[0]) == 800 and len(recall.split("test")[0]) == 50
    assert next(iter(recall.train_dataloader()))["inputs"].shape == (32, 127)

    fuzzy = MADDataModule("fuzzy_in_context_recall", "num_train_examples=800", num_test=30)
    fuzzy.setup()
    test_keys = fuzzy.split("test")[0].inputs.long()
    assert ((test_keys < 7).sum(dim=1) % 3 == 0).all()  # test keys are all three ids long

    first, second, other = (MADDataModule("memorization", num_test=40, generator_seed=s) for s in (0, 0, 1))
    for module in (first, second, other):
        module.setup()
    train, test = (first.split(split)[0] for split in ("train", "test"))
    value_of = {}
    for examples in (train, test):  # one map for every split
        for key, value in zip(examples.inputs[:, ::2].flatten().tolist(), examples.targets[:, 1::2].flatten().tolist()):
            assert value_of.setdefault(key, value) == value
    assert torch.equal(train.inputs, second.split("train")[0].inputs)
    assert not torch.equal(train.inputs, other.split("train")[0].inputs)
    assert (first.vocab_size, first.block_size) == (256, 32)
