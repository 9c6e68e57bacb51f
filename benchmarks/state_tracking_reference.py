"""Compare the zoo's state-tracking generators with the reference code's own: Grazzi et al.'s
formal-language tasks, the Chomsky suite's, and word-problem's groups.

Usage: python benchmarks/state_tracking_reference.py [--grazzi ROOT] [--chomsky ROOT]
    [--word-problem ROOT] [--abstract-algebra ROOT] [--examples 2000] [--seed 0]

Each ``ROOT`` is a checkout (no reference code is kept in this project), for example from the
mirrors the fetch tool brings::

    for repo in adankow+unlocking_state_tracking google-deepmind+neural_networks_chomsky_hierarchy \\
                jopetty+word-problem jopetty+abstract_algebra; do
        mkdir -p /tmp/ref_x/$repo && git -C /work/.mirror/$repo/repo archive HEAD | tar -x -C /tmp/ref_x/$repo
    done
    python benchmarks/state_tracking_reference.py --grazzi /tmp/ref_x/adankow+unlocking_state_tracking \\
        --chomsky /tmp/ref_x/google-deepmind+neural_networks_chomsky_hierarchy \\
        --word-problem /tmp/ref_x/jopetty+word-problem --abstract-algebra /tmp/ref_x/jopetty+abstract_algebra

What is compared:

* **Grazzi et al.** (``xlstm/experiments/data/formal_language/tasks/*.py``, each file loaded on its
  own, so the package's training code is never imported): their generators at their paper's
  setting (sequence lengths 3-40, context 256). On their very inputs, the zoo's label functions
  must give their labels (*agreement*); their cycle navigation and even pairs, written for their
  ids, are read in the Chomsky suite's (the zoo's) ids. Their bracketed expressions are drawn from
  the same NumPy generator state by their ``generate_one_expression_and_result`` and the zoo's
  ``bracket_expression``, which must give the same tokens and values; both generators' labels are
  checked against Python's own evaluation of the expression. The distributions (lengths, tokens,
  answers) are printed side by side with the zoo's training draws, and ``p = ...`` is the
  two-sample chi-square test that both come from one distribution.
* **The Chomsky suite** and **word-problem**: their generators are imported if their packages are
  there (JAX for the former; polars, fire and pyrootutils for the latter's ``generate_data.py``);
  where they are not, the script says so and compares nothing of them. word-problem's groups come
  from ``abstract_algebra`` (its ``generate_symmetric_group``, ``commutator_subalgebra`` and
  ``generate_cyclic_group``, as ``generate_data.generate_group`` calls them), which needs NumPy
  alone: its tables must equal the zoo's index for index.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from zoo.datamodules.recall import ModularArithmeticDataModule, ParityDataModule
from zoo.datamodules.recall.groups import finite_group
from zoo.datamodules.recall.state_tracking_tasks import (
    bracket_expression,
    cycle_navigation_answers,
    even_pairs_answers,
    modular_arithmetic_answers,
    parity_answers,
)

GRAZZI_TASKS = "xlstm/experiments/data/formal_language/tasks"
MODULUS = 5
"""Grazzi's and the Chomsky suite's modulus (vocabularies 10 and 12)."""
SETTING = {"min_sequence_length": 3, "max_sequence_length": 40, "context_length": 256}
"""Grazzi's training setting (``experiments/*.yaml``)."""


