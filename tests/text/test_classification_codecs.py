"""The classifier's codec kinds (words, bytes, ListOps): a checkpoint records which one it holds and
is rebuilt as that kind, so a model trained on lra_text or listops predicts from its checkpoint
alone with its own reading of the inputs, and labels heatmaps with its own tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zoo import load_checkpoint
from zoo.datamodules.listops import ListOpsCodec
from zoo.errors import DataError
from zoo.provenance import RECORD_KEY
from zoo.tasks import Sentiment
from zoo.text import ByteCodec, ClassificationCodec, TextClassificationCodec, Vocabulary
from zoo.text.codecs import CODEC_VERSION, restore_codec


def _save(tmp_path: Path, vocab_size: int, num_classes: int, codec: ClassificationCodec) -> Path:
    task = Sentiment(vocab_size=vocab_size, num_classes=num_classes, d_model=8, num_heads=2, num_layers=1, ffn_hidden=8)
    path = tmp_path / "model.ckpt"
    record = {"model": "sentiment", "codec": codec.state_dict()}
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), RECORD_KEY: record}, path)
    return path


def test_a_byte_codec_checkpoint_predicts_from_bytes(tmp_path: Path) -> None:
    task = load_checkpoint(_save(tmp_path, 257, 2, ByteCodec(12, ["negative", "positive"])))
    assert isinstance(task.codec, ByteCodec) and task.codec.max_length == 12
    batch = task.codec.batch(["Déjà", "a very long review indeed"])
    assert batch["tokens"].shape == (2, 12) and batch["valid_lens"].tolist() == [6, 12]  # é is two bytes
    assert task.codec.decode(batch["tokens"][0]) == "Déjà"
    assert task.codec.id_to_token([ord("h") + 1, ord("i") + 1, 0]) == ["h", "i", "<pad>"]
    rows = task.predict(["great film"])
    assert rows[0]["text"] == "great film" and rows[0]["label"] in ("negative", "positive")


def test_a_listops_codec_checkpoint_reads_expressions(tmp_path: Path) -> None:
    task = load_checkpoint(_save(tmp_path, 16, 10, ListOpsCodec()))
    assert isinstance(task.codec, ListOpsCodec)
    batch = task.codec.batch(["[MAX 2 ( [MIN 3 4 ] ) 9 ]", "7"])
    assert batch["valid_lens"].tolist() == [8, 1]
    assert task.codec.decode(batch["tokens"][1]) == "7"
    assert task.codec.id_to_token(batch["tokens"][0].tolist()) == ["[MAX", "2", "[MIN", "3", "4", "]", "9", "]"]
    assert task.predict(["[SM 1 2 ]"])[0]["label"] in [str(d) for d in range(10)]
    with pytest.raises(DataError, match="unknown tokens"):
        task.codec.batch(["[FIRST 1 2 ]"])


def test_word_codec_state_without_a_kind_is_still_words_and_an_unknown_kind_is_named() -> None:
    words = TextClassificationCodec(Vocabulary(["good"]), 8, ["negative", "positive"])
    state = words.state_dict()
    del state["codec_kind"]  # as checkpoints written before kinds existed hold it
    assert isinstance(restore_codec(state, Sentiment.codecs), TextClassificationCodec)
    unknown = {"codec_kind": "pixels", "class_names": ["a"], "codec_version": CODEC_VERSION}
    with pytest.raises(DataError, match=r"kind 'pixels'.*known: \['bytes', 'listops', 'words'\]"):
        restore_codec(unknown, Sentiment.codecs)
