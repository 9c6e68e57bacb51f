"""The Long Range Arena's Text task: IMDB reviews read as UTF-8 bytes, padded or cut to one length.

The benchmark's released configuration uses 1,000 bytes, its paper 4,000: ``max_length`` says
which, and every result should state it (it is in each run's ``config.yaml``). Reviews are the
same as :class:`~zoo.datamodules.text_classification.IMDBDataModule`'s (hub or ``--data.path``,
the same seeded validation split), kept raw, ``<br />`` tags included, as the benchmark reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.nn.functional import pad

from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.text_classification import IMDBDataModule, PadCollator, _check_texts

__all__ = ["ByteCodec", "FixedLengthCollator", "LRATextDataModule"]

#: Byte ``b`` has id ``b + 1``; id 0 pads.
BYTE_OFFSET = 1


class ByteCodec:
    """Text to byte ids (``b + 1``), truncated to ``max_length``; ids back to printable bytes."""

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length

    def encode(self, text: str) -> Tensor:
        data = text.encode("utf-8")[: self.max_length]
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).long() + BYTE_OFFSET

    def batch(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Raw texts as one model-input batch, padded to ``max_length``."""
        _check_texts(texts, "texts")
        return FixedLengthCollator(0, self.max_length)([{"tokens": self.encode(t)} for t in texts])


class FixedLengthCollator(PadCollator):
    """Pads every batch to ``length`` tokens, as the benchmark does (``valid_lens`` stay the real lengths)."""

    def __init__(self, padding_idx: int, length: int) -> None:
        super().__init__(padding_idx)
        self.length = length

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(items)
        batch["tokens"] = pad(batch["tokens"], (0, self.length - batch["tokens"].shape[1]), value=self.padding_idx)
        return batch


@register_datamodule("lra_text")
class LRATextDataModule(IMDBDataModule):
    """IMDB as the Long Range Arena's byte-level Text task: 257 token ids (256 bytes and padding).

    Train with the ``sentiment`` model (``vocab_size``, ``padding_idx`` and ``num_classes`` are
    linked from here). No vocabulary is built, so ``max_vocab_size`` and ``min_freq`` are unused.

    Args:
        max_length: Bytes per review: longer reviews are cut, shorter ones padded. 1,000 is the
            benchmark's released configuration, 4,000 its paper's.
        Others: as :class:`~zoo.datamodules.text_classification.IMDBDataModule`.
    """

    name = "lra_text"

    def __init__(self, path: str | None = None, batch_size: int = 32, max_length: int = 1000, **kwargs: Any) -> None:
        super().__init__(path=path, batch_size=batch_size, max_length=max_length, **kwargs)
        self._byte_codec = ByteCodec(max_length)

    @property
    def vocab_size(self) -> int:
        return 256 + BYTE_OFFSET

    @property
    def codec(self) -> ByteCodec:  # type: ignore[override]
        return self._byte_codec

    def prepare_data(self) -> None:
        """Download (hub) or check (local path) the reviews; bytes need no vocabulary."""
        for split in self.source_splits:
            self._read_split(split)

    def decode_tokens(self, ids: Sequence[int]) -> list[str]:
        """Each id as its character (bytes of multi-byte characters as ``\\xNN``), padding as ``<pad>``."""
        return ["<pad>" if i == 0 else bytes([i - BYTE_OFFSET]).decode("utf-8", errors="backslashreplace") for i in ids]

    def _loader_kwargs(self) -> dict[str, Any]:
        return super()._loader_kwargs() | {"collate_fn": FixedLengthCollator(self.padding_idx, self.max_length)}
