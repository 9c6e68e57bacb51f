"""Word-level tokenization and vocabularies for the text-classification data modules.

The sentiment models embed whole words, so the tokenizer is a single regular expression in the
style of the Stanford Sentiment Treebank: lowercase words, punctuation as separate tokens, and
clitics split off (``"don't"`` becomes ``"do", "n't"``, ``"it's"`` becomes ``"it", "'s"``).
SST-2 text is already tokenized that way, so tokenizing it again changes almost nothing, and raw
IMDB reviews end up with tokens that look like SST's.

:class:`Vocabulary` maps tokens to ids. Id 0 is padding and id 1 stands for every unknown word;
the rest are ordered by descending frequency, then alphabetically, so building twice from the
same text gives the same ids.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from zoo.datamodules.files import atomic_write_text
from zoo.errors import DataError

__all__ = [
    "PAD_ID",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "TOKENIZER_VERSION",
    "UNK_ID",
    "UNK_TOKEN",
    "Vocabulary",
    "tokenize",
]

TOKENIZER_VERSION = 1
"""Bump when :func:`tokenize` changes its output: cached vocabularies are keyed by it."""

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN)
PAD_ID = SPECIAL_TOKENS.index(PAD_TOKEN)
UNK_ID = SPECIAL_TOKENS.index(UNK_TOKEN)

_VOCAB_FORMAT = "attention-zoo vocabulary"
_VOCAB_FORMAT_VERSION = 1

_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
# SST-2's validation and test sentences keep the Penn Treebank escapes ("-lrb-" for "(",
# "\/" for "/") while its training sentences do not: undo them so both share one vocabulary.
_PTB_ESCAPE = re.compile(r"-([lr][rsc]b)-|\\([/*])")
_PTB_BRACKETS = {"lrb": "(", "rrb": ")", "lsb": "[", "rsb": "]", "lcb": "{", "rcb": "}"}
# Split the negation off its verb first ("don't" -> "do n't"). A plain substitution is much
# faster than a look-ahead inside the token pattern, which backtracks through every word.
_NEGATION = re.compile(r"n't\b")
_TOKEN = re.compile(
    r"""
      n't\b                     # negation clitic, already split off above
    | '(?:s|re|ve|ll|d|m)\b     # the other English clitics: 's 're 've 'll 'd 'm
    | \d+(?:[.,]\d+)+           # numbers with a decimal point or thousands separator: 7.5, 1,000
    | \w+(?:-\w+)*              # words, hyphenated compounds kept whole: well-made, sci-fi
    | \.{2,} | -{2,} | `+ | '{2,}  # ellipses, dashes and TeX-style quotes as SST writes them
    | [^\w\s]                   # any other punctuation mark, one per token
    """,
    re.VERBOSE,
)


def tokenize(text: str) -> list[str]:
    """Split ``text`` into lowercase word and punctuation tokens, SST style.

    HTML line breaks (``<br />``, frequent in IMDB reviews) become spaces, typographic
    apostrophes become ASCII ones (``"don’t"`` and ``"don't"`` give the same tokens), and Penn
    Treebank escapes become the characters they stand for (``-lrb-`` is ``(``).

    >>> tokenize("I don't like it.<br /><br />It's GREAT!")
    ['i', 'do', "n't", 'like', 'it', '.', 'it', "'s", 'great', '!']
    """
    text = _HTML_BREAK.sub(" ", text.lower().replace("\u2019", "'"))
    text = _PTB_ESCAPE.sub(_unescape, text)
    return _TOKEN.findall(_NEGATION.sub(" n't", text))


def _unescape(match: re.Match[str]) -> str:
    bracket, escaped = match.groups()
    return f" {_PTB_BRACKETS[bracket]} " if bracket else escaped


class Vocabulary:
    """A bijection between tokens and integer ids, with padding and unknown-word ids.

    Args:
        tokens: The ordinary tokens in id order; ids start at ``len(SPECIAL_TOKENS)`` because
            ``<pad>`` is 0 and ``<unk>`` is 1. Use :meth:`build` to count them from text.
    """

    def __init__(self, tokens: Iterable[str]) -> None:
        self._itos = [*SPECIAL_TOKENS, *tokens]
        self._stoi = {token: index for index, token in enumerate(self._itos)}
        if len(self._stoi) != len(self._itos):
            duplicates = sorted(t for t, n in Counter(self._itos).items() if n > 1)
            raise DataError(
                f"Vocabulary tokens must be unique (and must not repeat the specials "
                f"{SPECIAL_TOKENS}); duplicated: {duplicates[:10]}."
            )

    @classmethod
    def build(
        cls,
        tokenized_texts: Iterable[Sequence[str]],
        *,
        max_size: int | None = None,
        min_freq: int = 1,
    ) -> Vocabulary:
        """Count tokens and keep the frequent ones.

        Args:
            tokenized_texts: One token list per text.
            max_size: The largest vocabulary size, the two specials included (so an embedding
                table sized ``len(vocab)`` never exceeds it). ``None`` keeps every token.
            min_freq: Tokens seen fewer times than this map to ``<unk>``.
        """
        if max_size is not None and max_size <= len(SPECIAL_TOKENS):
            raise DataError(
                f"max_size={max_size} leaves no room for words next to the specials "
                f"{SPECIAL_TOKENS}; use a value above {len(SPECIAL_TOKENS)}."
            )
        if min_freq < 1:
            raise DataError(f"min_freq must be at least 1, got {min_freq}.")
        counts: Counter[str] = Counter()
        for tokens in tokenized_texts:
            counts.update(tokens)
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max_size - len(SPECIAL_TOKENS)]
        return cls(ranked)

    @property
    def pad_id(self) -> int:
        """The id of ``<pad>``, which fills sequences up to the longest in a batch."""
        return PAD_ID

    @property
    def unk_id(self) -> int:
        """The id every out-of-vocabulary token maps to."""
        return UNK_ID

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, the specials first."""
        return list(self._itos)

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self._itos == other._itos

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Map tokens to ids; unknown tokens map to :attr:`unk_id`."""
        return [self._stoi.get(token, UNK_ID) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Map ids back to tokens.

        Raises:
            IndexError: an id outside ``[0, len(self))``, e.g. from a model built for another
                vocabulary.
        """
        size = len(self._itos)
        tokens = []
        for index in ids:
            index = int(index)
            if not 0 <= index < size:
                raise IndexError(
                    f"Token id {index} is outside this vocabulary of size {size}; was the model "
                    f"trained with another vocabulary?"
                )
            tokens.append(self._itos[index])
        return tokens

    def to_dict(self) -> dict[str, Any]:
        """The vocabulary as plain data (JSON, or a checkpoint loadable with ``weights_only``)."""
        return {"format": _VOCAB_FORMAT, "version": _VOCAB_FORMAT_VERSION, "tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, payload: object, *, where: str = "the data") -> Vocabulary:
        """Rebuild a vocabulary from :meth:`to_dict`'s output; ``where`` names its origin in errors.

        Raises:
            DataError: ``payload`` is not a vocabulary of this format.
        """
        if not isinstance(payload, dict) or payload.get("format") != _VOCAB_FORMAT:
            raise DataError(f"{where} is not an attention-zoo vocabulary.")
        if payload.get("version") != _VOCAB_FORMAT_VERSION:
            raise DataError(
                f"{where} has vocabulary format version {payload.get('version')!r}, this zoo reads "
                f"version {_VOCAB_FORMAT_VERSION}."
            )
        tokens = payload.get("tokens")
        if not isinstance(tokens, list) or tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise DataError(f"{where} does not start with the special tokens {SPECIAL_TOKENS}.")
        return cls(tokens[len(SPECIAL_TOKENS) :])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the vocabulary as JSON, atomically.

        The file is written to a temporary file in the same directory and then renamed over
        ``path``, so a concurrent reader (another process of a multi-GPU run building the same
        cached vocabulary) sees either the old file or the complete new one, never half a file.
        """
        atomic_write_text(path, json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocabulary:
        """Read a vocabulary written by :meth:`save`.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: the file is not a vocabulary of this format.
        """
        path = Path(path)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} is not a vocabulary file (invalid JSON: {exc}); delete it to rebuild.") from exc
        try:
            return cls.from_dict(payload, where=str(path))
        except DataError as exc:
            raise DataError(f"{exc} Delete it to rebuild.") from exc
