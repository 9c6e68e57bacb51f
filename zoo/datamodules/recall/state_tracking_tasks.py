"""The state-tracking tasks' generators: parity, modular arithmetic with and without brackets,
cycle navigation, even pairs and group word problems, each as its reference code builds its
inputs, labels and vocabulary. :mod:`.state_tracking` serves them as data modules.

Every generator returns :class:`~zoo.datamodules.recall.base.Examples` of ``seq_len`` tokens,
``seq_len`` counting every token the model reads. Where the reference labels the final answer
alone, the target at the last position is the answer (its token id), every other target -100,
and the last position alone is scored; the word problems label every position.

**Parity** and **modular arithmetic**, Grazzi et al. (2025), *Unlocking State-Tracking in Linear
RNNs Through Negative Eigenvalues*, generated as their code does (adankow/unlocking_state_tracking,
``xlstm/experiments/data/formal_language/tasks/``); their model reads a sequence up to its last
input token and is scored on the next one, the answer (the dataset's ``shift=1`` with
``enable_mask``), which is the target at the zoo's last position:

* parity over ``V`` ids (Grazzi's ``vocab_size``, 3 in the paper): symbols ``x_t`` uniform over
  ``1 ... V - 1`` (0 is their padding, never drawn), answer ``(sum_t (x_t - 1) mod (V - 1)) + 1``;
  for ``V = 3`` the parity of the number of 2s, answered as 1 (even) or 2 (odd);
* modular arithmetic without brackets, ``V`` ids (10 in the paper) and modulus ``m = V - 5``:
  ``k`` numbers (ids ``5 ... V - 1`` for ``0 ... m - 1``, uniform) between which ``k - 1``
  operators (``+`` 1, ``-`` 2, ``*`` 3, uniform), then ``=`` (4); the answer is the expression's
  value modulo ``m``, ``*`` binding before ``+`` and ``-``, as the id ``value + 5``. ``seq_len =
  2k`` is even. The Chomsky suite's task (google-deepmind/neural_networks_chomsky_hierarchy,
  ``tasks/regular/modular_arithmetic.py``) is the same expression over its own ids;
* modular arithmetic with brackets, ``V`` ids (12 in the paper) and ``m = V - 7``: numbers are ids
  ``0 ... m - 1``, then ``+ - * ( ) =`` and an unused padding id. An expression of ``n`` tokens is
  built top-down as both references do (``generate_one_expression_and_result``): below 5 tokens
  ``d``, ``-d``, ``(d)`` or ``(-d)`` for a uniform ``d``; otherwise ``(left op right)`` with the
  left part's length uniform over ``1 ... n - 4`` and ``op`` uniform over ``+ - *`` (Grazzi's
  ``mult=True``, the Chomsky suite's setting). The model reads the expression and ``=``
  (``seq_len = n + 1``) and answers its value modulo ``m``. The random draws follow Grazzi's
  order (length split, left part, right part, operator; a terminal per leaf), so the same NumPy
  generator gives their very expression (:func:`bracket_expression`).

**Cycle navigation** and **even pairs**, Delétang et al. (2023), *Neural Networks and the Chomsky
Hierarchy* (``tasks/regular/``): the model reads the ``n`` symbols and then one query token (the
suite's "empty output" token that the model answers at, ``make_model_with_empty_targets``), so
``seq_len = n + 1``; the answer classes, which the suite predicts with their own output layer, are
ids after the query's here (the recall model ties its output layer to its embeddings):

* cycle navigation: actions ``a_t`` uniform over ids 0, 1, 2, moving ``a_t - 1`` on a cycle of 5
  from 0; query id 3; answer ``4 + (sum_t (a_t - 1) mod 5)``; 9 ids;
* even pairs: bits ``b_t`` uniform over ids 0, 1; query id 2; the answer is whether the number of
  unequal neighbours ``#{t: b_t != b_(t+1)}`` is even (id 3) or odd (id 4), which is whether
  ``b_1 == b_n``; 5 ids.

**Group word problems** (jopetty/word-problem, ``src/generate_data.py``; the task of Merrill,
Petty and Sabharwal, 2024, *The Illusion of State in State-Space Models*): ``seq_len`` elements of a finite group
(:mod:`.groups`), uniform and independent, read as their indices; the target at every position
is the prefix product ``p_t = p_(t-1) * x_t``, all positions scored; the vocabulary is the group.

Where the zoo departs, and why:

* Lengths count the tokens read, as in every recall data module, so that a set's name is its
  tensors' length: Grazzi's sequence length also counts the answer's slot (their 3-40 is 2-39
  here), the Chomsky suite's counts the symbols without the query (its 1-40 is 2-41 here).
* Padding ids are kept in Grazzi's vocabularies (so ids match theirs) but never appear: a batch
  holds one length.
* Grazzi's bracket generator lifts lengths below 5 to 5 (``max(length, 5)``); the zoo takes each
  length as given (2, the shortest, reads ``d =``).
* Grazzi's unbracketed labels are computed in NumPy's fixed-width integers, which wrap on a long
  enough product; the zoo reduces modulo ``m`` at each step, which is exact.
* word-problem prepends ``[BOS]`` to inputs and labels and trains on the trivial ``[BOS] ->
  [BOS]`` position; the zoo leaves it out, so a length counts group elements and the accuracy
  counts products alone. It also draws each length's words without replacement (distinct
  words); the zoo draws them independently, which differs only where ``|G|^L`` is small.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo.datamodules.recall.base import IGNORE_INDEX, Examples
from zoo.datamodules.recall.groups import FiniteGroup
from zoo.errors import DataError

__all__ = [
    "ARITHMETIC_LENGTHS",
    "ARITHMETIC_VOCAB",
    "BRACKETS_LENGTHS",
    "BRACKETS_VOCAB",
    "CYCLE_LENGTH",
    "CYCLE_VOCAB",
    "EVEN_PAIRS_VOCAB",
    "PARITY_LENGTHS",
    "PARITY_VOCAB",
    "QUERY_LENGTHS",
    "WORD_LENGTHS",
    "LengthRule",
    "arithmetic_modulus",
    "bracket_expression",
    "brackets_modulus",
    "check_parity_vocab",
    "cycle_navigation",
    "cycle_navigation_answers",
    "even_pairs",
    "even_pairs_answers",
    "modular_arithmetic",
    "modular_arithmetic_answers",
    "modular_arithmetic_brackets",
    "parity",
    "parity_answers",
    "word_problem",
]


@dataclass(frozen=True)
class LengthRule:
    """The lengths a task takes: at least ``shortest`` tokens, and even ones only if ``even``."""

    shortest: int
    even: bool = False

    def fits(self, length: int) -> bool:
        return length >= self.shortest and (length % 2 == 0 or not self.even)

    def __str__(self) -> str:
        return f"{'even lengths' if self.even else 'lengths'} of at least {self.shortest}"

    def check(self, length: int, task: str) -> None:
        """Refuse, in one line, a length ``task`` cannot take."""
        if not self.fits(length):
            raise DataError(f"{task} takes {self} (tokens read, the answer's query included), got {length}.")


PARITY_LENGTHS = LengthRule(1)
ARITHMETIC_LENGTHS = LengthRule(2, even=True)
"""An odd expression of numbers between operators, then ``=``."""
BRACKETS_LENGTHS = LengthRule(2)
QUERY_LENGTHS = LengthRule(2)
"""The Chomsky suite's tasks: a symbol at least, then the query."""
WORD_LENGTHS = LengthRule(1)

