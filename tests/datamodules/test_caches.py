"""The cached codec, tokenizer or vocabulary of each corpus module, all through
:func:`zoo.text.files.load_or_build`: read back under the same key without building anything,
built again under another, written atomically, refused in one line when unreadable, and read from
the files (names and contents) that earlier releases wrote."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from zoo.datamodules.fra_eng import FraEngDataModule
from zoo.datamodules.shakespeare import ShakespeareDataModule
from zoo.datamodules.text import TextDataModule
from zoo.datamodules.text_classification import SST2DataModule
from zoo.datamodules.text_corpus import TextCorpus
from zoo.errors import DataError
from zoo.text import files
from zoo.text.language import CharCodec
from zoo.text.subwords import SubwordTokenizer
from zoo.text.words import Vocabulary

# Modules whose cache key needs no corpus (the public copy's checksum, the Hub's name): the names
# below are those earlier releases gave their entries.
EARLIER: dict[str, tuple[Callable[[str], object], str]] = {
    "shakespeare": (lambda cache: ShakespeareDataModule(cache_dir=cache), "codec-604cb064b048d8ef.json"),
    "fra_eng": (lambda cache: FraEngDataModule(cache_dir=cache), "tokenizer-b0b9f2ea52293355.json"),
    "sst2": (lambda cache: SST2DataModule(cache_dir=cache), "vocab-b20c7d6a813a2741.json"),
}


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("built again although the cache holds it")


def test_entries_written_by_earlier_releases_are_read_and_nothing_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chars = CharCodec.from_texts(["To be, or not"])
    tokenizer = SubwordTokenizer.train(["the cat sat", "le chat"] * 20, 60)
    vocabulary = Vocabulary(["good", "bad"])
    written = {  # what each release wrote into its entry
        "shakespeare": json.dumps(chars.state_dict()),
        "fra_eng": tokenizer.to_json(),
        "sst2": vocabulary.to_json(),
    }
    for name, text in written.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / EARLIER[name][1]).write_text(text, encoding="utf-8")
    monkeypatch.setattr(TextCorpus, "splits", _refuse)
    monkeypatch.setattr(SubwordTokenizer, "train", _refuse)
    monkeypatch.setattr(Vocabulary, "build", _refuse)
    shakespeare, fra_eng, sst2 = (module(str(tmp_path / name)) for name, (module, _) in EARLIER.items())
    assert shakespeare.codec.chars == chars.chars  # type: ignore[attr-defined]
    assert fra_eng.tokenizer.encode("the cat") == tokenizer.encode("the cat")  # type: ignore[attr-defined]
    assert sst2.vocab == vocabulary  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(EARLIER))
def test_an_unreadable_entry_is_refused_in_one_line_with_the_fix(tmp_path: Path, name: str) -> None:
    module, entry = EARLIER[name]
    file = tmp_path / entry
    file.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError) as info:
        module(str(tmp_path)).vocab_size  # type: ignore[attr-defined]  # noqa: B018
    message = str(info.value)
    assert message.startswith("The cached ") and f" {file} is unreadable (" in message
    assert message.endswith("; delete it to rebuild.") and "\n" not in message


def _text_module(corpus: Path, cache: Path) -> TextDataModule:
    return TextDataModule(path=str(corpus), block_size=8, cache_dir=str(cache))


def test_a_codec_is_built_once_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    corpus.write_text("abc" * 40, encoding="utf-8")
    first = _text_module(corpus, cache)
    assert first.codec.chars == "abc"  # type: ignore[attr-defined]
    entry = first.codec_file.name
    built: list[list[str]] = []

    def counted(texts: list[str]) -> CharCodec:
        built.append(texts)
        return CharCodec("".join(sorted(set("".join(texts)))))

    monkeypatch.setattr(CharCodec, "from_texts", counted)
    again = _text_module(corpus, cache)
    again.setup("fit")  # the second setup reads the entry
    assert again.codec.chars == "abc" and built == []  # type: ignore[attr-defined]
    corpus.write_text("abcd" * 40, encoding="utf-8")  # another corpus: another key
    changed = _text_module(corpus, cache)
    assert changed.codec.chars == "abcd" and len(built) == 1  # type: ignore[attr-defined]
    assert changed.codec_file.name != entry and sorted(os.listdir(cache)) == sorted([entry, changed.codec_file.name])


def test_a_failed_write_leaves_no_entry_and_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    corpus.write_text("abc" * 40, encoding="utf-8")

    def full(descriptor: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "fsync", full)  # the write fails after the temporary file exists
    with pytest.raises(OSError, match="disk full"):
        _text_module(corpus, cache).codec  # noqa: B018
    assert os.listdir(cache) == []
    monkeypatch.undo()
    module = _text_module(corpus, cache)
    assert module.codec.chars == "abc" and os.listdir(cache) == [module.codec_file.name]  # type: ignore[attr-defined]
