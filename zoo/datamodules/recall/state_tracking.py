"""State tracking as data modules: parity, modular arithmetic (with and without brackets), cycle
navigation, even pairs and group word problems (:mod:`.state_tracking_tasks` generates them,
:mod:`.groups` builds the groups), trained on a range of lengths and tested at longer ones.

These are the tasks where a fixed-size state must track a state, the finite automata of regular
languages: linear recurrences whose diagonal transitions stay in [0, 1] cannot count modulo 2
(Grazzi et al., 2025), and word problems over non-solvable groups (``A5``, ``S5``) are
NC1-complete, beyond the constant-depth transformers and diagonal state-space models of TC0 unless
the classes are equal (Merrill, Petty and Sabharwal, 2024).

**Protocol.** Each data module trains on fresh batches every step (``train_batches`` per epoch,
batch ``i`` of epoch ``e`` drawn from ``(generator_seed, seed, e, i)``), each batch at one length
drawn uniformly from the lengths of ``train_lengths = (shortest, longest)`` that the task takes
(modular arithmetic without brackets takes even ones). It validates on a set at each of those
lengths, or at each of ``validation_lengths`` where given (``num_validation`` examples each), and
tests on a set at each of ``test_lengths`` (``num_test`` each), which gives
``val/accuracy/length_<L>`` and ``test/accuracy/length_<L>`` per length. The references:

* Grazzi et al. (parity, modular arithmetic) train on sequence lengths 3-40 and validate and test
  on 40-256, each example of its own length, padded to 256 in a batch, the test a single mixed
  set; the zoo draws one length per batch (a batch holds one length) and tests length by length.
  Their validation set lies at the test lengths, so the checkpoint they keep is chosen on
  extrapolation; ``validation_lengths`` (for instance ``[40, 64, 128, 256]``) does the same here,
  where the default validates at the training lengths and keeps the test lengths unseen.
  Their defaults here: ``train_lengths`` (3, 40), ``test_lengths`` 40 ... 256, batches of 256.
* The Chomsky suite (cycle navigation, even pairs) draws one length per batch uniformly from 1-40
  (``UniformCurriculum``) as here, and evaluates every length up to 500 (the example script: 100),
  batches of 128.
* word-problem trains on all lengths 2 ... k mixed and padded in its batches and tests on held-out
  words of length ``k``, batches of 32; the zoo's protocol here is the length extrapolation of the
  others.

Lengths count the tokens a model reads (the answer's query included); :mod:`.state_tracking_tasks`
says how each reference counts them, and where the zoo departs from each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from zoo.datamodules.base import check_minimums
from zoo.datamodules.recall import state_tracking_tasks as tasks
from zoo.datamodules.recall.base import Examples, RecallDataModule
from zoo.datamodules.recall.draws import split_generator
from zoo.datamodules.recall.groups import FiniteGroup, finite_group
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError

__all__ = [
    "CycleNavigationDataModule",
    "EvenPairsDataModule",
    "ModularArithmeticDataModule",
    "ParityDataModule",
    "WordProblemDataModule",
]

TRAIN_LENGTHS = (3, 40)
"""Grazzi et al.'s training lengths (the Chomsky suite's: 1-40)."""
TEST_LENGTHS = (40, 64, 128, 256)
"""The longest training length, then up to Grazzi et al.'s longest test length."""

Generate = Callable[..., Examples]
"""``generate(rng, count, seq_len)``: ``count`` examples of ``seq_len`` tokens."""


