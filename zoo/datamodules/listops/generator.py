"""ListOps expressions as the Long Range Arena's generator draws them, and their values.

An expression is a digit or an operation over 2 to ``max_args`` sub-expressions: ``MIN``,
``MAX``, ``MED`` (the median, truncated to an integer as ``int(np.median(...))`` does) and
``SM`` (sum modulo 10). As in the benchmark's generator, a node at depth below ``max_depth`` is an
operation with probability 0.25 and otherwise a uniform digit; nodes at ``max_depth`` are digits.
An expression's length is its token count (each operation adds its operator and ``]``), and only
expressions with ``min_length < length < max_length`` are kept, each once.

Expressions are written as the benchmark's tokens separated by spaces, ``[MAX 2 [MIN 3 4 ] 9 ]``
(the benchmark's released files also wrap every partial application in ``( )``, which its
tokenizer drops; readers here drop them too).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from zoo.datamodules.listops.tokens import CLOSE, OPERATORS

__all__ = ["Expression", "evaluate", "generate", "random_expression", "to_text"]

#: The probability that a node above the depth limit is an operation (the benchmark's 1 - VALUE_P).
OPERATION_PROBABILITY = 0.25


@dataclass(frozen=True)
class Operation:
    operator: str
    arguments: tuple[Expression, ...]


Expression = int | Operation


def random_expression(
    rng: random.Random, max_depth: int = 10, max_args: int = 10, depth: int = 1
) -> tuple[Expression, int]:
    """A random expression and its length in tokens, drawn as the benchmark's ``generate_tree``."""
    if depth < max_depth and rng.random() <= OPERATION_PROBABILITY:
        arguments, length = [], 2
        for _ in range(rng.randint(2, max_args)):
            argument, size = random_expression(rng, max_depth, max_args, depth + 1)
            arguments.append(argument)
            length += size
        return Operation(rng.choice(OPERATORS), tuple(arguments)), length
    return rng.randrange(10), 1


def evaluate(expression: Expression) -> int:
    """The value of an expression, a digit."""
    if isinstance(expression, int):
        return expression
    values = [evaluate(argument) for argument in expression.arguments]
    if expression.operator == "[MIN":
        return min(values)
    if expression.operator == "[MAX":
        return max(values)
    if expression.operator == "[MED":
        return int(statistics.median(values))
    return sum(values) % 10


def to_text(expression: Expression) -> str:
    """The expression as space-separated tokens: ``[MAX 2 [MIN 3 4 ] 9 ]``."""
    if isinstance(expression, int):
        return str(expression)
    return " ".join((expression.operator, *(to_text(argument) for argument in expression.arguments), CLOSE))


def generate(
    count: int,
    rng: random.Random,
    min_length: int,
    max_length: int,
    max_depth: int = 10,
    max_args: int = 10,
    exclude: set[str] | None = None,
) -> list[tuple[str, int]]:
    """``count`` distinct ``(text, value)`` examples with ``min_length < length < max_length``.

    ``exclude`` holds texts already drawn (for other splits); it is updated with the new ones.
    """
    seen = set() if exclude is None else exclude
    examples = []
    while len(examples) < count:
        expression, length = random_expression(rng, max_depth, max_args)
        if min_length < length < max_length:
            text = to_text(expression)
            if text not in seen:
                seen.add(text)
                examples.append((text, evaluate(expression)))
    return examples
