"""The finite groups of the word problems: their elements in a fixed order and their
multiplication tables, computed directly (nothing downloaded, no algebra package).

A group ``G`` of order ``m`` is its table ``T`` of shape ``(m, m)``: ``T[a, b]`` is the index of
``a * b``; element 0 is the identity in every group built here. The word problem over a word
``x_1 ... x_L`` asks at each position for the prefix product

    p_1 = x_1,    p_t = p_(t-1) * x_t    (t = 2 ... L),

the left fold of jopetty/word-problem's ``src/generate_data.py`` (``acc = G.op(acc, x)``, from
the identity).

* ``S_n`` (``S3``, ``S4``, ``S5``): the permutations of ``0 ... n-1`` as tuples, in the
  lexicographic order of ``itertools.permutations`` (the identity first), multiplied as
  functions composed right to left, ``(a * b)[i] = a[b[i]]``. This is the order and product of
  the ``abstract_algebra`` package that word-problem builds its groups with
  (``generate_symmetric_group``: ``Perm.__mul__`` is ``self(other(i))``), so the tables agree
  index for index (``benchmarks/state_tracking_reference.py`` compares them).
* ``A_n`` (``A4``, ``A5``): the even permutations (an even number of inversions), in the order
  they have in ``S_n``: word-problem takes ``A_n`` as the commutator subgroup of ``S_n``, whose
  elements ``abstract_algebra`` sorts by their place in ``S_n``, which gives the same order.
* ``Z_n`` (``Z2``, ``Z60``, ...): the integers modulo ``n`` under addition, ``a * b = a + b mod
  n`` (``generate_cyclic_group``); as permutations these are the rotations ``i -> i + a mod n``
  in lexicographic order, so composing them gives the same table.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from zoo.arguments import suggest
from zoo.errors import DataError

__all__ = ["NAMED_GROUPS", "FiniteGroup", "alternating_group", "cyclic_group", "finite_group", "symmetric_group"]

NAMED_GROUPS = ("A4", "A5", "S3", "S4", "S5")
"""The permutation groups the zoo defines by name; ``Z<n>`` names the cyclic group of any order ``n >= 2``."""

_CYCLIC = re.compile(r"Z([0-9]+)")


@dataclass(frozen=True, eq=False)
class FiniteGroup:
    """A finite group as its multiplication table (see the module docstring).

    Attributes:
        name: How the papers write it (``"S5"``, ``"Z60"``).
        table: ``(m, m)`` integers, ``table[a, b]`` the index of ``a * b``; element 0 is the identity.
    """

    name: str
    table: np.ndarray

    @property
    def order(self) -> int:
        """The number of elements."""
        return self.table.shape[0]

    def prefix_products(self, words: np.ndarray) -> np.ndarray:
        """``(N, L)`` element indices -> ``(N, L)``: at each position the product of the word so far,
        ``p_t = p_(t-1) * x_t`` from ``p_1 = x_1``."""
        products = np.empty_like(words)
        products[:, 0] = words[:, 0]
        for t in range(1, words.shape[1]):
            products[:, t] = self.table[products[:, t - 1], words[:, t]]
        return products


def _compose(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """``a * b``: ``b`` applied first, then ``a``."""
    return tuple(a[i] for i in b)


def _permutation_group(name: str, elements: list[tuple[int, ...]]) -> FiniteGroup:
    """The table of ``elements`` (closed under composition, the identity first) multiplied by :func:`_compose`."""
    index = {element: k for k, element in enumerate(elements)}
    table = np.array([[index[_compose(a, b)] for b in elements] for a in elements], dtype=np.int64)
    return FiniteGroup(name, table)


def _is_even(permutation: tuple[int, ...]) -> bool:
    inversions = sum(
        1 for i, j in itertools.combinations(range(len(permutation)), 2) if permutation[i] > permutation[j]
    )
    return inversions % 2 == 0


def symmetric_group(n: int) -> FiniteGroup:
    """``S_n``: every permutation of ``0 ... n-1``, in lexicographic order."""
    return _permutation_group(f"S{n}", list(itertools.permutations(range(n))))


def alternating_group(n: int) -> FiniteGroup:
    """``A_n``: the even permutations of ``0 ... n-1``, in lexicographic order."""
    return _permutation_group(f"A{n}", [p for p in itertools.permutations(range(n)) if _is_even(p)])


def cyclic_group(n: int) -> FiniteGroup:
    """``Z_n``: ``0 ... n-1`` under addition modulo ``n``."""
    elements = np.arange(n)
    return FiniteGroup(f"Z{n}", np.add.outer(elements, elements) % n)


def finite_group(name: str) -> FiniteGroup:
    """The group called ``name``: one of :data:`NAMED_GROUPS`, or ``Z<n>`` for ``n >= 2``.

    Raises:
        DataError: a name the zoo does not define, with the closest ones.
    """
    cyclic = _CYCLIC.fullmatch(name)
    if cyclic and int(cyclic.group(1)) >= 2:
        return cyclic_group(int(cyclic.group(1)))
    if name in NAMED_GROUPS:
        builder = symmetric_group if name[0] == "S" else alternating_group
        return builder(int(name[1:]))
    digits = re.sub(r"[^0-9]", "", name)
    cyclic_guess = name[:1] in "Zz" and digits and int(digits) >= 2
    close = suggest(name.upper(), [*NAMED_GROUPS, *([f"Z{digits}"] if cyclic_guess else [])])
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise DataError(
        f"Unknown group {name!r}: {hint}The zoo defines {', '.join(NAMED_GROUPS)} and Z<n> for n >= 2 (Z60, say)."
    )
