"""State tracking: each generator's labels against its rule computed here from the tokens alone
(sums, Python's own arithmetic, a walk on the cycle, permutations composed in a loop), the
groups' tables, lengths drawn from the training range, seeds, refusals and a fit from the
command line that tests at every length."""

from __future__ import annotations

import csv
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.cli import QUIET, flags, latest_run
from tests.helpers.statistics import chi_square_p
from zoo.commands import main
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.datamodules.recall import (
    CycleNavigationDataModule,
    EvenPairsDataModule,
    ModularArithmeticDataModule,
    ParityDataModule,
    WordProblemDataModule,
)
from zoo.datamodules.recall.groups import finite_group
from zoo.datamodules.recall.state_tracking_tasks import (
    cycle_navigation,
    even_pairs,
    modular_arithmetic,
    modular_arithmetic_brackets,
    parity,
    word_problem,
)
from zoo.errors import DataError


def _arrays(examples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return examples.inputs.long().numpy(), examples.targets.long().numpy(), examples.scored.numpy()


def _answered_at_the_end(targets: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """The answers, after checking that the last position alone is trained and scored."""
    assert (targets[:, :-1] == -100).all() and (targets[:, -1] >= 0).all()
    assert (scored == (targets != -100)).all()
    return targets[:, -1]


@pytest.mark.parametrize("vocab_size", [3, 5])
def test_parity_answers_the_sum_of_the_symbols_modulo_their_number(vocab_size: int) -> None:
    inputs, targets, scored = _arrays(parity(np.random.default_rng(0), 2_000, 17, vocab_size))
    answers = _answered_at_the_end(targets, scored)
    assert inputs.min() == 1 and inputs.max() == vocab_size - 1  # 0, Grazzi's padding, never drawn
    for row, answer in zip(inputs.tolist(), answers.tolist()):
        assert answer == sum(x - 1 for x in row) % (vocab_size - 1) + 1
    if vocab_size == 3:  # 1 when the 2s are even in number, 2 when odd
        assert ((answers == 2) == ((inputs == 2).sum(1) % 2 == 1)).all()
    ones = np.full(vocab_size - 1, 1 / (vocab_size - 1))
    assert chi_square_p(np.bincount(inputs.ravel(), minlength=vocab_size)[1:], ones) > 1e-3
    assert chi_square_p(np.bincount(answers, minlength=vocab_size)[1:], ones) > 1e-3


_SYMBOLS = {1: "+", 2: "-", 3: "*"}


def test_modular_arithmetic_answers_what_python_evaluates_modulo_five() -> None:
    inputs, targets, scored = _arrays(modular_arithmetic(np.random.default_rng(1), 1_000, 12))
    answers = _answered_at_the_end(targets, scored)
    assert (inputs[:, -1] == 4).all() and (inputs[:, 0:-1:2] >= 5).all()  # numbers at even places, then "="
    assert set(np.unique(inputs[:, 1:-1:2])) == {1, 2, 3}
    for row, answer in zip(inputs.tolist(), answers.tolist()):
        text = "".join(str(x - 5) if i % 2 == 0 else _SYMBOLS[x] for i, x in enumerate(row[:-1]))
        assert answer == eval(text) % 5 + 5, text
    assert chi_square_p(np.bincount(inputs[:, 0:-1:2].ravel() - 5, minlength=5), np.full(5, 0.2)) > 1e-3
    assert chi_square_p(np.bincount(inputs[:, 1:-1:2].ravel() - 1, minlength=3), np.full(3, 1 / 3)) > 1e-3


def test_bracketed_expressions_have_their_length_and_the_value_python_gives_them() -> None:
    modulus = 5
    symbols = {modulus: "+", modulus + 1: "-", modulus + 2: "*", modulus + 3: "(", modulus + 4: ")"}
    rng = np.random.default_rng(2)
    for length in [2, 3, 4, 5, 6, 9, 24, 41]:
        inputs, targets, scored = _arrays(modular_arithmetic_brackets(rng, 200, length))
        answers = _answered_at_the_end(targets, scored)
        assert inputs.shape == (200, length) and (inputs[:, -1] == modulus + 5).all()
        for row, answer in zip(inputs.tolist(), answers.tolist()):
            text = "".join(symbols.get(x, str(x)) for x in row[:-1])
            assert answer == eval(text) % modulus, text
            depth = np.cumsum([{"(": 1, ")": -1}.get(c, 0) for c in text])
            assert depth.min() >= 0 and depth[-1] == 0
    short = {2: r"-\d", 3: r"\(\d\)", 4: r"\(-\d\)"}  # below 5 tokens: d, -d, (d), (-d)
    for length, pattern in short.items():
        row = modular_arithmetic_brackets(rng, 1, length + 1).inputs[0, :-1].tolist()
        assert re.fullmatch(pattern, "".join(symbols.get(x, str(x)) for x in row))


def test_cycle_navigation_answers_where_the_walk_ends() -> None:
    inputs, targets, scored = _arrays(cycle_navigation(np.random.default_rng(3), 1_500, 21))
    answers = _answered_at_the_end(targets, scored)
    assert (inputs[:, -1] == 3).all() and set(np.unique(inputs[:, :-1])) == {0, 1, 2}
    for row, answer in zip(inputs.tolist(), answers.tolist()):
        position = 0
        for action in row[:-1]:
            position = (position + action - 1) % 5  # 0 left, 1 stay, 2 right
        assert answer == 4 + position
    assert chi_square_p(np.bincount(answers - 4, minlength=5), np.full(5, 0.2)) > 1e-3


def test_even_pairs_answers_whether_the_unequal_neighbours_are_even() -> None:
    inputs, targets, scored = _arrays(even_pairs(np.random.default_rng(4), 1_500, 14))
    answers = _answered_at_the_end(targets, scored)
    assert (inputs[:, -1] == 2).all() and set(np.unique(inputs[:, :-1])) == {0, 1}
    for row, answer in zip(inputs.tolist(), answers.tolist()):
        pairs = sum(1 for a, b in zip(row[:-2], row[1:-1]) if a != b)
        assert answer == (3 if pairs % 2 == 0 else 4)
        assert (answer == 3) == (row[0] == row[-2])  # even exactly when the first bit is the last
    assert chi_square_p(np.bincount(answers - 3, minlength=2), np.full(2, 0.5)) > 1e-3


def _sign(permutation: tuple[int, ...]) -> int:
    """+1 or -1 from the cycle decomposition: a cycle of length k is k - 1 transpositions."""
    seen, transpositions = set(), 0
    for start in range(len(permutation)):
        length, i = 0, start
        while i not in seen:
            seen.add(i)
            i, length = permutation[i], length + 1
        transpositions += max(length - 1, 0)
    return -1 if transpositions % 2 else 1


def _elements(name: str) -> list[tuple[int, ...]]:
    """The group's elements as permutations, in the zoo's order: S_n and A_n lexicographic, Z_n its rotations."""
    n = int(name[1:])
    if name[0] == "Z":
        return [tuple((i + k) % n for i in range(n)) for k in range(n)]
    every = list(itertools.permutations(range(n)))
    return every if name[0] == "S" else [p for p in every if _sign(p) == 1]


@pytest.mark.parametrize("name", ["Z5", "S3", "A4", "S5"])
def test_word_problems_label_every_position_with_the_product_so_far(name: str) -> None:
    elements = _elements(name)
    group = finite_group(name)
    inputs, targets, scored = _arrays(word_problem(np.random.default_rng(5), 60, 25, group))
    assert scored.all() and inputs.max() < len(elements)
    for word, products in zip(inputs.tolist(), targets.tolist()):
        state = tuple(range(len(elements[0])))
        for x, product in zip(word, products):
            state = tuple(state[i] for i in elements[x])  # state * x: x applied first, then state
            assert elements[product] == state
    counts = np.bincount(word_problem(np.random.default_rng(6), 400, 30, group).inputs.long().ravel())
    assert chi_square_p(counts, np.full(len(elements), 1 / len(elements))) > 1e-3


@pytest.mark.parametrize(("name", "order"), [("S3", 6), ("S4", 24), ("S5", 120), ("A4", 12), ("A5", 60), ("Z7", 7)])
def test_group_tables_are_groups_of_their_order(name: str, order: int) -> None:
    table = finite_group(name).table
    assert table.shape == (order, order) and table.min() >= 0 and table.max() < order  # closed
    every = np.arange(order)
    assert (table[0] == every).all() and (table[:, 0] == every).all()  # element 0 is the identity
    assert all(sorted(row) == every.tolist() for row in table.tolist())  # a Latin square: inverses, cancellation
    assert all(sorted(column) == every.tolist() for column in table.T.tolist())
    a, b, c = np.random.default_rng(7).integers(0, order, size=(3, 2_000))
    assert (table[table[a, b], c] == table[a, table[b, c]]).all()  # associative
    assert (table == table.T).all() == (name[0] == "Z")  # only Z_n commutes: S_n and A_n (n > 3) do not


def test_alternating_groups_are_the_even_permutations_inside_the_symmetric_ones() -> None:
    for n in (4, 5):
        every = list(itertools.permutations(range(n)))
        even = [k for k, p in enumerate(every) if _sign(p) == 1]
        back = {k: i for i, k in enumerate(even)}
        restricted = finite_group(f"S{n}").table[np.ix_(even, even)]
        assert (np.vectorize(back.get)(restricted) == finite_group(f"A{n}").table).all()


def test_a4_has_no_subgroup_of_order_six() -> None:
    table = finite_group("A4").table
    for a, b in itertools.combinations(range(12), 2):  # a subgroup of order 6 would be generated by two elements
        closure = {0, a, b}
        while (grown := closure | {int(table[x, y]) for x in closure for y in closure}) != closure:
            closure = grown
        assert len(closure) != 6


@pytest.mark.parametrize(
    ("module", "arguments", "vocab_size"),
    [
        (ParityDataModule, {}, 3),
        (ModularArithmeticDataModule, {}, 10),
        (ModularArithmeticDataModule, {"brackets": True}, 12),
        (CycleNavigationDataModule, {}, 9),
        (EvenPairsDataModule, {}, 5),
        (WordProblemDataModule, {"group": "A5"}, 60),
    ],
)
def test_validates_at_every_training_length_and_tests_at_each_test_length(module, arguments, vocab_size) -> None:
    assert DATAMODULE_REGISTRY.get(module.name) is module
    data = module(train_lengths=(4, 9), test_lengths=[10, 32], num_validation=3, num_test=5, **arguments)
    assert (data.vocab_size, data.block_size) == (vocab_size, 32)
    data.setup()
    expected = [4, 6, 8] if module is ModularArithmeticDataModule and not arguments else [4, 5, 6, 7, 8, 9]
    assert [examples.length for examples in data.split("validation")] == expected
    assert [len(examples) for examples in data.split("validation")] == [3] * len(expected)
    assert [(examples.length, len(examples)) for examples in data.split("test")] == [(10, 5), (32, 5)]
    assert [batch["inputs"].shape[1] for batch in data.test_dataloader()] == [10, 32]
    assert all(int(examples.inputs.max()) < vocab_size for examples in data.split("test"))


def test_validation_lengths_move_the_validation_sets_to_the_extrapolation_lengths() -> None:
    """Grazzi et al. validate at their test lengths (40-256), so the checkpoint kept is chosen on
    extrapolation; the sets reach the model's positions (``block_size``) even past the test's."""
    data = ParityDataModule(train_lengths=(3, 12), test_lengths=[12, 64], validation_lengths=[12, 96], num_validation=4)
    assert data.block_size == 96
    data.setup()
    assert [(examples.length, len(examples)) for examples in data.split("validation")] == [(12, 4), (96, 4)]
    assert [examples.length for examples in data.split("test")] == [12, 64]


def _training_lengths(module, **arguments) -> np.ndarray:
    data = module(train_batches=600, batch_size=1, test_lengths=[40], **arguments)
    data.setup("fit")
    return np.array([batch["inputs"].shape[1] for batch in data.train_dataloader()])


def test_each_training_batch_has_one_length_drawn_uniformly_from_the_range() -> None:
    lengths = _training_lengths(EvenPairsDataModule, train_lengths=(3, 14))
    assert lengths.min() == 3 and lengths.max() == 14
    assert chi_square_p(np.bincount(lengths - 3, minlength=12), np.full(12, 1 / 12)) > 1e-3
    even = _training_lengths(ModularArithmeticDataModule, train_lengths=(3, 12))  # the even lengths alone
    assert set(even.tolist()) == {4, 6, 8, 10, 12}
    assert chi_square_p(np.bincount(even // 2 - 2, minlength=5), np.full(5, 0.2)) > 1e-3


def _first_batches(**seeds: int) -> list[torch.Tensor]:
    data = WordProblemDataModule(group="S3", train_lengths=(3, 8), test_lengths=[8], train_batches=4, **seeds)
    data.setup()
    return [batch["inputs"] for batch in data.train_dataloader()] + [data.split("test")[0].inputs]


def test_the_data_is_fixed_by_the_seeds() -> None:
    first = _first_batches()
    assert all(torch.equal(a, b) for a, b in zip(first, _first_batches()))
    other_stream = _first_batches(seed=1)
    assert not torch.equal(first[0], other_stream[0]) and torch.equal(first[-1], other_stream[-1])
    other_data = _first_batches(generator_seed=1)
    assert not torch.equal(first[0], other_data[0]) and not torch.equal(first[-1], other_data[-1])


@pytest.mark.parametrize(
    ("module", "arguments", "message"),
    [
        (ParityDataModule, {"test_lengths": [64, 20]}, "Test length 20 is shorter than the longest training length 40"),
        (WordProblemDataModule, {"group": "S6"}, "Unknown group 'S6': did you mean S5"),
        (WordProblemDataModule, {"group": "a5"}, "did you mean A5"),
        (ParityDataModule, {"vocab_size": 2}, "parity needs vocab_size >= 3"),
        (ModularArithmeticDataModule, {"vocab_size": 6}, "modular arithmetic needs vocab_size >= 7"),
        (ModularArithmeticDataModule, {"brackets": True, "vocab_size": 8}, "with brackets needs vocab_size >= 9"),
        (ParityDataModule, {"train_lengths": (40, 3)}, r"train_lengths \(40, 3\) is inverted"),
        (ModularArithmeticDataModule, {"train_lengths": (3, 3)}, "holds no length modular arithmetic takes"),
        (EvenPairsDataModule, {"train_lengths": (0, 1)}, "takes lengths of at least 2"),
        (ParityDataModule, {"train_lengths": (3,)}, "train_lengths is \\(shortest, longest\\)"),
        (ParityDataModule, {"test_lengths": []}, "test_lengths is empty"),
        (ModularArithmeticDataModule, {"test_lengths": [41]}, "takes even lengths of at least 2.*got 41"),
        (ParityDataModule, {"validation_lengths": []}, "validation_lengths is empty"),
        (ModularArithmeticDataModule, {"validation_lengths": [40, 63]}, "takes even lengths of at least 2.*got 63"),
    ],
)
def test_bad_input_is_refused_in_one_line(module, arguments: dict, message: str) -> None:
    with pytest.raises(DataError, match=message) as error:
        module(**arguments)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "data",
    [
        ["--data", "word_problem", "--data.group", "S3"],
        ["--data", "modular_arithmetic"],  # its default vocabulary resolves in __init__: hparams must agree
        ["--data", "modular_arithmetic", "--data.brackets", "true"],
    ],
    ids=["word_problem", "modular_arithmetic", "brackets"],
)
def test_a_fit_from_the_command_line_tests_at_every_length(in_tmp: Path, data: list[str]) -> None:
    main(
        [
            "fit", "--model", "recall", *flags("model", d_model=16, num_heads=2, lr=1e-2),
            *data, *flags("data", train_lengths=[3, 6], test_lengths=[6, 12, 24]),
            *flags("data", num_validation=4, num_test=8, batch_size=8, train_batches=3),
            *flags("trainer", max_epochs=1, logger="CSVLogger"), "--trainer.logger.save_dir", "runs",
            "--trainer.logger.name", "recall", "--test_after_fit", "true", *QUIET,
        ]
    )  # fmt: skip
    with (latest_run("recall", in_tmp) / "metrics.csv").open(newline="") as handle:
        logged = {key for row in csv.DictReader(handle) for key, value in row.items() if value}
    assert {f"test/accuracy/length_{length}" for length in (6, 12, 24)} <= logged
    validated = (4, 6) if data == ["--data", "modular_arithmetic"] else (3, 4, 5, 6)  # even lengths only there
    assert {f"val/accuracy/length_{length}" for length in validated} <= logged