PARITY_VOCAB = 3
"""Grazzi's parity vocabulary: padding 0 and the symbols 1 and 2."""
ARITHMETIC_VOCAB = 10
"""Grazzi's vocabulary without brackets: padding, ``+ - * =`` and the numbers 0 ... 4 (modulus 5)."""
BRACKETS_VOCAB = 12
"""Grazzi's vocabulary with brackets: the numbers 0 ... 4 (modulus 5), ``+ - * ( ) =`` and padding."""

_PLUS, _MINUS, _TIMES, _EQUALS, _NUMBERS = 1, 2, 3, 4, 5
"""Grazzi's ids without brackets (0 is padding)."""
_ARITHMETIC_RESERVED = _NUMBERS
_BRACKETS_RESERVED = 7
"""Ids after the numbers with brackets: ``+ - * ( ) =`` and padding, in that order."""

CYCLE_LENGTH = 5
"""The Chomsky suite's cycle (``_cycle_length``)."""
_CYCLE_ACTIONS = 3
CYCLE_VOCAB = _CYCLE_ACTIONS + 1 + CYCLE_LENGTH
"""Actions 0 ... 2, the query 3, the positions 4 ... 8."""
_BITS = 2
EVEN_PAIRS_VOCAB = _BITS + 1 + 2
"""Bits 0 and 1, the query 2, even 3 and odd 4."""