class _StateTracking(RecallDataModule):
    """Fresh training batches at lengths drawn from a range, a validation set per training length,
    a test set per test length (see the module docstring); a subclass names its task's lengths
    (``lengths``) and generator (:meth:`generator`), and sets ``vocab_size`` before this
    constructor runs.

    Args:
        train_lengths: ``(shortest, longest)`` training length, both included.
        test_lengths: A test set per length, none shorter than the longest training length.
        validation_lengths: A validation set per length (None: one per training length).
        num_validation: Examples per validation set.
        num_test: Examples per test set.
        train_batches: Fresh training batches per epoch.
        kwargs: ``batch_size``, ``generator_seed``, ``seed`` (the training stream; the validation
            and test sets depend on ``generator_seed`` alone), ``num_workers``.
    """

    lengths: tasks.LengthRule
    """The lengths the task takes."""
    task: str
    """The task as messages name it."""

    def __init__(
        self,
        train_lengths: Sequence[int] = TRAIN_LENGTHS,
        test_lengths: Sequence[int] = TEST_LENGTHS,
        validation_lengths: Sequence[int] | None = None,
        num_validation: int = 64,
        num_test: int = 512,
        train_batches: int = 1_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_minimums(num_validation=(num_validation, 1), num_test=(num_test, 1), train_batches=(train_batches, 1))
        self.training_lengths = self._training_lengths(train_lengths)
        self.test_lengths = tuple(test_lengths)
        self._check_test_lengths(max(self.training_lengths))
        self.validation_lengths = self._validation_lengths(validation_lengths)
        self.num_validation, self.num_test, self.train_batches = num_validation, num_test, train_batches
        self.block_size = max(*self.test_lengths, *self.validation_lengths)

    def _training_lengths(self, train_lengths: Sequence[int]) -> tuple[int, ...]:
        if len(train_lengths) != 2:
            raise DataError(f"train_lengths is (shortest, longest), two lengths; got {list(train_lengths)}.")
        shortest, longest = train_lengths
        if shortest > longest:
            raise DataError(
                f"train_lengths ({shortest}, {longest}) is inverted: give (shortest, longest), shortest <= longest."
            )
        lengths = tuple(length for length in range(shortest, longest + 1) if self.lengths.fits(length))
        if not lengths:
            raise DataError(
                f"train_lengths ({shortest}, {longest}) holds no length {self.task} takes: it takes {self.lengths}."
            )
        return lengths

    def _check_test_lengths(self, longest: int) -> None:
        if not self.test_lengths:
            raise DataError("test_lengths is empty: give at least one length to test at.")
        for length in self.test_lengths:
            if length < longest:
                raise DataError(
                    f"Test length {length} is shorter than the longest training length {longest}: test at {longest} "
                    "or longer (the lengths beyond training are the test)."
                )
            self.lengths.check(length, self.task)

    def _validation_lengths(self, validation_lengths: Sequence[int] | None) -> tuple[int, ...]:
        if validation_lengths is None:
            return self.training_lengths
        if not validation_lengths:
            raise DataError(
                "validation_lengths is empty: give at least one length, or leave it out to validate at the "
                "training lengths."
            )
        for length in validation_lengths:
            self.lengths.check(length, self.task)
        return tuple(validation_lengths)

    def generator(self) -> Generate:
        """``generate(rng, count, seq_len)`` for this task (picklable, for worker processes)."""
        raise NotImplementedError

    def build_split(self, split: str) -> list[Examples]:
        """Nothing for training (its batches are generated as they are read); a validation set per
        validation length; a test set per test length."""
        lengths, count = {
            "train": ((), 0),
            "validation": (self.validation_lengths, self.num_validation),
            "test": (self.test_lengths, self.num_test),
        }[split]
        generate = self.generator()
        return [
            generate(split_generator(self.generator_seed, split, index), count, length)
            for index, length in enumerate(lengths)
        ]

    def train_dataloader(self) -> DataLoader:
        """``train_batches`` fresh batches per epoch, each at a uniform training length; resumable mid-epoch."""
        return self.generated_train_dataloader(
            partial(_at_uniform_length, self.training_lengths, self.generator()), self.train_batches
        )


def _at_uniform_length(lengths: tuple[int, ...], generate: Generate, rng: np.random.Generator, count: int) -> Examples:
    """``count`` examples at one of ``lengths``, drawn uniformly from ``rng`` first."""
    return generate(rng, count, int(rng.choice(lengths)))


@register_datamodule("parity")
class ParityDataModule(_StateTracking):
    """Grazzi et al.'s parity: ``L`` symbols of ``1 ... V - 1``, answered at the last one with
    ``(sum (x - 1) mod (V - 1)) + 1`` (for ``V = 3``: 1 when the 2s are even in number, 2 when odd).

    Batches hold ``inputs``, ``targets`` (the answer at the last position, -100 elsewhere) and
    ``scored`` (the last position). ``vocab_size`` and ``block_size`` (the longest test length)
    are what a model links.

    Args:
        vocab_size: Ids, Grazzi's padding id 0 included (never drawn): 3 in the paper.
        batch_size: Examples per batch (Grazzi: 256).
        kwargs: ``train_lengths``, ``test_lengths``, ``validation_lengths``, ``num_validation``, ``num_test``,
            ``train_batches``, ``generator_seed``, ``seed``, ``num_workers``.
    """

    name = "parity"
    task = "parity"
    lengths = tasks.PARITY_LENGTHS

    def __init__(self, vocab_size: int = tasks.PARITY_VOCAB, batch_size: int = 256, **kwargs: Any) -> None:
        tasks.check_parity_vocab(vocab_size)
        self.vocab_size = vocab_size
        super().__init__(batch_size=batch_size, **kwargs)

    def generator(self) -> Generate:
        return partial(_parity_examples, self.vocab_size)


@register_datamodule("modular_arithmetic")
class ModularArithmeticDataModule(_StateTracking):
    """Grazzi et al.'s modular arithmetic, without brackets (numbers between ``+ - *``, then ``=``)
    or with them (a random bracketed expression, then ``=``); the answer, at ``=``, is the value
    modulo ``m`` (5 in the paper). See :mod:`.state_tracking_tasks` for the ids.

    Batches hold ``inputs``, ``targets`` (the answer at the last position, -100 elsewhere) and
    ``scored`` (the last position); ``vocab_size`` and ``block_size`` are what a model links.

    Args:
        brackets: The bracketed task (Grazzi's ``modular_arithmetic_with_brackets``, the Chomsky
            suite's ``modular_arithmetic_brackets``).
        vocab_size: Ids; the modulus is ``vocab_size - 5`` without brackets and ``vocab_size - 7``
            with them. None: Grazzi's, 10 and 12 (modulus 5 both).
        batch_size: Examples per batch (Grazzi: 256).
        kwargs: ``train_lengths`` (without brackets the even lengths of the range are drawn),
            ``test_lengths`` (even ones without brackets), ``num_validation``, ``num_test``,
            ``train_batches``, ``generator_seed``, ``seed``, ``num_workers``.
    """

    name = "modular_arithmetic"

    def __init__(
        self, brackets: bool = False, vocab_size: int | None = None, batch_size: int = 256, **kwargs: Any
    ) -> None:
        self.brackets = brackets
        if brackets:
            self.task, self.lengths = "modular arithmetic with brackets", tasks.BRACKETS_LENGTHS
            self.vocab_size = tasks.BRACKETS_VOCAB if vocab_size is None else vocab_size
            tasks.brackets_modulus(self.vocab_size)
        else:
            self.task, self.lengths = "modular arithmetic", tasks.ARITHMETIC_LENGTHS
            self.vocab_size = tasks.ARITHMETIC_VOCAB if vocab_size is None else vocab_size
            tasks.arithmetic_modulus(self.vocab_size)
        super().__init__(batch_size=batch_size, **kwargs)
        # The vocabulary the default resolved to, not None, as the model's linked ``vocab_size`` has
        # it: Lightning refuses a fit whose model and data hyperparameters disagree.
        self.save_hyperparameters({**self.hparams, "vocab_size": self.vocab_size})

    def generator(self) -> Generate:
        return partial(_arithmetic_examples, self.brackets, self.vocab_size)


class _ChomskyTask(_StateTracking):
    """A task of the Chomsky suite: ``L - 1`` symbols, then the query; the answer, at the query,
    has ids of its own after the query's. Batches hold ``inputs``, ``targets`` (the answer at the
    query, -100 elsewhere) and ``scored`` (the query); ``vocab_size`` and ``block_size`` are what
    a model links.

    Args:
        batch_size: Examples per batch (the suite's: 128).
        kwargs: ``train_lengths``, ``test_lengths``, ``validation_lengths``, ``num_validation``, ``num_test``,
            ``train_batches``, ``generator_seed``, ``seed``, ``num_workers``.
    """

    lengths = tasks.QUERY_LENGTHS

    def __init__(self, batch_size: int = 128, **kwargs: Any) -> None:
        super().__init__(batch_size=batch_size, **kwargs)


@register_datamodule("cycle_navigation")
class CycleNavigationDataModule(_ChomskyTask):
    """The Chomsky suite's cycle navigation (arguments as :class:`_ChomskyTask`'s): the actions
    (ids 0, 1, 2 move -1, 0, +1 on a cycle of 5 from 0), then the query (3); the answer is the
    final position (ids 4 ... 8). 9 ids."""

    name = "cycle_navigation"
    task = "cycle navigation"
    vocab_size = tasks.CYCLE_VOCAB

    def generator(self) -> Generate:
        return tasks.cycle_navigation


@register_datamodule("even_pairs")
class EvenPairsDataModule(_ChomskyTask):
    """The Chomsky suite's even pairs (arguments as :class:`_ChomskyTask`'s): bits (ids 0, 1),
    then the query (2); the answer is whether the unequal neighbours are even (3) or odd (4) in
    number. 5 ids."""

    name = "even_pairs"
    task = "even pairs"
    vocab_size = tasks.EVEN_PAIRS_VOCAB

    def generator(self) -> Generate:
        return tasks.even_pairs


@register_datamodule("word_problem")
class WordProblemDataModule(_StateTracking):
    """Group word problems (jopetty/word-problem): ``L`` uniform elements of ``group``, the prefix
    product at every position, every position trained and scored. The ids are the group's
    elements in the order of :mod:`.groups` (``vocab_size`` is the group's order).

    Args:
        group: ``Z<n>`` (``n >= 2``), ``S3``, ``S4``, ``S5``, ``A4`` or ``A5``.
        batch_size: Examples per batch (word-problem's: 32).
        kwargs: ``train_lengths``, ``test_lengths``, ``validation_lengths``, ``num_validation``, ``num_test``,
            ``train_batches``, ``generator_seed``, ``seed``, ``num_workers``.
    """

    name = "word_problem"
    task = "word problem"
    lengths = tasks.WORD_LENGTHS

    def __init__(self, group: str = "S5", batch_size: int = 32, **kwargs: Any) -> None:
        self.group = finite_group(group)
        self.vocab_size = self.group.order
        super().__init__(batch_size=batch_size, **kwargs)

    def generator(self) -> Generate:
        return partial(_word_problem_examples, self.group)


def _parity_examples(vocab_size: int, rng: np.random.Generator, count: int, seq_len: int) -> Examples:
    return tasks.parity(rng, count, seq_len, vocab_size)


def _arithmetic_examples(
    brackets: bool, vocab_size: int, rng: np.random.Generator, count: int, seq_len: int
) -> Examples:
    generate = tasks.modular_arithmetic_brackets if brackets else tasks.modular_arithmetic
    return generate(rng, count, seq_len, vocab_size)


def _word_problem_examples(group: FiniteGroup, rng: np.random.Generator, count: int, seq_len: int) -> Examples:
    return tasks.word_problem(rng, count, seq_len, group)
