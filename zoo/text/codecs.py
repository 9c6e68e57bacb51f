"""Codecs: raw inputs to a model's batch and its outputs back, convertible to plain data.

A codec is what predicting needs besides the weights. It travels inside every checkpoint (its
:meth:`~Codec.state_dict`: strings, integers, lists), so a checkpoint still loads with
``torch.load(weights_only=True)`` and a model restored from it alone reads raw inputs without
the corpus. Tasks reach their data only through it, during training too: ``batch`` for raw
inputs, ``decode`` for outputs, ``id_to_token`` for heatmap labels, ``class_names`` for labels.

Both codecs store their tokenizer as the ``tokenizers`` library's JSON. Rebuilding one refuses
state it would misread: another :data:`CODEC_VERSION` (an older zoo, or another text pipeline),
or fields missing or of the wrong type (a hand-edited or foreign checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from zoo.errors import DataError
from zoo.text.collators import PadCollator, TranslationCollator
from zoo.text.subwords import SubwordTokenizer
from zoo.text.words import PAD_ID, UNK_ID, Vocabulary

__all__ = [
    "CODEC_VERSION",
    "ClassificationCodec",
    "Codec",
    "TextClassificationCodec",
    "TranslationCodec",
    "check_texts",
    "codec_fields",
]

CODEC_VERSION = 2
"""Bump when a codec reads its inputs differently or stores itself differently (version 1: the
word vocabulary as a token list, before both codecs stored ``tokenizers`` JSON)."""


class Codec(Protocol):
    """Turns raw inputs into a model's batch and its token ids back into text; plain data both ways."""

    def batch(self, inputs: Sequence[Any]) -> dict[str, Any]: ...

    def id_to_token(self, ids: Sequence[int]) -> list[str]: ...

    def state_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Codec: ...


def codec_fields(state: Mapping[str, Any], *, codec: str, fields: Mapping[str, type]) -> dict[str, Any]:
    """The ``fields`` of a saved codec ``state``, after checking its version and their types.

    Args:
        state: What the codec's ``state_dict`` returned, read back from a checkpoint.
        codec: The codec, as error messages name it ("The translation codec").
        fields: Required field names and their types.

    Raises:
        DataError: another codec version, or a field missing or of another type.
    """
    saved = state.get("codec_version", state.get("tokenizer_version"))  # version 1 named it tokenizer_version
    if saved != CODEC_VERSION:
        raise DataError(
            f"This model was saved with codec version {saved!r}; this zoo has version {CODEC_VERSION}, so it would "
            f"read its inputs differently. Use the zoo release the model was trained with, or retrain it."
        )
    wrong = [name for name, kind in fields.items() if not isinstance(state.get(name), kind)]
    if wrong:
        expected = ", ".join(f"{name} ({fields[name].__name__})" for name in wrong)
        raise DataError(
            f"{codec} saved in this checkpoint lacks {expected}: the checkpoint is damaged or was not written by the zoo."
        )
    return {name: state[name] for name in fields}


def check_texts(texts: Sequence[str], where: str, action: str = "classify") -> None:
    """Refuse what cannot be read: a bare string, no texts, or an empty text."""
    if isinstance(texts, str):
        raise TypeError(f"{where} must be a list of texts, not one string: wrap it as [text].")
    if len(texts) == 0:
        raise DataError(f"{where} holds no texts; give at least one text to {action}.")
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise DataError(
                f"{where}[{index}] is empty text ({text!r}): there is nothing to {action}. Remove it or give a non-empty text."
            )