def _answer_at_end(inputs: np.ndarray, answers: np.ndarray, vocab_size: int) -> Examples:
    """Examples whose last position alone is trained and scored, on ``answers``."""
    targets = np.full(inputs.shape, IGNORE_INDEX, dtype=np.int64)
    targets[:, -1] = answers
    return Examples.from_arrays(inputs, targets, targets != IGNORE_INDEX, vocab_size)


def check_parity_vocab(vocab_size: int) -> None:
    """Refuse, in one line, a parity vocabulary without two symbols."""
    if vocab_size < 3:
        raise DataError(f"parity needs vocab_size >= 3 (the padding id 0 and two symbols), got {vocab_size}.")


def parity_answers(symbols: np.ndarray, vocab_size: int = PARITY_VOCAB) -> np.ndarray:
    """``(N, n)`` symbols ``1 ... V - 1`` -> ``(N,)`` answer ids ``(sum (x - 1) mod (V - 1)) + 1``."""
    return (symbols - 1).sum(axis=1) % (vocab_size - 1) + 1


def parity(rng: np.random.Generator, num_examples: int, seq_len: int = 40, vocab_size: int = PARITY_VOCAB) -> Examples:
    """Grazzi's parity (module docstring): ``seq_len`` symbols, the answer at the last one."""
    PARITY_LENGTHS.check(seq_len, "parity")
    check_parity_vocab(vocab_size)
    symbols = rng.integers(1, vocab_size, size=(num_examples, seq_len))
    return _answer_at_end(symbols, parity_answers(symbols, vocab_size), vocab_size)


def _modulus(vocab_size: int, reserved: int, task: str) -> int:
    if vocab_size - reserved < 2:
        raise DataError(
            f"{task} needs vocab_size >= {reserved + 2} ({reserved} operator and special ids and a modulus of at "
            f"least 2), got {vocab_size}."
        )
    return vocab_size - reserved


def arithmetic_modulus(vocab_size: int) -> int:
    """The modulus of Grazzi's unbracketed vocabulary, ``V - 5``; too small a vocabulary refused in one line."""
    return _modulus(vocab_size, _ARITHMETIC_RESERVED, "modular arithmetic")


def brackets_modulus(vocab_size: int) -> int:
    """The modulus of Grazzi's bracketed vocabulary, ``V - 7``; too small a vocabulary refused in one line."""
    return _modulus(vocab_size, _BRACKETS_RESERVED, "modular arithmetic with brackets")


def modular_arithmetic_answers(expressions: np.ndarray, vocab_size: int = ARITHMETIC_VOCAB) -> np.ndarray:
    """``(N, 2k - 1)`` expressions in Grazzi's ids (numbers at even places, operators at odd ones)
    -> ``(N,)`` answer ids: the value modulo ``m``, ``*`` first, plus 5.

    A left-to-right pass keeps the sum of the finished terms, the sign of the open term and the
    open term's product, all modulo ``m``."""
    modulus = arithmetic_modulus(vocab_size)
    numbers, operators = expressions[:, ::2] - _NUMBERS, expressions[:, 1::2]
    total = np.zeros(len(expressions), dtype=np.int64)
    sign = np.ones_like(total)
    term = numbers[:, 0].astype(np.int64)
    for t in range(operators.shape[1]):
        times = operators[:, t] == _TIMES
        total = np.where(times, total, (total + sign * term) % modulus)
        sign = np.where(times, sign, np.where(operators[:, t] == _MINUS, -1, 1))
        term = np.where(times, term * numbers[:, t + 1] % modulus, numbers[:, t + 1])
    return (total + sign * term) % modulus + _NUMBERS


