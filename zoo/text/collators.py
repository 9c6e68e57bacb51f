"""Collators: dataset items to padded batches. Top-level classes, not closures, so DataLoader
workers and DDP processes can pickle them."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from zoo.text.subwords import BOS_ID, EOS_ID, PAD_ID

__all__ = ["PadCollator", "TranslationCollator", "pad"]


def pad(rows: list[Tensor], value: int) -> tuple[Tensor, Tensor]:
    """Right-padded ``(B, L)`` ids and their ``(B,)`` lengths."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    return pad_sequence(rows, batch_first=True, padding_value=value), lengths


def _lists(batch: dict[str, Any], items: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    """Add the items' ``keys`` that they have (texts, not tensors) to ``batch`` as lists."""
    batch.update({key: [item[key] for item in items] for key in keys if key in items[0]})
    return batch


class PadCollator:
    """Word-id items ``{"tokens", "labels"?, "texts"?}`` to ``{"tokens", "valid_lens", "labels"?, "texts"?}``."""

    def __init__(self, padding_idx: int) -> None:
        self.padding_idx = padding_idx

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        tokens, valid_lens = pad([item["tokens"] for item in items], self.padding_idx)
        batch: dict[str, Any] = {"tokens": tokens, "valid_lens": valid_lens}
        if "labels" in items[0]:
            batch["labels"] = torch.tensor([item["labels"] for item in items], dtype=torch.long)
        return _lists(batch, items, ("texts",))


class TranslationCollator:
    """Translation items to a batch: ``src``, ``src_lens``; with targets ``tgt_in`` (``<bos>`` +
    target), ``tgt_out`` (target + ``<eos>``), ``tgt_lens``; ``sources`` and ``references`` lists."""

    def __init__(self, pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> None:
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        src, src_lens = pad([item["src"] for item in items], self.pad_id)
        batch: dict[str, Any] = {"src": src, "src_lens": src_lens}
        if "tgt" in items[0]:
            bos, eos = torch.tensor([self.bos_id]), torch.tensor([self.eos_id])
            batch["tgt_in"], batch["tgt_lens"] = pad([torch.cat([bos, item["tgt"]]) for item in items], self.pad_id)
            batch["tgt_out"], _ = pad([torch.cat([item["tgt"], eos]) for item in items], self.pad_id)
        return _lists(batch, items, ("sources", "references"))
