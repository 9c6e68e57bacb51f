"""The language codecs: characters, bytes and a byte-level BPE read text and give it back, alone and
restored from a checkpoint's plain data."""

from __future__ import annotations

import io

import pytest
import torch

from zoo.errors import DataError
from zoo.text.byte_bpe import ByteLevelBPE, pieces
from zoo.text.codecs import restore_codec
from zoo.text.language import LANGUAGE_CODECS, BPECodec, ByteLevelCodec, CharCodec, LanguageCodec

CORPUS = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n  \n\tFirst Citizen:\nYou are all resolved rather to die than to famish?\r\n"
    "Naïve café owners say “déjà vu” — 日本語 too.   \n\nEnd"
) * 20
OTHER = "Whence cometh this — ñandú, 🦜 and\u00a0a no-break space?\n\n  Indented.\n"


def _codecs() -> dict[str, LanguageCodec]:
    return {
        "char": CharCodec.from_texts([CORPUS]),
        "byte": ByteLevelCodec(),
        "bpe": BPECodec.train([CORPUS], 320),
    }


@pytest.fixture(scope="module")
def codecs() -> dict[str, LanguageCodec]:
    return _codecs()


def test_each_codec_names_its_unit_and_kind(codecs: dict[str, LanguageCodec]) -> None:
    assert {name: (c.unit, c.codec_kind) for name, c in codecs.items()} == {
        "char": ("char", "chars"),
        "byte": ("byte", "byte_level"),
        "bpe": ("token", "bpe"),
    }
    assert codecs["byte"].vocab_size == 256 and codecs["bpe"].vocab_size == 320


def test_the_character_vocabulary_is_the_sorted_distinct_characters(codecs: dict[str, LanguageCodec]) -> None:
    char = codecs["char"]
    assert isinstance(char, CharCodec)
    assert char.chars == "".join(sorted(set(CORPUS))) and char.vocab_size == len(set(CORPUS))
    ids = char.encode(CORPUS)
    assert ids == [char.chars.index(c) for c in CORPUS]
    assert char.encode_array(CORPUS).tolist() == ids and char.encode_array(CORPUS).dtype.itemsize == 1
    assert char.id_to_token(char.encode("Naïve")) == list("Naïve")


@pytest.mark.parametrize("name", ["char", "byte", "bpe"])
def test_text_round_trips(codecs: dict[str, LanguageCodec], name: str) -> None:
    codec = codecs[name]
    assert codec.decode(codec.encode(CORPUS)) == CORPUS
    assert codec.decode(torch.tensor(codec.encode(CORPUS[:200]))) == CORPUS[:200]  # a model's output
    assert codec.encode_array(CORPUS).tolist() == codec.encode(CORPUS)
    if name != "char":  # bytes and byte-level BPE read any text: nothing is unknown
        assert codec.unknown(OTHER) == [] and codec.decode(codec.encode(OTHER)) == OTHER


def test_bytes_are_their_own_ids_and_a_cut_character_decodes_to_a_replacement() -> None:
    codec = ByteLevelCodec()
    assert codec.encode("é!") == [0xC3, 0xA9, 0x21] and codec.encode_array(b"\xff\x00").tolist() == [255, 0]
    assert codec.decode([0xC3, 0x21]) == "\ufffd!"
    assert codec.id_to_token(codec.encode("aé")) == ["a", "\\xc3", "\\xa9"]


def test_unknown_names_the_characters_a_prompt_cannot_use(codecs: dict[str, LanguageCodec]) -> None:
    char = codecs["char"]
    assert char.unknown("Whence cometh 🦜 and ñandú?") == ["W", "🦜", "ñ", "ú"]
    assert char.unknown("First Citizen:") == []
    with pytest.raises(DataError) as info:
        char.encode("Whence 🦜")
    assert str(info.value) == (
        f"The text holds characters that are not among the {char.vocab_size} this model knows: 'W', '🦜'; "
        "remove or replace them."
    )


def test_bpe_pieces_encode_exactly_as_the_whole_text() -> None:
    """The codec cuts long text into lines (see zoo.text.byte_bpe); the ids must be those of the
    whole text encoded at once, whatever whitespace surrounds the cuts."""
    text = CORPUS + OTHER + "x\n\ny\n \nz\n'll\nend\n"
    parts = pieces(text)
    assert "".join(parts) == text and len(parts) > 50
    bpe = ByteLevelBPE.train([CORPUS], 400)
    assert bpe.encode(text) == bpe._tokenizer.encode(text).ids


def test_bpe_tokens_read_as_text() -> None:
    codec = BPECodec.train([CORPUS], 320)
    tokens = codec.id_to_token(codec.encode(" speak é"))
    assert "".join(tokens).replace("\\xc3\\xa9", "é") == " speak é"
    assert any(token.startswith(" ") and len(token) > 2 for token in tokens)  # merged words keep their space


@pytest.mark.parametrize("name", ["char", "byte", "bpe"])
def test_state_dict_round_trips_through_a_checkpoint(codecs: dict[str, LanguageCodec], name: str) -> None:
    codec = codecs[name]
    buffer = io.BytesIO()
    torch.save({"codec": codec.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["codec"]  # plain data: loads without unpickling code
    restored = restore_codec(state, LANGUAGE_CODECS)
    assert type(restored) is type(codec) and restored.vocab_size == codec.vocab_size
    assert restored.encode(CORPUS) == codec.encode(CORPUS) and restored.decode(codec.encode(CORPUS)) == CORPUS


def test_a_damaged_state_is_refused() -> None:
    with pytest.raises(DataError, match="lacks chars"):
        CharCodec.from_state_dict({**CharCodec("ab").state_dict(), "chars": 3})
    with pytest.raises(DataError, match="distinct characters in sorted order"):
        CharCodec.from_state_dict({**CharCodec("ab").state_dict(), "chars": "ba"})
    state = BPECodec.train([CORPUS], 300).state_dict()
    with pytest.raises(DataError, match="unreadable tokenizer"):
        BPECodec.from_state_dict({**state, "tokenizer": "{not json"})


def test_prompts_of_one_length_batch_and_others_are_refused(codecs: dict[str, LanguageCodec]) -> None:
    char = codecs["char"]
    batch = char.batch(["First", "Speak"])
    assert batch["tokens"].dtype == torch.long and batch["tokens"].tolist() == [
        char.encode("First"),
        char.encode("Speak"),
    ]
    with pytest.raises(DataError) as info:
        char.batch(["First", "All"])
    assert str(info.value) == (
        "Prompts batched together must have the same number of chars (these have [3, 5]): give them one at a time."
    )
    with pytest.raises(DataError, match="nothing to continue"):
        codecs["byte"].batch(["fine", " "])