def modular_arithmetic(
    rng: np.random.Generator, num_examples: int, seq_len: int = 40, vocab_size: int = ARITHMETIC_VOCAB
) -> Examples:
    """Grazzi's modular arithmetic without brackets (module docstring): ``seq_len / 2`` numbers
    between uniform operators, then ``=``, the answer there."""
    ARITHMETIC_LENGTHS.check(seq_len, "modular arithmetic")
    modulus = arithmetic_modulus(vocab_size)
    expressions = np.empty((num_examples, seq_len - 1), dtype=np.int64)
    expressions[:, ::2] = rng.integers(0, modulus, size=(num_examples, seq_len // 2)) + _NUMBERS
    expressions[:, 1::2] = rng.integers(_PLUS, _TIMES + 1, size=(num_examples, seq_len // 2 - 1))
    inputs = np.concatenate([expressions, np.full((num_examples, 1), _EQUALS)], axis=1)
    return _answer_at_end(inputs, modular_arithmetic_answers(expressions, vocab_size), vocab_size)


def bracket_expression(rng: np.random.Generator, length: int, modulus: int) -> tuple[list[int], int]:
    """One bracketed expression of ``length`` tokens in Grazzi's ids and its value modulo ``modulus``,
    drawn top-down as the module docstring says, with Grazzi's draws in Grazzi's order."""
    plus, minus, opening, closing = modulus, modulus + 1, modulus + 3, modulus + 4
    tokens: list[int] = []

    def build(n: int) -> int:  # appends n tokens, returns their value; recursion depth at most n / 4
        if n < 5:  # d, -d, (d), (-d)
            digit = int(rng.integers(modulus))
            body = [minus, digit] if n % 2 == 0 else [digit]
            tokens.extend([opening, *body, closing] if n > 2 else body)
            return -digit % modulus if n % 2 == 0 else digit
        left = int(rng.integers(1, n - 3))
        tokens.append(opening)
        a = build(left)
        slot = len(tokens)
        tokens.append(plus)  # the operator, drawn after the right part as Grazzi draws it
        b = build(n - left - 3)
        tokens.append(closing)
        op = int(rng.integers(0, 3))
        tokens[slot] = plus + op
        return (a + b, a - b, a * b)[op] % modulus

    return tokens, build(length)


def modular_arithmetic_brackets(
    rng: np.random.Generator, num_examples: int, seq_len: int = 40, vocab_size: int = BRACKETS_VOCAB
) -> Examples:
    """Grazzi's modular arithmetic with brackets (module docstring): an expression of
    ``seq_len - 1`` tokens, then ``=``, the answer there."""
    BRACKETS_LENGTHS.check(seq_len, "modular arithmetic with brackets")
    modulus = brackets_modulus(vocab_size)
    inputs = np.full((num_examples, seq_len), modulus + 5)  # "=" ends every row
    answers = np.empty(num_examples, dtype=np.int64)
    for row in range(num_examples):
        tokens, answers[row] = bracket_expression(rng, seq_len - 1, modulus)
        inputs[row, :-1] = tokens
    return _answer_at_end(inputs, answers, vocab_size)


def cycle_navigation_answers(actions: np.ndarray) -> np.ndarray:
    """``(N, n)`` actions 0, 1, 2 -> ``(N,)`` answer ids ``4 + (sum (a - 1) mod 5)``."""
    return (actions - 1).sum(axis=1) % CYCLE_LENGTH + _CYCLE_ACTIONS + 1


def cycle_navigation(rng: np.random.Generator, num_examples: int, seq_len: int = 41) -> Examples:
    """The Chomsky suite's cycle navigation (module docstring): ``seq_len - 1`` actions, then the query."""
    QUERY_LENGTHS.check(seq_len, "cycle navigation")
    actions = rng.integers(0, _CYCLE_ACTIONS, size=(num_examples, seq_len - 1))
    inputs = np.concatenate([actions, np.full((num_examples, 1), _CYCLE_ACTIONS)], axis=1)
    return _answer_at_end(inputs, cycle_navigation_answers(actions), CYCLE_VOCAB)


def even_pairs_answers(bits: np.ndarray) -> np.ndarray:
    """``(N, n)`` bits -> ``(N,)`` answer ids: 3 if the unequal neighbours are even in number, else 4."""
    return (bits[:, 1:] != bits[:, :-1]).sum(axis=1) % 2 + _BITS + 1


def even_pairs(rng: np.random.Generator, num_examples: int, seq_len: int = 41) -> Examples:
    """The Chomsky suite's even pairs (module docstring): ``seq_len - 1`` bits, then the query."""
    QUERY_LENGTHS.check(seq_len, "even pairs")
    bits = rng.integers(0, _BITS, size=(num_examples, seq_len - 1))
    inputs = np.concatenate([bits, np.full((num_examples, 1), _BITS)], axis=1)
    return _answer_at_end(inputs, even_pairs_answers(bits), EVEN_PAIRS_VOCAB)


def word_problem(rng: np.random.Generator, num_examples: int, seq_len: int, group: FiniteGroup) -> Examples:
    """``seq_len`` uniform elements of ``group``, the prefix product at every position (module docstring)."""
    WORD_LENGTHS.check(seq_len, "word problem")
    words = rng.integers(0, group.order, size=(num_examples, seq_len))
    products = group.prefix_products(words)
    return Examples.from_arrays(words, products, np.ones(words.shape, dtype=bool), group.order)
