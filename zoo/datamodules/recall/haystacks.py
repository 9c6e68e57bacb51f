"""The haystacks and the vocabulary of the needle tasks (:mod:`~zoo.datamodules.recall.needles`):
what fills the context between the needles, and how every token is numbered.

RULER (Hsieh et al., 2024, *RULER: What's the Real Context Size of Your Long-Context Language
Models?*; NVIDIA/RULER ``scripts/data/synthetic/niah.py``) hides needles in one of two haystacks:
*noise*, one short paragraph of plain sentences repeated as often as the length needs, or *essay*,
real prose (Paul Graham's essays), repeated from its start when it is too short. The zoo keeps both:

* ``noise``: a paragraph of five short sentences of the zoo's own (RULER's kind of noise, not its
  words), read word-level (lowercase words, the full stop a word of its own) and repeated from its
  first word, so that every haystack of one length is the same stream, as RULER's is;
* a text file (Tiny Shakespeare, say), read character- or word-level (words split at white
  space), each haystack a window of it from a uniformly drawn start, wrapping round to the file's
  start when it runs past the end. RULER always starts its essay at the top; a drawn start gives a
  small model many haystacks instead of one to memorise.

**The vocabulary** is built deterministically, ids in this order:

====================  =============================================================
``0``                 :data:`QUERY`, the query marker that opens each question
``1``                 :data:`SEPARATOR`, which ends each needle
``2``                 :data:`BIND`, the ``=`` of a needle (``key = value``)
``3 ...``             the haystack's units (words or characters), sorted
then ``num_key_ids``  key ids (variable tracking's variable names)
then ``num_value_ids`` value ids (variable tracking's values)
====================  =============================================================

Keys and values are one token each (RULER's are words and seven-digit numbers, several tokens of a
pretrained model's tokenizer); the model trained here learns them as ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.datamodules.base import existing_path
from zoo.errors import DataError

__all__ = ["BIND", "NOISE", "QUERY", "SEPARATOR", "TEXT_UNITS", "Haystack", "noise_haystack", "text_haystack"]

QUERY = 0
"""The id that opens each question after the haystack."""
SEPARATOR = 1
"""The id that ends each needle."""
BIND = 2
"""The id between a needle's key and its value (``=``)."""
SPECIAL_IDS = 3
"""The ids before the haystack's units."""

NOISE = "The river runs to the sea. The hills are quiet. Birds fly south in the autumn. All is well. On and on it goes."
"""The noise paragraph, repeated to fill a haystack (RULER's kind of noise, the zoo's sentences)."""

TEXT_UNITS = ("char", "word")
"""How a text haystack is split into tokens."""


@dataclass(frozen=True)
class Haystack:
    """The units a haystack is made of and the stream they are cut from.

    Attributes:
        units: The distinct units (words or characters), sorted: unit ``i`` has id ``3 + i``.
        stream: The haystack's units in reading order, as indices of ``units``.
        drawn_start: Whether each haystack starts at a uniformly drawn place of ``stream`` (a text)
            or at its first unit (the noise).
    """

    units: tuple[str, ...]
    stream: np.ndarray
    drawn_start: bool

    def fill(self, rng: np.random.Generator, rows: int, length: int) -> np.ndarray:
        """``(rows, length)`` token ids of haystack units: ``stream`` read from each row's start,
        wrapping round at its end (RULER repeats its haystack when it is too short)."""
        starts = rng.integers(0, len(self.stream), size=rows) if self.drawn_start else np.zeros(rows, dtype=np.int64)
        return SPECIAL_IDS + self.stream[(starts[:, None] + np.arange(length)) % len(self.stream)]


def _haystack(tokens: list[str], drawn_start: bool) -> Haystack:
    units = tuple(sorted(set(tokens)))
    index = {unit: i for i, unit in enumerate(units)}
    return Haystack(units, np.array([index[token] for token in tokens], dtype=np.int64), drawn_start)


def noise_haystack() -> Haystack:
    """:data:`NOISE` read word-level: lowercase words, each full stop a word of its own."""
    return _haystack(re.findall(r"[a-z]+|\.", NOISE.lower()), drawn_start=False)


def text_haystack(path: str, unit: str) -> Haystack:
    """The text file at ``path`` read ``unit``-level (``char``, or ``word``: split at white space).

    Raises:
        DataError: an unknown ``unit``, or a file with fewer than two units.
        FileNotFoundError: no file at ``path``.
    """
    if unit not in TEXT_UNITS:
        raise DataError(f"text_unit is one of {', '.join(TEXT_UNITS)}; got {unit!r}.")
    resolved = existing_path(
        path, directory=False, what="The haystack text", expected="a UTF-8 text file", otherwise="leave text_path unset"
    )
    text = Path(resolved).read_text(encoding="utf-8")
    tokens = list(text) if unit == "char" else text.split()
    if len(tokens) < 2:
        raise DataError(f"The haystack text {path!r} holds {len(tokens)} {unit}s; give a longer text.")
    return _haystack(tokens, drawn_start=True)
