"""Codecs of language models: text to the token ids a model reads and writes, and ids back to text.

Three ways to read text, each a :class:`LanguageCodec` that every checkpoint carries (so generating
needs the checkpoint alone) and whose :attr:`~LanguageCodec.unit` says what one id is, for a
bits-per-unit metric:

* :class:`CharCodec` (kind ``chars``, unit ``char``): nanoGPT's ``shakespeare_char`` protocol. The
  vocabulary is the sorted distinct characters of the corpus and a character's id is its rank;
  saved as that string. A character outside it cannot be encoded (:meth:`~CharCodec.unknown`
  names them).
* :class:`ByteLevelCodec` (kind ``byte_level``, unit ``byte``): the UTF-8 bytes, a byte's id its
  value, 256 ids, as enwik8 models read text. Nothing is unknown; decoding replaces a character
  cut by the ids' ends with U+FFFD.
* :class:`BPECodec` (kind ``bpe``, unit ``token``): a byte-level BPE
  (:class:`~zoo.text.byte_bpe.ByteLevelBPE`) trained on the training text; saved as its
  ``tokenizers`` JSON. Nothing is unknown.

No id is reserved for padding or for the start or end of a text: a language model reads windows
of plain text. Raw prompts therefore batch only when they have the same number of tokens
(:meth:`LanguageCodec.batch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from zoo.errors import DataError
from zoo.text.byte_bpe import ByteLevelBPE
from zoo.text.codecs import Codec, check_texts

__all__ = ["LANGUAGE_CODECS", "BPECodec", "ByteLevelCodec", "CharCodec", "LanguageCodec", "id_dtype"]


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest integer type that holds ids below ``vocab_size`` (a corpus's ids are stored in it)."""
    return np.dtype(np.uint8 if vocab_size <= 256 else np.int16 if vocab_size <= 2**15 else np.int32)


class LanguageCodec(Codec):
    """Text to token ids and back, for a language model: the API its task and ``generate`` use."""

    #: what one id is: ``"char"``, ``"byte"`` or ``"token"`` (the unit of bits per unit)
    unit: ClassVar[str]

    @property
    def vocab_size(self) -> int:
        """Number of ids: the rows of the model's embedding table and its output logits."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``.

        Raises:
            DataError: the text holds what this codec cannot encode (:meth:`unknown`).
        """
        raise NotImplementedError

    def encode_array(self, text: str) -> np.ndarray:
        """The ids of a whole corpus as a NumPy array of :func:`id_dtype` (compact, for windows)."""
        return np.asarray(self.encode(text), dtype=id_dtype(self.vocab_size))

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (a list, or a 1-D tensor of a model's output)."""
        raise NotImplementedError

    def unknown(self, text: str) -> list[str]:
        """The distinct characters of ``text`` that cannot be encoded, in order of appearance."""
        return []

    def batch(self, inputs: Sequence[str]) -> dict[str, Tensor]:
        """Prompts as one batch, ``{"tokens": LongTensor (B, L)}``; no padding, so all must have ``L`` tokens.

        Raises:
            DataError: no prompts, an empty prompt, one that cannot be encoded, or prompts of
                different token lengths.
        """
        check_texts(inputs, "prompts", action="continue")
        rows = [self.encode(text) for text in inputs]
        lengths = sorted({len(row) for row in rows})
        if len(lengths) > 1:
            raise DataError(
                f"Prompts batched together must have the same number of {self.unit}s (these have {lengths}): "
                "give them one at a time."
            )
        return {"tokens": torch.tensor(rows, dtype=torch.long)}


def _code_points(text: str) -> np.ndarray:
    """The code point of each character of ``text``."""
    return np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype="<u4")


class CharCodec(LanguageCodec):
    """One id per character: the rank of the character among ``chars``, the sorted distinct
    characters of the corpus (nanoGPT's ``shakespeare_char``)."""

    codec_kind = "chars"
    label = "The character codec"
    unit = "char"
    saved_fields = MappingProxyType({"chars": str})

    def __init__(self, chars: str) -> None:
        if not chars or list(chars) != sorted(set(chars)):
            raise DataError(f"{self.label} needs distinct characters in sorted order, got {chars[:40]!r}.")
        self.chars = chars
        self._ids = {char: index for index, char in enumerate(chars)}
        self._points = _code_points(chars)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CharCodec:
        """The codec of every distinct character of ``texts``: ``sorted(set(all of them))``."""
        points: set[int] = set()
        for text in texts:
            points.update(np.unique(_code_points(text)).tolist())
        if not points:
            raise DataError("There is no text to take characters from.")
        return cls("".join(map(chr, sorted(points))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def unknown(self, text: str) -> list[str]:
        return list(dict.fromkeys(char for char in text if char not in self._ids))

    def encode(self, text: str) -> list[int]:
        self._refuse_unknown(text)
        return [self._ids[char] for char in text]

    def encode_array(self, text: str) -> np.ndarray:
        points = _code_points(text)
        ids = np.searchsorted(self._points, points)
        if not np.array_equal(self._points[np.minimum(ids, len(self._points) - 1)], points):
            self._refuse_unknown(text)
        return ids.astype(id_dtype(self.vocab_size))

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        return [self.chars[int(i)] for i in ids]

    def _refuse_unknown(self, text: str) -> None:
        unknown = self.unknown(text)
        if unknown:
            shown = ", ".join(map(repr, unknown[:20])) + (", ..." if len(unknown) > 20 else "")
            raise DataError(
                f"The text holds characters that are not among the {self.vocab_size} this model knows: {shown}; "
                "remove or replace them."
            )


class ByteLevelCodec(LanguageCodec):
    """One id per UTF-8 byte, the byte's value: 256 ids, nothing unknown (enwik8's reading)."""

    codec_kind = "byte_level"
    label = "The byte-level codec"
    unit = "byte"
    saved_fields = MappingProxyType({})

    @property
    def vocab_size(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_array(self, text: str | bytes) -> np.ndarray:
        """The corpus's bytes as ids; raw ``bytes`` are taken as they are (they need not be UTF-8)."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        return np.frombuffer(data, dtype=np.uint8).copy()

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """Each byte as its character; bytes of multi-byte characters as ``\\xNN``."""
        return [bytes([int(i)]).decode("utf-8", errors="backslashreplace") for i in ids]


class BPECodec(LanguageCodec):
    """Byte-level BPE tokens (:class:`~zoo.text.byte_bpe.ByteLevelBPE`): nothing unknown."""

    codec_kind = "bpe"
    label = "The byte-level BPE codec"
    unit = "token"
    saved_fields = MappingProxyType({"tokenizer": ByteLevelBPE})

    def __init__(self, tokenizer: ByteLevelBPE) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BPECodec:
        """A codec whose BPE learned ``vocab_size`` ids (the 256 bytes included) from ``texts``."""
        return cls(ByteLevelBPE.train(texts, vocab_size))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(ids)

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        return self.tokenizer.id_to_token(ids)


LANGUAGE_CODECS: tuple[type[LanguageCodec], ...] = (CharCodec, ByteLevelCodec, BPECodec)
"""The language codecs, for :func:`~zoo.text.codecs.restore_codec` (a checkpoint names its kind)."""
