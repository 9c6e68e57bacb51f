"""Codecs: raw inputs to a model's batch and its outputs back, convertible to plain data.

A codec is what predicting needs besides the weights. It travels inside every checkpoint (its
:meth:`~Codec.state_dict`: strings, integers, lists), so a checkpoint still loads with
``torch.load(weights_only=True)`` and a model restored from it alone reads raw inputs without
the corpus. Tasks reach their data only through it, during training too: ``batch`` for raw
inputs, ``decode`` for outputs, ``id_to_token`` for heatmap labels, ``class_names`` for labels.

Codecs that hold a tokenizer store it as the ``tokenizers`` library's JSON. Rebuilding one refuses
state it would misread: another :data:`CODEC_VERSION` (an older zoo, or another text pipeline),
or fields missing or of the wrong type (a hand-edited or foreign checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

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
    "restore_codec",
]

CODEC_VERSION = 2
"""Bump when a codec reads its inputs differently or stores itself differently (version 1: the
word vocabulary as a token list, before both codecs stored ``tokenizers`` JSON)."""


class Codec:
    """Turns raw inputs into a model's batch and its token ids back into text; plain data both ways.

    A codec is saved as its constructor arguments (:attr:`saved_fields`): integers, strings and
    lists as they are, a tokenizer (anything with ``to_json`` / ``from_json``) as its JSON text,
    with the codec's kind and :data:`CODEC_VERSION`. :meth:`state_dict` and
    :meth:`from_state_dict` are written once, here; a codec declares its fields.
    """

    #: names the codec in saved state, so a task that predicts with several kinds rebuilds the right one
    codec_kind: ClassVar[str]
    #: how error messages name the codec ("The byte codec")
    label: ClassVar[str]
    #: the constructor arguments saved, each with its type (a tokenizer class is saved as its JSON)
    saved_fields: ClassVar[Mapping[str, type]]

    def batch(self, inputs: Sequence[Any]) -> dict[str, Any]:
        """Raw inputs as one model-input batch."""
        raise NotImplementedError

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """The token behind each id (attention heatmaps' labels)."""
        raise NotImplementedError

    @classmethod
    def tokenizer_fields(cls) -> tuple[str, ...]:
        """The saved fields that hold a tokenizer, which :meth:`state_dict` stores as its
        ``tokenizers`` JSON text (an exported folder writes each as a file of its own)."""
        return tuple(name for name, kind in cls.saved_fields.items() if _is_tokenizer(kind))

    def token_table(self) -> list[str] | None:
        """The token of every id, for a codec whose table is fixed by its code rather than saved
        (bytes, ListOps): an exported folder writes it for readers outside the zoo, and loading
        checks it. None where a saved field holds the table (a tokenizer, a list of characters)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the kind, the version and each saved field."""
        state: dict[str, Any] = {"codec_kind": self.codec_kind, "codec_version": CODEC_VERSION}
        for name, kind in self.saved_fields.items():
            value = getattr(self, name)
            state[name] = value.to_json() if _is_tokenizer(kind) else (list(value) if kind is list else value)
        return state

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Codec:
        """Rebuild the codec of :meth:`state_dict`.

        Raises:
            DataError: the state is incomplete, or of another codec version, or its tokenizer unreadable.
        """
        types = {name: str if _is_tokenizer(kind) else kind for name, kind in cls.saved_fields.items()}
        saved = codec_fields(state, codec=cls.label, fields=types)
        arguments = {}
        for name, kind in cls.saved_fields.items():
            if not _is_tokenizer(kind):
                arguments[name] = saved[name]
                continue
            try:
                arguments[name] = kind.from_json(saved[name])  # type: ignore[attr-defined]
            except DataError as exc:
                raise DataError(f"{cls.label} saved in this checkpoint holds an unreadable {name}: {exc}") from exc
        return cls(**arguments)


def _is_tokenizer(kind: type) -> bool:
    """Whether a saved field's type is stored as JSON text (``to_json`` / ``from_json``)."""
    return hasattr(kind, "from_json")


def restore_codec(state: Mapping[str, Any], kinds: Sequence[type[Codec]]) -> Codec:
    """The codec of saved ``state``, among the classes ``kinds`` a task predicts with.

    A state that names no kind (saved before kinds were recorded) is the first of ``kinds``.

    Raises:
        DataError: a kind none of ``kinds`` is, or a state :meth:`Codec.from_state_dict` refuses.
    """
    by_kind = {cls.codec_kind: cls for cls in kinds}
    kind = state.get("codec_kind", kinds[0].codec_kind)
    if kind not in by_kind:
        raise DataError(
            f"This checkpoint's codec is of kind {kind!r}, which this model does not read (known: {sorted(by_kind)}); "
            "use the zoo release the model was trained with."
        )
    return by_kind[kind].from_state_dict(state)


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


class ClassificationCodec(Codec):
    """Base of the codecs a classifier predicts with: raw inputs to ``{"tokens", "valid_lens"}``
    batches, ids back to tokens, label ids to ``class_names``. Corpora read their inputs
    differently (words, bytes, ListOps tokens), each subclass naming itself by ``codec_kind``."""

    class_names: list[str]

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


class TextClassificationCodec(ClassificationCodec):
    """Raw texts to word ids (training vocabulary, length limit), label ids to class names."""

    codec_kind = "words"
    label = "The text classification codec"
    saved_fields = MappingProxyType({"tokenizer": Vocabulary, "max_length": int, "class_names": list})

    def __init__(self, tokenizer: Vocabulary, max_length: int, class_names: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.class_names = list(class_names)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Word ids of each text, truncated to ``max_length``; ``[<unk>]`` where nothing is left."""
        return [ids or [UNK_ID] for ids in self.tokenizer.encode_texts(texts, self.max_length)]

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """The words behind token ids, e.g. to label attention heatmaps."""
        return self.tokenizer.decode(ids)


class TranslationCodec(Codec):
    """English sentences to a translation model's source batch, output ids to French text."""

    codec_kind = "translation"
    label = "The translation codec"
    saved_fields = MappingProxyType({"tokenizer": SubwordTokenizer, "max_length": int})

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