def load_file(path: Path) -> ModuleType:
    """The module in ``path``, loaded on its own (its package's ``__init__`` never runs)."""
    spec = importlib.util.spec_from_file_location(f"reference_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def two_sample_p(first: np.ndarray, second: np.ndarray) -> str:
    """``p = ...``, the chi-square test of homogeneity of two samples of non-negative integers."""
    cells = int(max(first.max(), second.max())) + 1
    table = np.stack([np.bincount(first, minlength=cells), np.bincount(second, minlength=cells)]).astype(np.float64)
    table = table[:, table.sum(axis=0) > 0]
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    half_degrees = torch.tensor((table.shape[1] - 1) / 2, dtype=torch.float64)
    p = torch.special.gammaincc(half_degrees, torch.tensor(statistic / 2, dtype=torch.float64))  # chi-square's tail
    return f"p = {float(p):.3f}"


def describe(name: str, reference: np.ndarray, zoo: np.ndarray) -> None:
    print(f"    {name:<38} reference {_summary(reference):<26} zoo {_summary(zoo):<26} {two_sample_p(reference, zoo)}")


def _summary(values: np.ndarray) -> str:
    return f"{values.min()}-{values.max()}, mean {values.mean():.3f}"


def agreement(name: str, reference: np.ndarray, zoo: np.ndarray) -> None:
    print(f"    {name:<38} {int((reference == zoo).sum())} of {len(reference)} agree")


def reference_rows(result: tuple[np.ndarray, np.ndarray]) -> list[tuple[np.ndarray, int]]:
    """Grazzi's ``(res, prediction_mask)`` -> ``(tokens read, answer)`` per row: everything before
    the answer's position (their model reads it, shifted by one) and the answer there."""
    res, mask = result
    return [(row[:at], int(row[at])) for row, at in zip(res, mask.argmax(axis=1))]


def zoo_training_draws(data: ModularArithmeticDataModule | ParityDataModule) -> list[tuple[np.ndarray, int]]:
    """``(tokens read, answer)`` of the zoo's training stream, one example a batch (lengths drawn as
    training draws them)."""
    data.setup("fit")
    return [(batch["inputs"][0].numpy(), int(batch["targets"][0, -1])) for batch in data.train_dataloader()]


def lengths(rows: list[tuple[np.ndarray, int]]) -> np.ndarray:
    return np.array([len(tokens) for tokens, _ in rows])


def answers(rows: list[tuple[np.ndarray, int]]) -> np.ndarray:
    return np.array([answer for _, answer in rows])


def tokens(rows: list[tuple[np.ndarray, int]], places: slice = slice(None)) -> np.ndarray:
    return np.concatenate([row[places] for row, _ in rows])


def compare_grazzi(root: Path, examples: int, seed: int) -> None:
    tasks = {name: load_file(root / GRAZZI_TASKS / f"{name}.py") for name in ("parity", "modular_arithmetic")}
    draws = {"batch_size": 1, "train_batches": examples, "train_lengths": (3, 40), "test_lengths": [40]}

    print("  parity (vocab_size 3)")
    rows = reference_rows(tasks["parity"].parity(batch_size=examples, vocab_size=3, seed=seed, **SETTING))
    agreement("answers on their inputs", answers(rows), np.array([parity_answers(r[None])[0] for r, _ in rows]))
    zoo = zoo_training_draws(ParityDataModule(**draws))
    describe("tokens read", lengths(rows), lengths(zoo))
    describe("symbols", tokens(rows), tokens(zoo))
    describe("answers", answers(rows), answers(zoo))

    print("  modular arithmetic without brackets (vocab_size 10)")
    generate = tasks["modular_arithmetic"].modular_arithmetic
    rows = reference_rows(generate(batch_size=examples, vocab_size=10, seed=seed, **SETTING))
    assert all(r[-1] == 4 for r, _ in rows), "their expression ends with '=' (id 4)"
    mine = np.array([modular_arithmetic_answers(r[None, :-1])[0] for r, _ in rows])
    agreement("answers on their inputs", answers(rows), mine)
    zoo = zoo_training_draws(ModularArithmeticDataModule(**draws))
    describe("tokens read", lengths(rows), lengths(zoo))
    describe("numbers (ids 5-9)", tokens(rows, slice(0, -1, 2)), tokens(zoo, slice(0, -1, 2)))
    describe("operators (ids 1-3)", tokens(rows, slice(1, -1, 2)), tokens(zoo, slice(1, -1, 2)))
    describe("answers", answers(rows), answers(zoo))

    compare_brackets(root, examples, seed)
    compare_grazzi_cycle_and_pairs(root, examples, seed)


BRACKET_IDS = {"+": MODULUS, "-": MODULUS + 1, "*": MODULUS + 2, "(": MODULUS + 3, ")": MODULUS + 4}
"""Grazzi's ids of the bracketed task's symbols at modulus 5 (the numbers are their own ids)."""


def bracket_ids(strings: list[str]) -> list[int]:
    return [BRACKET_IDS[t] if t in BRACKET_IDS else int(t) for t in strings]


def python_value(expression: np.ndarray) -> int:
    """What Python's own arithmetic makes of a bracketed expression in Grazzi's ids, modulo 5."""
    names = {v: k for k, v in BRACKET_IDS.items()}
    return eval("".join(names.get(int(t), str(int(t))) for t in expression)) % MODULUS


def compare_brackets(root: Path, examples: int, seed: int) -> None:
    print("  modular arithmetic with brackets (vocab_size 12)")
    try:
        brackets = load_file(root / GRAZZI_TASKS / "modular_arithmetic_with_brackets.py")
    except ImportError as error:
        print(f"    could not import it: {error}")
        return
    same = values = 0
    for offset in range(examples):  # their online generator: one example per seed
        theirs, zoos = np.random.default_rng(seed + offset), np.random.default_rng(seed + offset)
        length = max(int(theirs.integers(3, 41)), 5) - 3
        zoos.integers(3, 41)  # the same state
        strings, value = brackets.generate_one_expression_and_result(MODULUS, length, True, theirs)
        mine, my_value = bracket_expression(zoos, length, MODULUS)
        same += bracket_ids(strings) == mine
        values += int(value) == my_value
    print(f"    {'one NumPy state, their draw and ours':<38} {same} of {examples} token for token, {values} values")

    generate = brackets.modular_arithmetic_with_brackets
    rows = reference_rows(generate(batch_size=examples, vocab_size=12, seed=seed, **SETTING))
    zoo = zoo_training_draws(ModularArithmeticDataModule(brackets=True, batch_size=1, train_batches=examples))
    right = [sum(python_value(r[:-1]) == a for r, a in sample) for sample in (rows, zoo)]
    print(f"    {'labels = Python evaluation':<38} reference {right[0]} of {len(rows)}, zoo {right[1]} of {len(zoo)}")
    describe("tokens read", lengths(rows), lengths(zoo))
    describe("answers", answers(rows), answers(zoo))
    fixed, theirs, mine = 37, [], []
    rng_theirs, rng_mine = np.random.default_rng(seed + 1), np.random.default_rng(seed + 2)
    for _ in range(examples):
        theirs += bracket_ids(brackets.generate_one_expression_and_result(MODULUS, fixed, True, rng_theirs)[0])
        mine += bracket_expression(rng_mine, fixed, MODULUS)[0]
    describe(f"tokens of {fixed}-token expressions", np.array(theirs), np.array(mine))


def compare_grazzi_cycle_and_pairs(root: Path, examples: int, seed: int) -> None:
    cycle = load_file(root / GRAZZI_TASKS / "cycle_navigation.py").cycle_navigation
    pairs = load_file(root / GRAZZI_TASKS / "even_pairs.py").even_pairs
    print("  cycle navigation, Grazzi's generator (vocab_size 9: a cycle of 5), read in the zoo's ids")
    rows = reference_rows(cycle(batch_size=examples, vocab_size=9, seed=seed, **SETTING))
    actions = [np.array([{1: 1, 2: 2, 3: 0}[int(t)] for t in r]) for r, _ in rows]  # stay, +1, -1
    mine = np.array([cycle_navigation_answers(a[None])[0] for a in actions])
    agreement("final position on their inputs", answers(rows) - 4, mine - 4)
    print("  even pairs, Grazzi's generator (vocab_size 3), read in the zoo's ids")
    rows = reference_rows(pairs(batch_size=examples, vocab_size=3, seed=seed, **SETTING))
    mine = np.array([even_pairs_answers(r[None] - 1)[0] for r, _ in rows])
    agreement("even (0) or odd (1) on their inputs", answers(rows) - 1, mine - 3)


def compare_chomsky(root: Path, examples: int, seed: int) -> None:
    package = Path(tempfile.mkdtemp()) / "neural_networks_chomsky_hierarchy"  # the name its imports use
    package.symlink_to(root.resolve())
    sys.path.insert(0, str(package.parent))
    try:
        import jax
        from neural_networks_chomsky_hierarchy.tasks.regular import cycle_navigation, even_pairs, modular_arithmetic
    except ImportError as error:
        print(f"  could not import its tasks: {error}; nothing of it compared")
        return
    rules = {  # the suite's symbols -> its classes, through the zoo's label functions
        "cycle navigation": (cycle_navigation.CycleNavigation(), lambda s: cycle_navigation_answers(s) - 4),
        "even pairs": (even_pairs.EvenPairs(), lambda s: even_pairs_answers(s) - 3),
        "modular arithmetic": (
            modular_arithmetic.ModularArithmetic(),  # numbers 0-4, then + - * as 5-7: Grazzi's ids 5-9 and 1-3
            lambda s: modular_arithmetic_answers(np.where(np.arange(s.shape[1]) % 2 == 0, s + 5, s - 4)) - 5,
        ),
    }
    for name, (task, rule) in rules.items():
        batch = task.sample_batch(jax.random.PRNGKey(seed), examples, 21)
        symbols, classes = np.asarray(batch["input"]).argmax(-1), np.asarray(batch["output"]).argmax(-1)
        agreement(f"{name}, their inputs (21 symbols)", classes, rule(symbols))


def compare_word_problem(root: Path | None, algebra: Path | None) -> None:
    if root is not None:
        try:
            load_file(root / "src" / "generate_data.py")
            print("  generate_data.py imported")
        except ImportError as error:
            print(f"  could not import src/generate_data.py: {error}")
    if algebra is None:
        return
    sys.path.insert(0, str(algebra / "src"))
    from abstract_algebra.finite_algebras import generate_cyclic_group, generate_symmetric_group

    theirs = {
        "S3": generate_symmetric_group(3),
        "S4": generate_symmetric_group(4),
        "S5": generate_symmetric_group(5),
        "A4": generate_symmetric_group(4).commutator_subalgebra(),
        "A5": generate_symmetric_group(5).commutator_subalgebra(),
        "Z5": generate_cyclic_group(5),
        "Z60": generate_cyclic_group(60),
    }
    for name, group in theirs.items():
        table = np.array(group.table.tolist())
        same = table.shape == finite_group(name).table.shape and (table == finite_group(name).table).all()
        identity = group.elements.index(group.identity)
        print(
            f"  {name:<4} abstract_algebra's table, order {len(table):>3}: identity at {identity}, zoo's table equal: {same}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grazzi", type=Path)
    parser.add_argument("--chomsky", type=Path)
    parser.add_argument("--word-problem", type=Path)
    parser.add_argument("--abstract-algebra", type=Path)
    parser.add_argument("--examples", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.grazzi:
        print(f"Grazzi et al. ({args.grazzi}), {args.examples} examples each")
        compare_grazzi(args.grazzi, args.examples, args.seed)
    if args.chomsky:
        print(f"The Chomsky suite ({args.chomsky})")
        compare_chomsky(args.chomsky, args.examples, args.seed)
    if args.word_problem or args.abstract_algebra:
        print(f"word-problem ({args.word_problem}), abstract_algebra ({args.abstract_algebra})")
        compare_word_problem(args.word_problem, args.abstract_algebra)


if __name__ == "__main__":
    main()
