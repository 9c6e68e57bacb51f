"""Selective copying and induction heads, the synthetic tasks of the Mamba paper (Gu and Dao,
2023, *Mamba: Linear-Time Sequence Modeling with Selective State Spaces*, section 4.1 and
appendix E.1), trained at one length and tested at longer ones.

The paper describes both tasks in its text; their generators come from the code it builds on:

* **selective copying** is the S4 repository's copying task with its ``variable`` option
  (``src/dataloaders/datasets/copying.py`` of state-spaces/s4), which Mamba's Figure 2 draws:
  ``M`` data ids, drawn uniformly from ``1 ... V - 2``, sit at ``M`` distinct positions drawn
  uniformly among the first ``L - M``, every other position there holding the noise id 0; then
  ``M`` marker ids ``V - 1``. The target at the ``j``-th marker is the ``j``-th data id, the only
  positions trained and scored. Mamba's setting: ``V = 16`` (noise and marker included), ``M =
  16``, length 4,096;
* **induction heads** is the H3 generator (Dao, Fu, Saab et al., 2023; ``generate_induction_head``
  in ``src/dataloaders/synthetics.py`` of HazyResearch/safari), which the paper's setting
  follows: ``L - 1`` ids drawn uniformly from ``0 ... V - 2``, one of them (at a uniform position
  that leaves at least one id after the next) replaced by the special id ``V - 1``, then the
  special id again at the end. At that last position the target is the id that followed the first
  special one, the only position scored; every other target is the next id, as H3 trains.
  Mamba's setting: ``V = 16``, trained at length 256, tested from 64 up to 2^20.

Both data modules draw fresh training batches every step, as Mamba trains (batch ``i`` of epoch
``e`` from ``(generator_seed, seed, e, i)``), validate at the training length, and test at each of
``test_lengths``: the extrapolation the Mamba paper plots.

Where the zoo departs: ``seq_len`` counts every token the model reads, where S4's ``L`` counts
the noise alone and H3's ``input_seq_len`` the ids before the final special one; H3's vocabulary
reserves a second special id that its induction task never uses, which the zoo leaves out (16
ids: 15 to draw from and the special one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from zoo.datamodules.base import check_minimums
from zoo.datamodules.recall.base import IGNORE_INDEX, Examples, RecallDataModule
from zoo.datamodules.recall.draws import distinct_integers, split_generator
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError

__all__ = [
    "InductionHeadsDataModule",
    "SelectiveCopyingDataModule",
    "check_induction_heads",
    "check_selective_copying",
    "induction_heads",
    "selective_copying",
]

TEST_LENGTHS = (256, 512, 1024, 2048, 4096)
"""Lengths tested by default: the training length and four doublings, what a CPU tests in
minutes; Mamba tests induction heads up to 2^20."""


def check_selective_copying(seq_len: int, vocab_size: int, num_tokens: int) -> None:
    """Refuse, in one line, a vocabulary without an id to copy or a sequence without room for the ids and their copies.

    Raises:
        DataError: what is wrong, and what would fit.
    """
    check_minimums(num_tokens=(num_tokens, 1))
    if vocab_size < 3:
        raise DataError(f"Selective copying needs vocab_size >= 3 (noise, marker and an id to copy), got {vocab_size}.")
    if seq_len < 2 * num_tokens:
        raise DataError(
            f"seq_len={seq_len} cannot hold {num_tokens} ids and their {num_tokens} markers; use a seq_len of at "
            f"least {2 * num_tokens} or fewer num_tokens."
        )


def selective_copying(
    rng: np.random.Generator, num_examples: int, seq_len: int = 4096, vocab_size: int = 16, num_tokens: int = 16
) -> Examples:
    """``num_examples`` selective-copying examples of ``seq_len`` tokens (module docstring).

    Raises:
        DataError: see :func:`check_selective_copying`.
    """
    check_selective_copying(seq_len, vocab_size, num_tokens)
    data = rng.integers(1, vocab_size - 1, size=(num_examples, num_tokens))
    positions = np.sort(distinct_integers(rng, num_examples, num_tokens, seq_len - num_tokens), axis=1)
    inputs = np.zeros((num_examples, seq_len), dtype=np.int64)
    np.put_along_axis(inputs, positions, data, axis=1)
    inputs[:, seq_len - num_tokens :] = vocab_size - 1
    targets = np.full((num_examples, seq_len), IGNORE_INDEX, dtype=np.int64)
    targets[:, seq_len - num_tokens :] = data
    return Examples.from_arrays(inputs, targets, targets != IGNORE_INDEX, vocab_size)


def check_induction_heads(seq_len: int, vocab_size: int) -> None:
    """Refuse, in one line, a sequence too short for the special id and its follower, or a vocabulary of fewer than two ids beside the special one.

    Raises:
        DataError: what is wrong.
    """
    if seq_len < 4:
        raise DataError(f"Induction heads needs a seq_len of at least 4, got {seq_len}.")
    if vocab_size < 3:
        raise DataError(f"Induction heads needs vocab_size >= 3 (the special id and two to draw), got {vocab_size}.")


def induction_heads(
    rng: np.random.Generator, num_examples: int, seq_len: int = 256, vocab_size: int = 16, *, scored_only: bool = False
) -> Examples:
    """``num_examples`` induction-heads examples of ``seq_len`` tokens (module docstring); with
    ``scored_only`` the only target is the recalled id (every other one ignored by the loss).

    Raises:
        DataError: see :func:`check_induction_heads`.
    """
    check_induction_heads(seq_len, vocab_size)
    special = vocab_size - 1
    body = rng.integers(0, special, size=(num_examples, seq_len - 1))
    trigger = rng.integers(0, seq_len - 3, size=num_examples)
    rows = np.arange(num_examples)
    body[rows, trigger] = special
    inputs = np.concatenate([body, np.full((num_examples, 1), special)], axis=1)
    targets = np.concatenate([inputs[:, 1:], body[rows, trigger + 1][:, None]], axis=1)
    scored = np.zeros_like(inputs, dtype=bool)
    scored[:, -1] = True
    if scored_only:
        targets = np.where(scored, targets, IGNORE_INDEX)
    return Examples.from_arrays(inputs, targets, scored, vocab_size)


class _LengthExtrapolation(RecallDataModule):
    """Fresh training batches at ``seq_len``, validation at ``seq_len``, a test set per test length;
    a subclass checks each length (:meth:`check_length`) and generates its examples.

    Args:
        seq_len: Tokens per training and validation example.
        test_lengths: Tokens per example of each test set.
        vocab_size: Token ids, the special ones included (Mamba: 16).
        num_test: Examples per validation set and per test set.
        train_batches: Fresh training batches per epoch (Mamba's "epoch": 8,192 steps).
        kwargs: ``batch_size``, ``generator_seed``, ``seed`` (``zoo compare`` varies this one: the
            training stream; the validation and test sets depend on ``generator_seed`` alone),
            ``num_workers`` (see :class:`~zoo.datamodules.recall.base.RecallDataModule`).
    """

    def __init__(
        self,
        seq_len: int = 256,
        test_lengths: Sequence[int] = TEST_LENGTHS,
        vocab_size: int = 16,
        num_test: int = 512,
        train_batches: int = 8_192,
        **kwargs: int | None,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        check_minimums(num_test=(num_test, 1), train_batches=(train_batches, 1))
        if not test_lengths:
            raise DataError("test_lengths is empty: give at least one length to test at.")
        self.seq_len, self.test_lengths = seq_len, tuple(test_lengths)
        self.num_test, self.train_batches, self.vocab_size = num_test, train_batches, vocab_size
        self.block_size = max(seq_len, *self.test_lengths)
        for length in sorted({seq_len, *self.test_lengths}):
            self.check_length(length)

    def check_length(self, seq_len: int) -> None:
        """Refuse, in one line, settings that do not fit examples of ``seq_len`` tokens."""
        raise NotImplementedError

    def examples(self, seq_len: int) -> Callable[[np.random.Generator, int], Examples]:
        """``generate(rng, count)``: examples of ``seq_len`` tokens (picklable, for worker processes)."""
        raise NotImplementedError

    def build_split(self, split: str) -> list[Examples]:
        """Nothing for training (its batches are generated as they are read); the validation set
        at ``seq_len``; a test set per test length."""
        lengths = {"train": (), "validation": (self.seq_len,), "test": self.test_lengths}[split]
        return [
            self.examples(length)(split_generator(self.generator_seed, split, index), self.num_test)
            for index, length in enumerate(lengths)
        ]

    def train_dataloader(self) -> DataLoader:
        """``train_batches`` fresh batches at ``seq_len`` per epoch; resumable mid-epoch."""
        return self.generated_train_dataloader(self.examples(self.seq_len), self.train_batches)


@register_datamodule("selective_copying")
class SelectiveCopyingDataModule(_LengthExtrapolation):
    """Mamba's selective copying (see :mod:`~zoo.datamodules.recall.mamba`): copy the
    ``num_tokens`` data ids, scattered among noise, at the markers that end the sequence.

    Batches hold ``inputs``, ``targets`` (the data ids at the markers, -100 elsewhere) and
    ``scored`` (the markers). ``vocab_size`` (noise 0, the marker ``vocab_size - 1``, data between)
    and ``block_size`` (the longest test length) are what a model links. Mamba trains and tests at
    4,096 tokens with 16 ids, 16 to copy and batches of 64; the zoo trains at 256 by default.

    Args:
        num_tokens: Data ids to copy (Mamba: 16).
        kwargs: ``seq_len``, ``test_lengths``, ``vocab_size``, ``num_test``, ``train_batches`` and
            the recall data's arguments (``batch_size``: Mamba's 64 by default), as
            :class:`InductionHeadsDataModule` takes them.
    """

    name = "selective_copying"

    def __init__(self, num_tokens: int = 16, **kwargs: Any) -> None:
        self.num_tokens = num_tokens  # before the base checks each length with it
        super().__init__(**kwargs)

    def check_length(self, seq_len: int) -> None:
        check_selective_copying(seq_len, self.vocab_size, self.num_tokens)

    def examples(self, seq_len: int) -> Callable[[np.random.Generator, int], Examples]:
        return partial(_selective_copying_examples, seq_len, self.vocab_size, self.num_tokens)


@register_datamodule("induction_heads")
class InductionHeadsDataModule(_LengthExtrapolation):
    """Mamba's induction heads (see :mod:`~zoo.datamodules.recall.mamba`): at the special id that
    ends the sequence, recall the id that followed its first occurrence.

    Batches hold ``inputs``, ``targets`` (every next id, and the recalled id at the end: H3 trains
    on all of them; with ``scored_only``, the recalled id alone) and ``scored`` (the last position
    only). ``vocab_size`` (the special id
    ``vocab_size - 1`` and the ids drawn) and ``block_size`` (the longest test length) are what a
    model links. Mamba trains at 256 tokens with 16 ids and batches of 8, and tests from 2^6 to 2^20.

    Args:
        batch_size: Examples per batch (Mamba: 8).
        scored_only: Train on the recalled id alone, as selective copying trains, instead of on
            every next id as H3 does. With one scored position in 256 the recalled id is 1/256 of
            H3's loss; no stack here left chance in 12,000 steps that way
            (``docs/results/recall.md``, induction heads).
        kwargs: ``seq_len``, ``test_lengths``, ``vocab_size``, ``num_test``, ``train_batches``,
            ``generator_seed``, ``seed``, ``num_workers``.
    """

    name = "induction_heads"

    def __init__(self, batch_size: int = 8, scored_only: bool = False, **kwargs: Any) -> None:
        self.scored_only = scored_only
        super().__init__(batch_size=batch_size, **kwargs)

    def check_length(self, seq_len: int) -> None:
        check_induction_heads(seq_len, self.vocab_size)

    def examples(self, seq_len: int) -> Callable[[np.random.Generator, int], Examples]:
        return partial(_induction_heads_examples, seq_len, self.vocab_size, self.scored_only)


def _selective_copying_examples(
    seq_len: int, vocab_size: int, num_tokens: int, rng: np.random.Generator, count: int
) -> Examples:
    return selective_copying(rng, count, seq_len, vocab_size, num_tokens)


def _induction_heads_examples(
    seq_len: int, vocab_size: int, scored_only: bool, rng: np.random.Generator, count: int
) -> Examples:
    return induction_heads(rng, count, seq_len, vocab_size, scored_only=scored_only)
