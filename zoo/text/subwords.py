"""A joint subword (BPE) tokenizer for translation, built on Hugging Face ``tokenizers``.

Why subwords rather than whole words: a word vocabulary of a manageable size maps every rare
word, name and number to ``<unk>``, which a translation model can neither read nor write back;
byte-pair encoding splits rare words into known pieces (``Zoë`` -> ``Z o ë``), so every character
seen in training survives. The vocabulary keeps case, so outputs come out properly capitalised
without a separate truecaser, and a few thousand subwords cover both languages, keeping the
output softmax small.

The text pipeline, applied the same way to training text, source and target:

1. :func:`normalize_text`: Unicode NFKC (so ``ﬁ`` and ``fi``, or a narrow no-break space and a
   space, are one thing), invisible characters removed, every run of whitespace one space.
2. Metaspace pre-tokenization (as in SentencePiece): a word's leading space becomes ``▁`` and is
   part of its first subword, so :meth:`SubwordTokenizer.decode` restores spacing exactly and
   ``decode(encode(s)) == normalize_text(s)`` for any text whose characters occur in training
   (``Qu'il a 3,50 € !`` keeps its apostrophe, comma and the space before ``!``).

Ids 0-3 are ``<pad>``, ``<unk>``, ``<bos>`` and ``<eos>``. They are reserved ids only: text never
encodes to them (the literal string ``"<eos>"`` in a sentence is spelled out in characters).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Sequence
from typing import ClassVar

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from zoo.errors import DataError

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "SUBWORD_TOKENIZER_VERSION",
    "UNK_ID",
    "SubwordTokenizer",
    "normalize_text",
    "tokenizer_from_json",
]

SUBWORD_TOKENIZER_VERSION = 1
"""Bump when :func:`normalize_text` or the training recipe changes: cached tokenizers are keyed by it."""

SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(len(SPECIAL_TOKENS))

# Characters that render as nothing: zero-width space, soft hyphen, word joiner, byte-order mark.
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u00ad\u2060\ufeff"))


def normalize_text(text: str) -> str:
    """NFKC, without invisible characters, whitespace runs (any Unicode space) collapsed, stripped.

    >>> normalize_text("  Va\u202f!\u00a0 Cours ")
    'Va ! Cours'
    """
    return " ".join(unicodedata.normalize("NFKC", text).translate(_INVISIBLE).split())


def tokenizer_from_json(text: str, what: str) -> Tokenizer:
    """A Hugging Face ``tokenizers`` tokenizer from its JSON ``text``, or a one-line
    :class:`~zoo.errors.DataError` naming ``what`` was unreadable (the library raises a bare
    ``Exception`` for unreadable JSON)."""
    try:
        return Tokenizer.from_str(text)
    except Exception as exc:
        raise DataError(f"not a readable {what} ({exc}).") from exc


class SubwordTokenizer:
    """Encodes text to subword ids and back; wraps a trained ``tokenizers.Tokenizer``.

    Build one with :meth:`train`, or rebuild one from :meth:`to_json`'s text with :meth:`from_json`.
    """

    pad_id: ClassVar[int] = PAD_ID
    unk_id: ClassVar[int] = UNK_ID
    bos_id: ClassVar[int] = BOS_ID
    eos_id: ClassVar[int] = EOS_ID

    def __init__(self, tokenizer: Tokenizer) -> None:
        found = tuple(tokenizer.id_to_token(i) for i in range(len(SPECIAL_TOKENS)))
        if found != SPECIAL_TOKENS:
            raise DataError(f"A subword tokenizer needs ids 0-3 to be {SPECIAL_TOKENS}, found {found}.")
        self._tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, *, length: int | None = None) -> SubwordTokenizer:
        """Learn a BPE vocabulary of at most ``vocab_size`` ids (specials included) from ``texts``.

        ``length`` (the number of texts, if known) only helps the trainer size its buffers.
        Every character of the training text gets an id, so a small corpus with many distinct
        characters can end up with more than ``vocab_size`` ids; few characters and little text,
        with fewer.
        """
        if vocab_size <= len(SPECIAL_TOKENS):
            raise DataError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}.")
        tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
        tokenizer.train_from_iterator((normalize_text(t) for t in texts), trainer, length=length)
        # The trainer also registers the specials as "added tokens", which would turn the string
        # "<eos>" inside a sentence into the control id. Keep them as plain reserved vocabulary ids.
        config = json.loads(tokenizer.to_str())
        config["added_tokens"] = []
        return cls(Tokenizer.from_str(json.dumps(config)))

    # -- ids ---------------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included: the rows of an embedding table."""
        return self._tokenizer.get_vocab_size()

    # -- text <-> ids --------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Subword ids of :func:`normalize_text` ``(text)``, without ``<bos>`` or ``<eos>``."""
        return self._tokenizer.encode(normalize_text(text)).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once (the library spreads them over threads)."""
        return [e.ids for e in self._tokenizer.encode_batch([normalize_text(t) for t in texts])]

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenized text of ``ids``, read up to the first ``<eos>``; special ids are skipped.

        Accepts any iterable of ints (a list, or a 1-D tensor of a model's output).
        """
        kept = []
        for index in ids:
            index = int(index)
            if index == EOS_ID:
                break
            if index >= len(SPECIAL_TOKENS):
                kept.append(index)
        return self._tokenizer.decode(kept)

    def id_to_token(self, ids: Iterable[int]) -> list[str]:
        """The subword strings of ``ids`` (for labelling attention heatmaps)."""
        return [self._tokenizer.id_to_token(int(i)) or "?" for i in ids]

    def tokens(self, text: str) -> list[str]:
        """The subword strings of ``text`` (``▁`` marks a leading space), e.g. to label attention plots."""
        return self._tokenizer.encode(normalize_text(text)).tokens

    # -- files ---------------------------------------------------------------------------------------

    def to_json(self) -> str:
        """The tokenizer as ``tokenizers`` JSON text (plain data, for files and checkpoints)."""
        return self._tokenizer.to_str()

    @classmethod
    def from_json(cls, text: str) -> SubwordTokenizer:
        """Rebuild a tokenizer from :meth:`to_json`'s text.

        Raises:
            DataError: the text is not a readable tokenizer.
        """
        return cls(tokenizer_from_json(text, "subword tokenizer"))

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={self.vocab_size})"
