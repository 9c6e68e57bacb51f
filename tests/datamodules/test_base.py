"""The loaders every data module takes from the base: for the same seed, the same batches, whether a
split is rows (ListOps, bucketed by length) or a token stream (text, in windows). The literals were
drawn by the loaders before the text module used the base's; each test also recomputes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from zoo.datamodules import ListOpsDataModule
from zoo.datamodules.text import TextDataModule

BLOCK, BATCH, SEED = 8, 4, 5


def _distinct_characters(tmp_path: Path, count: int) -> TextDataModule:
    """A text module over ``count`` distinct characters in code-point order: id ``i`` is position ``i``."""
    corpus = tmp_path / "positions.txt"
    corpus.write_text("".join(chr(0x4E00 + i) for i in range(count)), encoding="utf-8")
    return TextDataModule(
        path=str(corpus), block_size=BLOCK, batch_size=BATCH, train_windows=3 * BATCH, seed=SEED,
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip


def test_text_batches_are_windows_at_the_seeds_offsets(tmp_path: Path) -> None:
    module = _distinct_characters(tmp_path, 600)  # 540 training and 60 validation ids
    module.setup("fit")
    loader = module.train_dataloader()
    loader.sampler.set_epoch(0)  # as Lightning does
    batches = [batch["tokens"] for batch in loader]
    drawn = np.random.default_rng([SEED, 0]).integers(540 - BLOCK, size=3 * BATCH)  # nanoGPT's offsets
    assert drawn[:BATCH].tolist() == [356, 428, 12, 429]
    assert len(batches) == 3 and all(
        torch.equal(batch, torch.tensor([list(range(o, o + BLOCK + 1)) for o in offsets]))
        for batch, offsets in zip(batches, drawn.reshape(3, BATCH))
    )
    validation = [batch["tokens"] for batch in module.val_dataloader()]
    assert [tuple(t.shape) for t in validation] == [(4, 9), (3, 9), (1, 4)]  # 7 windows, then 3 targets alone
    starts = range(540, 600 - 1, BLOCK)
    assert torch.equal(torch.cat([t[:, 0] for t in validation]), torch.tensor(list(starts)))
    assert all(
        torch.equal(row, torch.arange(int(row[0]), min(int(row[0]) + BLOCK + 1, 600))) for t in validation for row in t
    )


def test_text_prompts_are_one_a_batch(tmp_path: Path) -> None:
    module = _distinct_characters(tmp_path, 600)
    module.predict_texts = ["\u4e00\u4e01", "\u4e02"]
    batches = list(module.predict_dataloader())
    assert [(b["tokens"].tolist(), b["text"]) for b in batches] == [([[0, 1]], ["\u4e00\u4e01"]), ([[2]], ["\u4e02"])]


def test_row_batches_are_buckets_of_similar_length(tmp_path: Path) -> None:
    module = ListOpsDataModule(
        path=str(tmp_path / "listops"), num_train=40, num_val=10, num_test=10, min_length=10, max_length=80,
        batch_size=8, seed=3,
    )  # fmt: skip
    module.prepare_data()
    module.setup("fit")
    train = list(module.train_dataloader())
    assert [b["valid_lens"].tolist() for b in train[:2]] == [
        [20, 22, 22, 23, 25, 27, 33, 35],
        [13, 13, 13, 13, 13, 14, 14, 14],
    ]
    assert train[0]["labels"].tolist() == [2, 9, 2, 8, 3, 9, 2, 9]
    lengths = module._dataset("train", "fit").tokens.lengths
    assert sorted(int(n) for b in train for n in b["valid_lens"]) == sorted(lengths.tolist())  # every row once
    validation = [b["valid_lens"].tolist() for b in module.val_dataloader()]
    assert validation == [[13, 15, 17, 20, 21, 21, 21, 24], [25, 62]]
    assert sum(validation, []) == sorted(module._dataset("validation", "validate").tokens.lengths.tolist())
    module.predict_texts = ["[MAX 2 9 ]", "[MIN 1 [MAX 3 4 ] ]", "[SM 1 2 ]"]
    assert [tuple(b["tokens"].shape) for b in module.predict_dataloader()] == [(3, 7)]  # batch_size to a batch
