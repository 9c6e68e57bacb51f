"""Multi-query associative recall (MQAR), as Zoology defines it (Arora, Eyuboglu et al., 2023,
*Zoology: Measuring and Improving Recall in Efficient Language Models*; the generator is
``zoology/data/multiquery_ar.py``).

An example of ``L`` tokens over a vocabulary of ``V`` ids holds ``P`` key-value pairs, then a
query of each key:

* the ids split in two: keys are ``1 ... V/2 - 1`` (0 marks the empty slots of the query region),
  values ``V/2 ... V - 1``; each example draws ``P`` distinct keys and ``P`` distinct values,
  uniformly, and pairs them in order;
* the context, ``C = 2 P n`` tokens, is the pairs ``k_1 v_1 k_2 v_2 ...`` repeated ``n =
  num_passes`` times (JRT's repeated prompts; 1 in the Zoology paper);
* the rest, ``L - C`` tokens, is ``S = (L - C) / 2`` slots of two tokens. Key ``k_i`` is queried
  once, at the first token of slot ``g_i``: position ``C + 2 g_i``. The slots ``g_1, g_2, ...``
  are drawn without replacement, in that order, with

      p(g) = (g + 1)^(a - 1) / sum_{h=1}^{S} h^(a - 1),   g = 0 ... S - 1,

  a power law with Zoology's ``a = 0.01`` (``power_a``): queries crowd the start of the region,
  as repeated bigrams do in text, and the first pairs tend to be queried first;
* the target at a query's position is its key's value; every other target is -100 (ignored), so
  the loss and the accuracy count the ``P`` queries only. Zoology's accuracy is the fraction of
  an example's queries answered, averaged over examples;
* the other tokens of the query region are ids drawn uniformly from ``0 ... V - 1``
  (``random_non_queries``, Zoology's default), or 0.

Zoology asserts that ``L`` is even, that ``V > L`` and that ``2 P n + 2 P <= L``; the generator
refuses the same inputs, each in one line.

Where the zoo departs from Zoology's code, and why: the draws come from a seeded NumPy
``Generator`` instead of the global ``np.random`` state and ``torch.randint``, and are made for
all examples at once (:func:`~zoo.datamodules.recall.draws.distinct_integers` for keys and values,
the Gumbel top-k trick for the slots): the same distributions, a different stream, 8 to 15
times faster. Training batches are shuffled across a mixture's sets each epoch, where Zoology's
loader serves each set's batches in turn; validation is a second draw of the test sets, where
Zoology validates on its test set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zoo.datamodules.base import check_minimums
from zoo.datamodules.recall.base import IGNORE_INDEX, Examples, RecallDataModule
from zoo.datamodules.recall.draws import distinct_integers, split_generator, weighted_draws_without_replacement
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError

__all__ = [
    "MIXTURES",
    "PAPER_GRID",
    "MQARDataModule",
    "MQARSet",
    "check_mqar",
    "gap_probabilities",
    "multiquery_ar",
]


@dataclass(frozen=True)
class MQARSet:
    """Examples of one shape: ``num_examples`` of ``seq_len`` tokens holding ``num_kv_pairs`` pairs."""

    seq_len: int
    num_kv_pairs: int
    num_examples: int


PAPER_GRID = ((64, 4), (128, 8), (256, 16), (512, 64))
"""The Zoology paper's ``(seq_len, num_kv_pairs)`` cells (Figure 2), each trained on 100,000
examples and tested on 3,000 of its own shape, vocabulary 8,192."""

MIXTURES: dict[str, tuple[tuple[MQARSet, ...], tuple[MQARSet, ...]]] = {
    "zoology": (
        (
            MQARSet(64, 4, 100_000),
            MQARSet(128, 8, 20_000),
            MQARSet(256, 16, 20_000),
            MQARSet(256, 32, 20_000),
            MQARSet(256, 64, 20_000),
        ),
        (
            MQARSet(64, 4, 1_000),
            MQARSet(64, 8, 1_000),
            MQARSet(64, 16, 1_000),
            MQARSet(128, 32, 1_000),
            MQARSet(256, 64, 1_000),
            MQARSet(512, 128, 1_000),
            MQARSet(1024, 256, 1_000),
        ),
    ),
}
"""Training and test sets of Zoology's newer configs
(``zoology/experiments/mqar_example_configs/original_mqar_configs.py``): training on lengths 64
to 256, testing on more pairs and on lengths up to 1,024."""


def check_mqar(seq_len: int, num_kv_pairs: int, vocab_size: int, num_passes: int = 1, power_a: float = 0.01) -> None:
    """Refuse, in one line, a shape Zoology's generator asserts against, or a power law that is none.

    Raises:
        DataError: an odd ``seq_len``, pairs and queries longer than ``seq_len``, a vocabulary
            no larger than ``seq_len``, or ``power_a <= 0``.
    """
    check_minimums(seq_len=(seq_len, 2), num_kv_pairs=(num_kv_pairs, 1), num_passes=(num_passes, 1))
    if power_a <= 0:
        raise DataError(f"power_a must be positive (Zoology uses 0.01), got {power_a}.")
    if seq_len % 2:
        raise DataError(
            f"MQAR needs an even seq_len (its query region is slots of two tokens), got {seq_len}: use {seq_len + 1}."
        )
    needed = 2 * num_kv_pairs * num_passes + 2 * num_kv_pairs
    if needed > seq_len:
        fits = seq_len // (2 * num_passes + 2)
        raise DataError(
            f"{num_kv_pairs} key-value pairs do not fit {seq_len} tokens: {num_passes} pass(es) of the pairs and a "
            f"query of each take {needed}; use at most {fits} pairs or a seq_len of at least {needed}."
        )
    if vocab_size <= seq_len:
        raise DataError(
            f"MQAR needs a vocab_size above seq_len, as Zoology asserts; got vocab_size={vocab_size} for "
            f"seq_len={seq_len}: raise vocab_size (Zoology uses 8192)."
        )


def gap_probabilities(seq_len: int, num_kv_pairs: int, power_a: float = 0.01, num_passes: int = 1) -> np.ndarray:
    """``p(g)`` of the module docstring: the probability that the first key is queried in slot
    ``g`` of the query region (each later key draws from the slots left, in proportion)."""
    slots = (seq_len - 2 * num_kv_pairs * num_passes) // 2
    weights = np.arange(1, slots + 1, dtype=np.float64) ** (power_a - 1)
    return weights / weights.sum()


def multiquery_ar(
    rng: np.random.Generator,
    num_examples: int,
    seq_len: int,
    num_kv_pairs: int,
    vocab_size: int = 8_192,
    power_a: float = 0.01,
    num_passes: int = 1,
    random_non_queries: bool = True,
) -> Examples:
    """``num_examples`` MQAR examples drawn from ``rng`` (the module docstring): ``targets`` are the
    values at the queries and -100 elsewhere, ``scored`` marks the queries, and each batch carries
    ``num_kv_pairs``.

    Raises:
        DataError: a shape Zoology refuses (:func:`check_mqar`).
    """
    check_mqar(seq_len, num_kv_pairs, vocab_size, num_passes, power_a)
    half = vocab_size // 2
    keys = 1 + distinct_integers(rng, num_examples, num_kv_pairs, half - 1)
    values = half + distinct_integers(rng, num_examples, num_kv_pairs, vocab_size - half)
    pairs = np.stack([keys, values], axis=2).reshape(num_examples, 2 * num_kv_pairs)
    context = 2 * num_kv_pairs * num_passes
    slots = weighted_draws_without_replacement(
        rng, num_examples, num_kv_pairs, gap_probabilities(seq_len, num_kv_pairs, power_a, num_passes)
    )
    queries = context + 2 * slots

    inputs = np.zeros((num_examples, seq_len), dtype=np.int64)
    inputs[:, :context] = np.tile(pairs, num_passes)
    np.put_along_axis(inputs, queries, keys, axis=1)
    targets = np.full((num_examples, seq_len), IGNORE_INDEX, dtype=np.int64)
    np.put_along_axis(targets, queries, values, axis=1)
    if random_non_queries:
        empty = inputs == 0
        inputs[empty] = rng.integers(0, vocab_size, size=int(empty.sum()))
    return Examples.from_arrays(
        inputs, targets, targets != IGNORE_INDEX, vocab_size, fields={"num_kv_pairs": num_kv_pairs}
    )


@register_datamodule("mqar")
class MQARDataModule(RecallDataModule):
    """Multi-query associative recall as Zoology generates it (see :mod:`~zoo.datamodules.recall.mqar`),
    nothing downloaded.

    One cell of the Zoology paper's grid by default: train on ``num_train`` examples of
    ``(seq_len, num_kv_pairs)`` and test on ``num_test`` of the same shape
    (:data:`PAPER_GRID` lists the paper's cells); or a ``mixture`` of shapes, Zoology's newer
    protocol. Validation is a second draw of the test sets. Batches hold ``inputs``, ``targets``
    (the values at the queries, -100 elsewhere), ``scored`` (the queries) and ``num_kv_pairs``
    (``LongTensor (B,)``), each batch of one set. ``vocab_size`` and ``block_size`` (the longest
    set) are what a model links.

    Args:
        vocab_size: Token ids; half are keys, half values (Zoology: 8192).
        seq_len: Tokens per example (default 256; not with ``mixture``).
        num_kv_pairs: Key-value pairs per example (default 16; not with ``mixture``).
        num_train: Training examples (default 100,000, the paper's; not with ``mixture``).
        num_test: Validation and test examples each (default 3,000, the paper's; not with ``mixture``).
        mixture: ``zoology``: the training and test sets of Zoology's newer configs
            (:data:`MIXTURES`) instead of one cell.
        power_a: The power law's exponent ``a`` (Zoology: 0.01).
        num_passes: Times the pairs are repeated before the queries (1 in the paper).
        random_non_queries: Fill the query region's other tokens with random ids (Zoology's
            default) rather than 0 (its Figure 2 configs used 0).
        batch_size: Examples per batch (Zoology: 512 at lengths 64 and 128, 256 at 256, 128 at 512).
        generator_seed: Seed of the data: the same seed gives the same examples.
        seed: Seed of the order of training batches, not of the data.
        num_workers: DataLoader worker processes; ``None``: none on a CPU, a few on a GPU.
    """

    name = "mqar"
    CELL_DEFAULTS = {"seq_len": 256, "num_kv_pairs": 16, "num_train": 100_000, "num_test": 3_000}

    def __init__(
        self,
        vocab_size: int = 8_192,
        seq_len: int | None = None,
        num_kv_pairs: int | None = None,
        num_train: int | None = None,
        num_test: int | None = None,
        mixture: str | None = None,
        power_a: float = 0.01,
        num_passes: int = 1,
        random_non_queries: bool = True,
        batch_size: int = 64,
        generator_seed: int = 0,
        seed: int = 0,
        num_workers: int | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, generator_seed=generator_seed, seed=seed, num_workers=num_workers)
        cell = {"seq_len": seq_len, "num_kv_pairs": num_kv_pairs, "num_train": num_train, "num_test": num_test}
        if mixture is None:
            cell = {key: self.CELL_DEFAULTS[key] if value is None else value for key, value in cell.items()}
            check_minimums(num_train=(cell["num_train"], 1), num_test=(cell["num_test"], 1))
            self.train_sets: tuple[MQARSet, ...] = (MQARSet(cell["seq_len"], cell["num_kv_pairs"], cell["num_train"]),)
            self.test_sets: tuple[MQARSet, ...] = (MQARSet(cell["seq_len"], cell["num_kv_pairs"], cell["num_test"]),)
        elif mixture not in MIXTURES:
            raise DataError(f"Unknown MQAR mixture {mixture!r}; known: {', '.join(sorted(MIXTURES))}.")
        elif given := [key for key, value in cell.items() if value is not None]:
            raise DataError(
                f"mixture={mixture!r} sets every shape and size; drop {', '.join(given)}, or drop mixture for one cell."
            )
        else:
            self.train_sets, self.test_sets = MIXTURES[mixture]
        for shape in sorted({(s.seq_len, s.num_kv_pairs) for s in self.train_sets + self.test_sets}):
            check_mqar(*shape, vocab_size, num_passes, power_a)
        self.vocab_size = vocab_size
        self.block_size = max(s.seq_len for s in self.train_sets + self.test_sets)
        self.generation: dict[str, Any] = {
            "vocab_size": vocab_size, "power_a": power_a, "num_passes": num_passes,
            "random_non_queries": random_non_queries,
        }  # fmt: skip

    def build_split(self, split: str) -> list[Examples]:
        sets = self.train_sets if split == "train" else self.test_sets
        return [
            multiquery_ar(
                split_generator(self.generator_seed, split, index),
                shape.num_examples,
                shape.seq_len,
                shape.num_kv_pairs,
                **self.generation,
            )  # fmt: skip
            for index, shape in enumerate(sets)
        ]