class ClassificationCodec:
    """Base of the codecs a classifier predicts with: raw inputs to ``{"tokens", "valid_lens"}``
    batches, ids back to tokens, label ids to ``class_names``.

    Corpora read their inputs differently (words, bytes, ListOps tokens), so each subclass names
    itself by ``codec_kind``, which its saved state records; :meth:`from_state_dict` on this base
    rebuilds whichever kind a checkpoint holds.
    """

    codec_kind: ClassVar[str]
    _kinds: ClassVar[dict[str, type[ClassificationCodec]]] = {}
    class_names: list[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ClassificationCodec._kinds[cls.codec_kind] = cls

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (a codec that reads texts one at a time overrides :meth:`batch` instead)."""
        raise NotImplementedError

    def encode(self, text: str) -> Tensor:
        """Token ids of one text, as :meth:`encode_many` gives them."""
        return torch.tensor(self.encode_many([text])[0], dtype=torch.long)

    def collator(self) -> PadCollator:
        """How :meth:`batch` pads encoded texts."""
        return PadCollator(PAD_ID)

    def batch(self, inputs: Sequence[str]) -> dict[str, Tensor]:
        """Raw texts as one model-input batch: ``{"tokens", "valid_lens"}``, padded by :meth:`collator`.

        Raises:
            DataError: a text is empty or only whitespace.
        """
        check_texts(inputs, "texts")
        return self.collator()([{"tokens": torch.tensor(ids)} for ids in self.encode_many(inputs)])

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ClassificationCodec:
        """Rebuild the codec kind named in ``state`` (word codecs, saved before kinds existed, name none).

        Raises:
            DataError: an unknown kind, an incomplete state, or another codec version.
        """
        kind = state.get("codec_kind", TextClassificationCodec.codec_kind)
        if kind not in cls._kinds:
            raise DataError(
                f"This checkpoint's classification codec is of kind {kind!r}, which this zoo does not know "
                f"(known: {sorted(cls._kinds)}); use the zoo release the model was trained with."
            )
        return cls._kinds[kind].from_state_dict(state)


class TextClassificationCodec(ClassificationCodec):
    """Raw texts to word ids (training vocabulary, length limit), label ids to class names."""

    codec_kind = "words"
    kind: ClassVar[str] = "The text classification codec"

    def __init__(self, vocab: Vocabulary, max_length: int, class_names: Sequence[str]) -> None:
        self.vocab = vocab
        self.max_length = max_length
        self.class_names = list(class_names)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Word ids of each text, truncated to ``max_length``; ``[<unk>]`` where nothing is left."""
        return [ids or [UNK_ID] for ids in self.vocab.encode_texts(texts, self.max_length)]

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """The words behind token ids, e.g. to label attention heatmaps."""
        return self.vocab.decode(ids)

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the tokenizer's JSON text, the length limit, the class names."""
        return {
            "tokenizer": self.vocab.to_json(),
            "max_length": self.max_length,
            "class_names": list(self.class_names),
            "codec_version": CODEC_VERSION,
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> TextClassificationCodec:
        """Rebuild the codec of :meth:`state_dict`.

        Raises:
            DataError: the state is incomplete, or of another codec version.
        """
        saved = codec_fields(state, codec=cls.kind, fields={"tokenizer": str, "max_length": int, "class_names": list})
        vocab = Vocabulary.from_json(saved["tokenizer"], where="the saved vocabulary")
        return cls(vocab, saved["max_length"], saved["class_names"])


class TranslationCodec:
    """English sentences to a translation model's source batch, output ids to French text."""

    kind: ClassVar[str] = "The translation codec"

    def __init__(self, tokenizer: SubwordTokenizer, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length

    def items(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """Checked, encoded sentences as collator items ``{"src", "sources"}``.

        Raises:
            DataError: no sentences, an empty sentence, or one longer than ``max_length`` tokens.
        """
        if isinstance(texts, str):
            raise TypeError("Expected a list of sentences, not one string: wrap it as [sentence].")
        if len(texts) == 0:
            raise DataError("No sentences to translate; give at least one.")
        items = []
        for index, text in enumerate(texts):
            ids = self.tokenizer.encode(text) if isinstance(text, str) else []
            if not ids:
                raise DataError(f"Sentence {index} is empty ({text!r}): there is nothing to translate.")
            if len(ids) > self.max_length:
                raise DataError(
                    f"Sentence {index} has {len(ids)} subword tokens, more than max_length={self.max_length}: "
                    f"{text[:60]!r}... Shorten or split it, or raise the limit with --data.max_length "
                    f"(the model must have been trained for such lengths)."
                )
            items.append({"src": torch.tensor(ids), "sources": text})
        return items

    def batch(self, inputs: Sequence[str]) -> dict[str, Any]:
        """English sentences as one model-input batch: ``{"src", "src_lens", "sources"}``."""
        return TranslationCollator()(self.items(inputs))

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """French text of predicted ids, up to the first ``<eos>``, specials skipped."""
        return self.tokenizer.decode(ids)

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """The subword strings of ``ids`` (for labelling attention heatmaps)."""
        return self.tokenizer.id_to_token(ids)

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the tokenizer's JSON text and the length limit."""
        return {"tokenizer": self.tokenizer.to_json(), "max_length": self.max_length, "codec_version": CODEC_VERSION}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> TranslationCodec:
        """Rebuild the codec of :meth:`state_dict`.

        Raises:
            DataError: the state is incomplete, or of another codec version.
        """
        saved = codec_fields(state, codec=cls.kind, fields={"tokenizer": str, "max_length": int})
        try:
            return cls(SubwordTokenizer.from_json(saved["tokenizer"]), saved["max_length"])
        except DataError as exc:
            raise DataError(f"The saved tokenizer is {exc}") from exc
