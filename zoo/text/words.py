"""Word-level tokenization for the sentiment models, as a Hugging Face ``tokenizers`` WordLevel model.

The sentiment models embed whole words, in the style of the Stanford Sentiment Treebank:
lowercase words, punctuation as separate tokens, and clitics split off (``"don't"`` becomes
``"do", "n't"``, ``"it's"`` becomes ``"it", "'s"``). SST-2 text is already tokenized that way, so
tokenizing it again changes almost nothing, and raw IMDB reviews end up with tokens that look
like SST's.

The whole pipeline lives in one ``tokenizers.Tokenizer`` (normalizers for case, HTML breaks,
apostrophes and treebank escapes; a regex pre-tokenizer; a WordLevel model), so the word codec
serializes exactly like the subword one: the library's JSON. :class:`Vocabulary` wraps it: id 0
is padding, id 1 stands for every unknown word, the rest are ordered by descending frequency,
then alphabetically, so building twice from the same text gives the same ids.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import ClassVar

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

from zoo.errors import DataError

__all__ = ["PAD_ID", "PAD_TOKEN", "SPECIAL_TOKENS", "UNK_ID", "UNK_TOKEN", "Vocabulary", "tokenize"]

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN)
PAD_ID = SPECIAL_TOKENS.index(PAD_TOKEN)
UNK_ID = SPECIAL_TOKENS.index(UNK_TOKEN)

# SST-2's validation and test sentences keep the Penn Treebank escapes ("-lrb-" for "(", "\/"
# for "/") while its training sentences do not: undo them so both share one vocabulary.
_PTB_BRACKETS = {"lrb": "(", "rrb": ")", "lsb": "[", "rsb": "]", "lcb": "{", "rcb": "}"}
_TOKEN = (
    r"n't\b"  # negation clitic, split off its verb by the normalizer ("don't" -> "do n't")
    r"|'(?:s|re|ve|ll|d|m)\b"  # the other English clitics: 's 're 've 'll 'd 'm
    r"|\d+(?:[.,]\d+)+"  # numbers with a decimal point or thousands separator: 7.5, 1,000
    r"|\w+(?:-\w+)*"  # words, hyphenated compounds kept whole: well-made, sci-fi
    r"|\.{2,}|-{2,}|`+|'{2,}"  # ellipses, dashes and TeX-style quotes as SST writes them
    r"|[^\w\s]"  # any other punctuation mark, one per token
)


def _pipeline(vocab: dict[str, int]) -> Tokenizer:
    """The word tokenizer over ``vocab``: normalization, SST-style splitting, word lookup."""
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Lowercase(),
        normalizers.Replace("\u2019", "'"),  # "don’t" and "don't" give the same tokens
        normalizers.Replace(Regex(r"<br\s*/?>"), " "),  # IMDB's HTML line breaks
        *(normalizers.Replace(f"-{name}-", f" {char} ") for name, char in _PTB_BRACKETS.items()),
        normalizers.Replace("\\/", "/"),
        normalizers.Replace("\\*", "*"),
        normalizers.Replace(Regex(r"n't\b"), " n't"),
    ])  # fmt: skip
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(_TOKEN), behavior="isolated")]
    )
    return tokenizer


_SPLITTER = _pipeline({token: i for i, token in enumerate(SPECIAL_TOKENS)})


def tokenize(text: str) -> list[str]:
    """Split ``text`` into lowercase word and punctuation tokens, SST style.

    HTML line breaks (``<br />``, frequent in IMDB reviews) become spaces, typographic
    apostrophes become ASCII ones, and Penn Treebank escapes become the characters they stand
    for (``-lrb-`` is ``(``).

    >>> tokenize("I don't like it.<br /><br />It's GREAT!")
    ['i', 'do', "n't", 'like', 'it', '.', 'it', "'s", 'great', '!']
    """
    normalized = _SPLITTER.normalizer.normalize_str(text)
    return [token for token, _ in _SPLITTER.pre_tokenizer.pre_tokenize_str(normalized)]


class Vocabulary:
    """A bijection between words and ids, with padding and unknown-word ids, over a WordLevel tokenizer.

    Args:
        tokens: The ordinary tokens in id order; ids start at ``len(SPECIAL_TOKENS)`` because
            ``<pad>`` is 0 and ``<unk>`` is 1. Use :meth:`build` to count them from text.
    """

    pad_id: ClassVar[int] = PAD_ID
    """The id of ``<pad>``, which fills sequences up to the longest in a batch."""
    unk_id: ClassVar[int] = UNK_ID
    """The id every out-of-vocabulary token maps to."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._itos = [*SPECIAL_TOKENS, *tokens]
        stoi = {token: index for index, token in enumerate(self._itos)}
        if len(stoi) != len(self._itos):
            duplicates = sorted(t for t, n in Counter(self._itos).items() if n > 1)
            raise DataError(
                f"Vocabulary tokens must be unique (and must not repeat the specials {SPECIAL_TOKENS}); "
                f"duplicated: {duplicates[:10]}."
            )
        self.tokenizer = _pipeline(stoi)

    @classmethod
    def build(
        cls, tokenized_texts: Iterable[Sequence[str]], *, max_size: int | None = None, min_freq: int = 1
    ) -> Vocabulary:
        """Count tokens and keep the frequent ones.

        Args:
            tokenized_texts: One token list per text (:func:`tokenize`'s output).
            max_size: The largest vocabulary size, the two specials included (so an embedding
                table sized ``len(vocab)`` never exceeds it). ``None`` keeps every token.
            min_freq: Tokens seen fewer times than this map to ``<unk>``.
        """
        if max_size is not None and max_size <= len(SPECIAL_TOKENS):
            raise DataError(
                f"max_size={max_size} leaves no room for words next to the specials {SPECIAL_TOKENS}; "
                f"use a value above {len(SPECIAL_TOKENS)}."
            )
        if min_freq < 1:
            raise DataError(f"min_freq must be at least 1, got {min_freq}.")
        counts: Counter[str] = Counter()
        for tokens in tokenized_texts:
            counts.update(tokens)
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
        return cls(ranked if max_size is None else ranked[: max_size - len(SPECIAL_TOKENS)])

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer, *, where: str = "the data") -> Vocabulary:
        """The vocabulary of a WordLevel ``tokenizer`` (as :meth:`to_json` wrote it)."""
        vocab = tokenizer.get_vocab()
        itos = sorted(vocab, key=vocab.__getitem__)
        if tuple(itos[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS or [vocab[t] for t in itos] != list(range(len(itos))):
            raise DataError(f"{where} is not an attention-zoo word vocabulary (ids 0, 1 must be {SPECIAL_TOKENS}).")
        return cls(itos[len(SPECIAL_TOKENS) :])

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, the specials first."""
        return list(self._itos)

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self.tokenizer.token_to_id(token) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self._itos == other._itos

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Map tokens to ids; unknown tokens map to :attr:`unk_id`."""
        lookup = self.tokenizer.token_to_id
        return [UNK_ID if (index := lookup(token)) is None else index for token in tokens]

    def encode_texts(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Word ids of raw texts (tokenized by the library, in parallel), each cut to ``max_length``."""
        return [e.ids[:max_length] for e in self.tokenizer.encode_batch(list(texts))]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Map ids back to tokens.

        Raises:
            IndexError: an id outside ``[0, len(self))``, e.g. from a model built for another vocabulary.
        """
        size = len(self._itos)
        tokens = []
        for index in map(int, ids):
            if not 0 <= index < size:
                raise IndexError(
                    f"Token id {index} is outside this vocabulary of size {size}; was the model trained "
                    f"with another vocabulary?"
                )
            tokens.append(self._itos[index])
        return tokens

    def to_json(self) -> str:
        """The tokenizer (pipeline and vocabulary) as ``tokenizers`` JSON text."""
        return self.tokenizer.to_str()

    @classmethod
    def from_json(cls, text: str, *, where: str = "the data") -> Vocabulary:
        """Rebuild a vocabulary from :meth:`to_json`'s text; ``where`` names its origin in errors."""
        try:
            tokenizer = Tokenizer.from_str(text)
        except Exception as exc:  # the library raises a bare Exception for unreadable JSON
            raise DataError(f"{where} is not an attention-zoo vocabulary ({exc}).") from exc
        return cls.from_tokenizer(tokenizer, where=where)
