"""RULER's needles and variable tracking as a data module (``needle``): fresh training batches at
one length, a validation set per needle depth, a test set per (test length, depth). The layout,
the vocabulary and where the zoo departs from RULER are in :mod:`~zoo.datamodules.recall.needle_tasks`
(the generator) and :mod:`~zoo.datamodules.recall.haystacks` (the haystacks).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from torch.utils.data import DataLoader

from zoo.datamodules.base import check_minimums
from zoo.datamodules.recall.base import Examples, RecallDataModule
from zoo.datamodules.recall.draws import split_generator
from zoo.datamodules.recall.haystacks import noise_haystack, text_haystack
from zoo.datamodules.recall.needle_tasks import (
    DEPTHS,
    TEST_LENGTHS,
    NeedleTask,
    check_depth,
    depth_percent,
    needles,
)
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError

__all__ = ["NeedleDataModule"]


@register_datamodule("needle")
class NeedleDataModule(RecallDataModule):
    """RULER's needles and variable tracking (see :mod:`~zoo.datamodules.recall.needles`): fresh
    training batches at ``seq_len`` with uniformly drawn depths, a validation set per depth at
    ``seq_len``, a test set per ``(test length, depth)``.

    Batches hold ``inputs``, ``targets`` (the answers, -100 elsewhere), ``scored`` (the answers'
    positions) and, in validation and test, ``depth`` (percent). ``vocab_size`` and ``block_size``
    (the longest test length) are what a model links.

    Args:
        kind: One of :data:`KINDS` (RULER's ``niah_single``, ``niah_multikey``, ``niah_multivalue``,
            ``niah_multiquery`` and ``vt``).
        seq_len: Tokens per training and validation example.
        test_lengths: Tokens per example of each test set; none shorter than ``seq_len``.
        depths: Needle depths in ``[0, 1]`` of the validation and test sets.
        num_key_ids: Key ids (variable names).
        num_value_ids: Value ids.
        num_chains: Variable tracking's chains (RULER: 1).
        num_hops: Variable tracking's assignments after the first per chain (RULER: 4).
        text_path: A text file whose windows are the haystack; None: the noise paragraph.
        text_unit: ``char`` or ``word``: how ``text_path`` is read.
        num_test: Examples per validation and test set.
        train_batches: Fresh training batches per epoch.
        batch_size: Examples per batch.
        eval_batch_tokens: Tokens per validation and test batch at the most (one example at
            least); None: a training batch's, ``batch_size * seq_len``, so that the test at 16k
            holds a layer's memory near what training at ``seq_len`` took (sixteen 16k-token
            examples at once are more than 24 GiB for a layer that scores every pair).
        kwargs: ``generator_seed``, ``seed``, ``num_workers``
            (:class:`~zoo.datamodules.recall.base.RecallDataModule`).
    """

    name = "needle"

    def __init__(
        self,
        kind: str = "single",
        seq_len: int = 1024,
        test_lengths: Sequence[int] = TEST_LENGTHS,
        depths: Sequence[float] = DEPTHS,
        num_key_ids: int = 64,
        num_value_ids: int = 64,
        num_chains: int = 1,
        num_hops: int = 4,
        text_path: str | None = None,
        text_unit: str = "char",
        num_test: int = 64,
        train_batches: int = 1_000,
        batch_size: int = 16,
        eval_batch_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        check_minimums(
            num_test=(num_test, 1), train_batches=(train_batches, 1), eval_batch_tokens=(eval_batch_tokens, 1)
        )
        self.eval_batch_tokens = max(1, batch_size * seq_len) if eval_batch_tokens is None else eval_batch_tokens
        haystack = noise_haystack() if text_path is None else text_haystack(text_path, text_unit)
        self.task = NeedleTask(kind, haystack, num_key_ids, num_value_ids, num_chains, num_hops)
        self.task.check(seq_len)
        self.seq_len, self.test_lengths, self.depths = seq_len, tuple(test_lengths), tuple(depths)
        _check_lengths_and_depths(seq_len, self.test_lengths, self.depths)
        self.num_test, self.train_batches = num_test, train_batches
        self.vocab_size, self.block_size = self.task.vocab_size, max(self.test_lengths)

    def build_split(self, split: str) -> list[Examples]:
        """Nothing for training (its batches are generated as they are read); a validation set per
        depth at ``seq_len``; a test set per ``(test length, depth)``."""
        lengths = {"train": (), "validation": (self.seq_len,), "test": self.test_lengths}[split]
        return [
            needles(split_generator(self.generator_seed, split, i, j), self.num_test, length, self.task, depth)
            for i, length in enumerate(lengths)
            for j, depth in enumerate(self.depths)
        ]

    def train_dataloader(self) -> DataLoader:
        """``train_batches`` fresh batches at ``seq_len`` per epoch, depths drawn; resumable mid-epoch."""
        return self.generated_train_dataloader(
            partial(needles, seq_len=self.seq_len, task=self.task), self.train_batches
        )


def _check_lengths_and_depths(seq_len: int, test_lengths: tuple[int, ...], depths: tuple[float, ...]) -> None:
    """Refuse, in one line, no test length or depth, a test length below ``seq_len``, a depth
    outside ``[0, 1]`` or two depths of one percent (one set name)."""
    if not test_lengths or not depths:
        raise DataError("test_lengths and depths each need at least one value: a test set per (length, depth).")
    if min(test_lengths) < seq_len:
        raise DataError(
            f"test length {min(test_lengths)} is shorter than seq_len={seq_len}; test at seq_len or longer."
        )
    for depth in depths:
        check_depth(depth)
    percents = [depth_percent(depth) for depth in depths]
    if len(set(percents)) < len(percents):
        raise DataError(f"depths {list(depths)} name one set twice at whole percents; give distinct percents.")
