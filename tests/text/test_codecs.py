"""Codecs come back from a checkpoint's plain data, and refuse state they would misread."""

from __future__ import annotations

from typing import Any

import pytest

from zoo.errors import DataError
from zoo.text.codecs import TextClassificationCodec, TranslationCodec
from zoo.text.subwords import SubwordTokenizer
from zoo.text.words import Vocabulary, tokenize

TEXTS = ["a gripping , beautiful film", "dull and far too long", "the cast is wonderful", "it never comes alive"]


def _classification_codec() -> TextClassificationCodec:
    return TextClassificationCodec(Vocabulary.build(tokenize(t) for t in TEXTS), 16, ["negative", "positive"])


def _translation_codec() -> TranslationCodec:
    return TranslationCodec(SubwordTokenizer.train(TEXTS, 60), 16)


CODECS = {
    "classification": (_classification_codec, lambda c, t: c.encode(t).tolist()),
    "translation": (_translation_codec, lambda c, t: c.tokenizer.encode(t)),
}


@pytest.mark.parametrize("kind", CODECS)
def test_state_dict_round_trip_encodes_alike(kind: str) -> None:
    build, encode = CODECS[kind]
    codec = build()
    restored = type(codec).from_state_dict(codec.state_dict())
    for text in [*TEXTS, "a never seen word"]:
        assert encode(restored, text) == encode(codec, text)


@pytest.mark.parametrize("kind", CODECS)
def test_another_pipeline_version_is_refused(kind: str) -> None:
    codec = CODECS[kind][0]()
    state: dict[str, Any] = {**codec.state_dict(), "codec_version": 0}
    with pytest.raises(DataError, match=r"version 0; this zoo has version \d+.*retrain"):
        type(codec).from_state_dict(state)


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("classification", "class_names"),
        ("classification", "max_length"),
        ("translation", "tokenizer"),
        ("translation", "max_length"),
    ],
)
def test_a_missing_or_mistyped_field_is_named(kind: str, field: str) -> None:
    codec = CODECS[kind][0]()
    state = codec.state_dict()
    missing = {k: v for k, v in state.items() if k != field}
    with pytest.raises(DataError, match=rf"lacks {field} \("):
        type(codec).from_state_dict(missing)
    with pytest.raises(DataError, match=rf"lacks {field} \("):
        type(codec).from_state_dict({**state, field: 3.5})
