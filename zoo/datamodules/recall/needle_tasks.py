"""RULER's retrieval tasks, needles in a haystack and variable tracking: their generator (the data
module that trains at one length and tests at longer ones, a test set per (length, needle depth),
is :mod:`~zoo.datamodules.recall.needles`).

RULER (Hsieh et al., 2024; NVIDIA/RULER ``scripts/data/synthetic/niah.py`` and
``variable_tracking.py``, the settings of ``scripts/synthetic.yaml``) measures how far a pretrained
model's context really reaches. Its needle-in-a-haystack tasks hide ``K`` keys in a haystack, each
bound to ``V`` values by ``V`` needles ("one of the special magic numbers for KEY is: VALUE"), then
ask for the values of ``Q`` of the keys:

========================  ===  ===  ===  =============================================
kind                      K    V    Q    what it tests
========================  ===  ===  ===  =============================================
``single``                1    1    1    find one needle
``multikey``              4    1    1    find the queried needle among distractor keys
``multivalue``            1    4    1    find every value of one key
``multiquery``            4    1    4    answer four keys at once
========================  ===  ===  ===  =============================================

Variable tracking hides ``C`` chains of ``H + 1`` assignments (``X0 = value``, ``X1 = X0``, ...,
``XH = X(H-1)``), each chain's statements in order but scattered, and asks for every variable that
holds the first chain's value (RULER: ``C = 1``, ``H = 4``). The haystacks are described in
:mod:`~zoo.datamodules.recall.haystacks`.

**Tokens and answers.** RULER prompts a pretrained model in English and matches the words it
generates; here a small model is trained on the task itself, on the word- or character-level
vocabulary of :mod:`~zoo.datamodules.recall.haystacks` (the query marker ``?``, the separator
``;``, ``=``, the haystack's units, ``num_key_ids`` keys, ``num_value_ids`` values). An example of
``L`` tokens is a haystack of ``F`` filler tokens with the needles inserted between them, then the
questions:

* a needle is four tokens ``key = value ;`` (a variable-tracking statement ``X1 = X0 ;``);
* a question is ``? key`` followed by the key's values in the order the haystack holds them,
  ``? k v1 v2 ... vV``; variable tracking's one question is ``? value X0 X1 ... XH``. The questions
  follow each other and the last token of the last one is dropped (nothing is asked of it);
* the targets are teacher-forced answers: at the queried key (or value) its first answer, at each
  answer the next one; -100 everywhere else, and ``scored`` where a target is. So an example scores
  ``Q * V`` answers (``H + 1`` for variable tracking), as RULER's string match counts each of them.

Within one example keys are distinct, and so are values (RULER draws them from spaces so large that
they rarely collide); a multikey task's distractor keys are never the queried one.

**Depth.** The needle's depth ``d`` in ``[0, 1]`` places the first needle the answer needs (the
queried key's first value; variable tracking's ``X0 = value``) after ``round(d * F)`` filler
tokens, so its relative place in the context is ``d`` up to the other needles' tokens. The
answer's other needles follow it at uniformly drawn places (RULER draws each needle's place; the
zoo fixes the earliest so that depth means how far back the answer starts), in the order of a
uniformly random interleaving of the queried keys' values (RULER's ``shuffle_sublists_heap``
interleaves chains that way); distractor needles and chains lie at uniformly drawn places anywhere.
Training draws ``d`` uniformly per example, at ``seq_len`` tokens, fresh every step;
validation holds a set per depth at ``seq_len``, the test a set per ``(length, depth)`` pair, each
batch carrying ``depth`` (in percent) so the recall task logs ``accuracy/length_<L>_depth_<D>``
(:func:`zoo.tasks.needle_heatmap.needle_heatmap` draws them).

**Where the zoo departs**: RULER inserts needles between sentences (of its essay) or lines (of its
noise) at depths drawn from 40 levels; the zoo inserts them between any two filler tokens, so a
depth is exact to one token; RULER sizes its haystack by a binary search over its tokenizer's
count, the zoo counts tokens exactly. RULER's ``needle`` haystack (made entirely of distractor
needles) is not built.

**Positions.** ``block_size``, the longest test length, is what the CLI links into the model, so a
model with learned absolute positions gets a table of that many rows (16,384 by default) and
reaches every test set. Only a table built smaller is refused: a checkpoint trained on shorter
data and tested with longer ``test_lengths``, in one line when its weights load
(:meth:`zoo.tasks.RecallModel.on_load_checkpoint`), where Lightning would raise a size mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from zoo.datamodules.base import check_minimums
from zoo.datamodules.recall.base import IGNORE_INDEX, Examples
from zoo.datamodules.recall.draws import distinct_integers
from zoo.datamodules.recall.haystacks import BIND, QUERY, SEPARATOR, SPECIAL_IDS, Haystack
from zoo.errors import DataError

__all__ = [
    "DEPTHS",
    "KINDS",
    "NEEDLE_KINDS",
    "TEST_LENGTHS",
    "NeedleCounts",
    "NeedleTask",
    "check_depth",
    "depth_percent",
    "needles",
]


@dataclass(frozen=True)
class NeedleCounts:
    """A needle task's keys ``K``, values per key ``V`` and queried keys ``Q`` (RULER's
    ``num_needle_k``, ``num_needle_v``, ``num_needle_q``)."""

    keys: int
    values: int
    queries: int


NEEDLE_KINDS: Mapping[str, NeedleCounts] = MappingProxyType(
    {
        "single": NeedleCounts(1, 1, 1),
        "multikey": NeedleCounts(4, 1, 1),
        "multivalue": NeedleCounts(1, 4, 1),
        "multiquery": NeedleCounts(4, 1, 4),
    }
)
"""RULER's needle settings (``scripts/synthetic.yaml``: ``niah_single``, ``niah_multikey``, ...)."""
VARIABLE_TRACKING = "variable_tracking"
KINDS = (*NEEDLE_KINDS, VARIABLE_TRACKING)
"""What ``kind`` may name."""
NEEDLE_TOKENS = 4
"""Tokens of one needle: ``key = value ;``."""
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Needle depths tested by default."""
TEST_LENGTHS = (1024, 2048, 4096, 8192, 16384)
"""Lengths tested by default: the training length and four doublings, up to 16k tokens."""


def depth_percent(depth: float) -> int:
    """``depth`` as the integer percent that names its set (``depth_50``)."""
    return round(100 * depth)


@dataclass(frozen=True)
class NeedleTask:
    """What every example of a needle task shares whatever its length and depth (module docstring).

    Attributes:
        kind: One of :data:`KINDS`.
        haystack: The filler's units and stream.
        num_key_ids: Key ids (variable names, for variable tracking).
        num_value_ids: Value ids.
        num_chains: Variable tracking's chains, the first one queried.
        num_hops: Variable tracking's assignments after the first, per chain.
    """

    kind: str
    haystack: Haystack
    num_key_ids: int
    num_value_ids: int
    num_chains: int = 1
    num_hops: int = 4

    @property
    def first_key(self) -> int:
        """The first key id (after the special ids and the haystack's units)."""
        return SPECIAL_IDS + len(self.haystack.units)

    @property
    def first_value(self) -> int:
        """The first value id."""
        return self.first_key + self.num_key_ids

    @property
    def vocab_size(self) -> int:
        """Every id: special, haystack, key and value."""
        return self.first_value + self.num_value_ids

    @property
    def num_needles(self) -> int:
        """Needles per example (assignments, for variable tracking)."""
        if self.kind == VARIABLE_TRACKING:
            return self.num_chains * (self.num_hops + 1)
        counts = NEEDLE_KINDS[self.kind]
        return counts.keys * counts.values

    @property
    def question_tokens(self) -> int:
        """Tokens of the questions after the haystack."""
        if self.kind == VARIABLE_TRACKING:
            return self.num_hops + 2
        counts = NEEDLE_KINDS[self.kind]
        return counts.queries * (counts.values + 2) - 1

    def filler_tokens(self, seq_len: int) -> int:
        """Haystack tokens left between the needles in an example of ``seq_len`` tokens."""
        return seq_len - NEEDLE_TOKENS * self.num_needles - self.question_tokens

    def check(self, seq_len: int) -> None:
        """Refuse, in one line, a kind not known, a vocabulary too small for the keys and values an
        example draws, or needles and questions that leave no haystack at ``seq_len`` tokens.

        Raises:
            DataError: what is wrong, and what would fit.
        """
        if self.kind not in KINDS:
            raise DataError(f"kind is one of {', '.join(KINDS)}; got {self.kind!r}.")
        check_minimums(num_chains=(self.num_chains, 1), num_hops=(self.num_hops, 1))
        if self.kind == VARIABLE_TRACKING:
            keys, values = self.num_needles, self.num_chains
            what = f"variable_tracking with num_chains={self.num_chains}, num_hops={self.num_hops}"
        else:
            counts = NEEDLE_KINDS[self.kind]
            keys, values, what = counts.keys, self.num_needles, self.kind
        for name, have, need in (
            ("num_key_ids", self.num_key_ids, keys),
            ("num_value_ids", self.num_value_ids, values),
        ):
            if have < need:
                raise DataError(f"{name}={have} is too few for {what}: each example draws {need} distinct ones.")
        if self.filler_tokens(seq_len) < 1:
            least = seq_len - self.filler_tokens(seq_len) + 1
            raise DataError(
                f"{self.kind}: the needles and questions take {least - 1} tokens, leaving no haystack in "
                f"seq_len={seq_len}; use a seq_len of at least {least}."
            )


def needles(
    rng: np.random.Generator, count: int, seq_len: int, task: NeedleTask, depth: float | None = None
) -> Examples:
    """``count`` examples of ``task`` of ``seq_len`` tokens, the answer's first needle at ``depth``
    (uniformly drawn per example when None), as the module docstring lays them out. With a depth
    the examples carry it (``fields["depth"]``, in percent).

    Raises:
        DataError: see :meth:`NeedleTask.check`; a depth outside ``[0, 1]``.
    """
    task.check(seq_len)
    if depth is not None:
        check_depth(depth)
    filler = task.filler_tokens(seq_len)
    if depth is None:
        first = rng.integers(0, filler + 1, size=count)
    else:
        first = np.full(count, round(depth * filler))
    parts = (
        _chains(rng, count, task, filler, first)
        if task.kind == VARIABLE_TRACKING
        else _keys(rng, count, task, filler, first)
    )
    inputs, targets = _assemble(task.haystack.fill(rng, count, filler), *parts)
    fields = {} if depth is None else {"depth": depth_percent(depth)}
    return Examples.from_arrays(inputs, targets, targets != IGNORE_INDEX, task.vocab_size, fields)


Parts = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Needles ``(B, n, 4)``, their places ``(B, n)``, the questions ``(B, T)`` and their targets ``(B, T)``."""


def _answer_places(rng: np.random.Generator, first: np.ndarray, count: int, filler: int) -> np.ndarray:
    """``(B, count)`` places of the answer's needles: ``first``, then uniform draws after it, sorted."""
    later = np.sort(rng.integers(first[:, None], filler + 1, size=(len(first), count - 1)), axis=1)
    return np.concatenate([first[:, None], later], axis=1)


def _needle_rows(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``(B, n, 4)`` needles ``key = value ;`` of ``(B, n)`` keys and values."""
    return np.stack([keys, np.full_like(keys, BIND), values, np.full_like(keys, SEPARATOR)], axis=-1)


def _keys(rng: np.random.Generator, rows: int, task: NeedleTask, filler: int, first: np.ndarray) -> Parts:
    """The needle kinds: the queried keys' needles (the answer's, in haystack order) first, then
    the distractor keys'; the questions in the order the keys were drawn."""
    counts = NEEDLE_KINDS[task.kind]
    answers = counts.queries * counts.values
    keys = task.first_key + distinct_integers(rng, rows, counts.keys, task.num_key_ids)  # the first Q are queried
    values = task.first_value + distinct_integers(rng, rows, task.num_needles, task.num_value_ids)
    owner = np.repeat(np.arange(counts.queries), counts.values)  # which queried key each answer needle binds
    owner = rng.permuted(np.broadcast_to(owner, (rows, answers)), axis=1)  # a random interleaving, in haystack order
    needle_keys = np.concatenate(
        [np.take_along_axis(keys, owner, axis=1), np.repeat(keys[:, counts.queries :], counts.values, axis=1)], axis=1
    )
    places = np.concatenate(
        [
            _answer_places(rng, first, answers, filler),
            rng.integers(0, filler + 1, size=(rows, task.num_needles - answers)),
        ],
        axis=1,
    )
    questions, targets = [], []
    for query in range(counts.queries):
        answer = values[:, :answers][owner == query].reshape(rows, counts.values)  # haystack order
        questions.append(np.concatenate([np.full((rows, 1), QUERY), keys[:, query : query + 1], answer], axis=1))
        targets.append(
            np.concatenate([np.full((rows, 1), IGNORE_INDEX), answer, np.full((rows, 1), IGNORE_INDEX)], axis=1)
        )
    question, target = np.concatenate(questions, axis=1)[:, :-1], np.concatenate(targets, axis=1)[:, :-1]
    return _needle_rows(needle_keys, values), places, question, target


def _chains(rng: np.random.Generator, rows: int, task: NeedleTask, filler: int, first: np.ndarray) -> Parts:
    """Variable tracking: chain ``c``'s statements ``X(c,0) = value_c``, ``X(c,j) = X(c,j-1)`` in
    order, the first chain's from ``first`` on, the others anywhere; the question asks for the
    first chain's variables."""
    chains, links = task.num_chains, task.num_hops + 1
    names = task.first_key + distinct_integers(rng, rows, chains * links, task.num_key_ids).reshape(rows, chains, links)
    values = task.first_value + distinct_integers(rng, rows, chains, task.num_value_ids)
    assigned = np.concatenate([values[:, :, None], names[:, :, :-1]], axis=2)
    others = np.sort(rng.integers(0, filler + 1, size=(rows, chains - 1, links)), axis=2).reshape(rows, -1)
    places = np.concatenate([_answer_places(rng, first, links, filler), others], axis=1)
    needle_rows = _needle_rows(names.reshape(rows, -1), assigned.reshape(rows, -1))
    question = np.concatenate([np.full((rows, 1), QUERY), values[:, :1], names[:, 0, :-1]], axis=1)
    target = np.concatenate([np.full((rows, 1), IGNORE_INDEX), names[:, 0]], axis=1)
    return needle_rows, places, question, target


def _assemble(
    filler: np.ndarray, needle_rows: np.ndarray, places: np.ndarray, question: np.ndarray, target: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets: each needle inserted before the filler token its place names (needles of
    one place in the order given: a stable sort), then the questions."""
    rows, count = places.shape
    order = np.argsort(places, axis=1, kind="stable")
    places = np.take_along_axis(places, order, axis=1)
    needle_rows = np.take_along_axis(needle_rows, order[:, :, None], axis=1)
    starts = places + NEEDLE_TOKENS * np.arange(count)
    positions = (starts[:, :, None] + np.arange(NEEDLE_TOKENS)).reshape(rows, -1)
    haystack = np.zeros((rows, filler.shape[1] + positions.shape[1]), dtype=np.int64)
    is_needle = np.zeros(haystack.shape, dtype=bool)
    np.put_along_axis(haystack, positions, needle_rows.reshape(rows, -1), axis=1)
    np.put_along_axis(is_needle, positions, True, axis=1)
    haystack[~is_needle] = filler.ravel()
    inputs = np.concatenate([haystack, question], axis=1)
    targets = np.concatenate([np.full(haystack.shape, IGNORE_INDEX), target], axis=1)
    return inputs, targets


def check_depth(depth: float) -> None:
    """Refuse, in one line, a depth outside ``[0, 1]``."""
    if not 0 <= depth <= 1:
        raise DataError(f"A needle depth is a fraction of the context in [0, 1]; got {depth}.")
