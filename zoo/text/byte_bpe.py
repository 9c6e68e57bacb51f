"""A byte-level BPE tokenizer for language modelling (GPT-2's scheme), built on Hugging Face ``tokenizers``.

Text is read as UTF-8 bytes, each byte shown as one printable character (GPT-2's byte-to-unicode
table), split by GPT-2's pre-tokenization pattern (words with their leading space, numbers,
punctuation runs, whitespace), and merged by the learned BPE merges. Every byte is in the initial
alphabet, so any text encodes, nothing is unknown and ``decode(encode(s)) == s`` for every
string; there are no special ids (a language model's windows are plain text). Decoding ids that
end inside a multi-byte character gives U+FFFD for the incomplete character.

Long texts are cut into pieces before the library sees them, where a line that ends in a visible
character is followed by another that starts with one (:func:`pieces`). GPT-2's pattern always
ends a pre-token there and starts a new one (a newline joins no word), so training and encoding
piece by piece gives exactly the merges and ids of the whole text, while the library spreads the
pieces over its threads and never holds one huge encoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from zoo.errors import DataError
from zoo.text.subwords import tokenizer_from_json

__all__ = ["ByteLevelBPE", "pieces"]

_BOUNDARY = re.compile(r"(?<=\S\n)(?=\S)")
_ENCODE_GROUP = 4096
"""Pieces encoded per call of the library: bounds the memory its encodings hold at once."""


def pieces(text: str) -> list[str]:
    """``text`` cut after each newline that follows a visible character and precedes one; the
    pieces concatenate back to ``text`` and pre-tokenize as it does (see the module docstring)."""
    return _BOUNDARY.split(text)


def _byte_of_symbol() -> dict[str, int]:
    """GPT-2's table read backwards: the printable symbol of each byte -> the byte. Printable
    Latin-1 bytes stand for themselves; the others are shifted to code points from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    symbols = {byte: chr(byte) for byte in printable} | {byte: chr(256 + n) for n, byte in enumerate(others)}
    return {symbol: byte for byte, symbol in symbols.items()}


_BYTE_OF_SYMBOL = _byte_of_symbol()


class ByteLevelBPE:
    """Text to byte-level BPE ids and back; wraps a trained ``tokenizers.Tokenizer``.

    Build one with :meth:`train`, or rebuild one from :meth:`to_json`'s text with :meth:`from_json`.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        if not isinstance(tokenizer.model, models.BPE) or not isinstance(
            tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel
        ):
            raise DataError("not a byte-level BPE tokenizer (a BPE model after a ByteLevel pre-tokenizer).")
        self._tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> ByteLevelBPE:
        """Learn merges from ``texts`` up to ``vocab_size`` ids, the 256 bytes included (fewer when
        the texts run out of pairs to merge).

        Raises:
            DataError: ``vocab_size`` below 256.
        """
        if vocab_size < 256:
            raise DataError(f"A byte-level BPE needs at least 256 ids (one per byte), got vocab_size={vocab_size}.")
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        tokenizer.train_from_iterator(_pieces_of(texts), trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        """Number of ids: the rows of an embedding table."""
        return self._tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: the same as encoding it whole, computed piece by piece."""
        parts, ids = pieces(text), []
        for start in range(0, len(parts), _ENCODE_GROUP):
            for encoding in self._tokenizer.encode_batch(parts[start : start + _ENCODE_GROUP]):
                ids += encoding.ids
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (a character cut by the ids' ends becomes U+FFFD)."""
        return self._tokenizer.decode([int(i) for i in ids])

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """The text each id stands for, bytes of incomplete characters as ``\\xNN`` (heatmap labels)."""
        tokens = []
        for index in ids:
            symbols = self._tokenizer.id_to_token(int(index)) or ""
            tokens.append(bytes(_BYTE_OF_SYMBOL[s] for s in symbols).decode("utf-8", errors="backslashreplace"))
        return tokens

    def to_json(self) -> str:
        """The tokenizer as ``tokenizers`` JSON text (plain data, for files and checkpoints)."""
        return self._tokenizer.to_str()

    @classmethod
    def from_json(cls, text: str) -> ByteLevelBPE:
        """Rebuild a tokenizer from :meth:`to_json`'s text.

        Raises:
            DataError: the text is not a byte-level BPE tokenizer.
        """
        return cls(tokenizer_from_json(text, "tokenizer"))

    def __repr__(self) -> str:
        return f"ByteLevelBPE(vocab_size={self.vocab_size})"


def _pieces_of(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        yield from pieces(text)
