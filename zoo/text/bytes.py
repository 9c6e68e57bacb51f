"""Text as UTF-8 bytes, the Long Range Arena's byte-level reading: no vocabulary, 257 ids.

Byte ``b`` has id ``b + 1`` and id 0 pads; every batch is padded to ``max_length``, as the
benchmark's inputs are.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from torch import Tensor
from torch.nn.functional import pad

from zoo.text.codecs import ClassificationCodec
from zoo.text.collators import PadCollator

__all__ = ["BYTE_OFFSET", "ByteCodec", "FixedLengthCollator", "PAD_ID", "VOCAB_SIZE"]

PAD_ID = 0
BYTE_OFFSET = 1
"""Byte ``b`` has id ``b + BYTE_OFFSET``."""
VOCAB_SIZE = 256 + BYTE_OFFSET


class FixedLengthCollator(PadCollator):
    """Pads every batch to ``length`` tokens, as the benchmark does (``valid_lens`` stay the real lengths)."""

    def __init__(self, padding_idx: int, length: int) -> None:
        super().__init__(padding_idx)
        self.length = length

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(items)
        batch["tokens"] = pad(batch["tokens"], (0, self.length - batch["tokens"].shape[1]), value=self.padding_idx)
        return batch


class ByteCodec(ClassificationCodec):
    """Text to byte ids, cut to ``max_length``; ids back to characters; label ids to class names."""

    codec_kind = "bytes"
    label = "The byte codec"
    saved_fields = MappingProxyType({"max_length": int, "class_names": list})

    def __init__(self, max_length: int, class_names: Sequence[str]) -> None:
        self.max_length = max_length
        self.class_names = list(class_names)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of the first ``max_length`` bytes of each text."""
        return [[byte + BYTE_OFFSET for byte in text.encode("utf-8")[: self.max_length]] for text in texts]

    def collator(self) -> FixedLengthCollator:
        """Batches are padded to ``max_length``, as the benchmark's inputs are."""
        return FixedLengthCollator(PAD_ID, self.max_length)

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """Each id as its character (bytes of multi-byte characters as ``\\xNN``), padding as ``<pad>``."""
        return [
            "<pad>" if i == PAD_ID else bytes([i - BYTE_OFFSET]).decode("utf-8", errors="backslashreplace") for i in ids
        ]

    def token_table(self) -> list[str]:
        """Every id's token: ``<pad>``, then the 256 bytes as :meth:`id_to_token` shows them."""
        return self.id_to_token(range(VOCAB_SIZE))

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """The text of ``ids``, padding skipped (a character cut by ``max_length`` becomes U+FFFD)."""
        data = bytes(int(i) - BYTE_OFFSET for i in ids if int(i) != PAD_ID)
        return data.decode("utf-8", errors="replace")
