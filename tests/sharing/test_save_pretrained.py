"""``save_pretrained`` and ``from_pretrained`` on models built in Python, no training: the codecs
whose token table is fixed by the zoo's code (bytes, ListOps) write it to ``codec.json`` and
loading checks it; a text model without its codec is refused; the card of a model saved from
Python says what is not known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import zoo
from zoo.datamodules.listops import ListOpsCodec
from zoo.datamodules.listops.tokens import VOCABULARY
from zoo.errors import CheckpointError, ConfigurationError
from zoo.tasks import Classifier
from zoo.text.bytes import VOCAB_SIZE, ByteCodec

SMALL = {"d_model": 8, "num_heads": 2, "num_layers": 1, "ffn_hidden": 16, "heatmap_examples": 0}


def _classifier(vocab_size: int, num_classes: int, codec: object) -> Classifier:
    torch.manual_seed(0)
    task = Classifier(vocab_size=vocab_size, num_classes=num_classes, **SMALL)
    task.codec = codec
    return task.eval()


BYTES = ["<pad>", *(bytes([byte]).decode("utf-8", errors="backslashreplace") for byte in range(256))]


@pytest.mark.parametrize(
    ("vocab_size", "codec", "texts", "table"),
    [
        (VOCAB_SIZE, ByteCodec(16, ["neg", "pos"]), ["a film", "épique"], BYTES),
        (len(VOCABULARY), ListOpsCodec(), ["[MAX 2 9 ]", "[MIN 4 [SM 1 2 ] ]"], list(VOCABULARY)),
    ],
    ids=["bytes", "listops"],
)
def test_a_fixed_token_table_is_written_and_checked(vocab_size, codec, texts, table, tmp_path: Path) -> None:
    task = _classifier(vocab_size, len(codec.class_names), codec)
    task.save_pretrained(tmp_path / "model")
    saved = json.loads((tmp_path / "model" / "codec.json").read_text(encoding="utf-8"))
    assert saved["tokens"] == table and saved["tokenizer_files"] == {}
    loaded = zoo.from_pretrained(tmp_path / "model")
    assert loaded.predict(texts) == task.predict(texts)

    saved["tokens"][5] = "?"
    (tmp_path / "model" / "codec.json").write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(CheckpointError, match="tokens differ from the .* codec of this zoo \\(first at id 5\\)"):
        zoo.from_pretrained(tmp_path / "model")


def test_a_text_model_without_its_codec_is_refused(tmp_path: Path) -> None:
    task = _classifier(VOCAB_SIZE, 2, None)
    with pytest.raises(ConfigurationError, match="This 'classifier' model has no codec"):
        task.save_pretrained(tmp_path / "model")
    assert not (tmp_path / "model").exists() and not list(tmp_path.iterdir()), "nothing written, nothing left"


def test_the_card_of_a_model_saved_from_python_says_what_is_not_known(tmp_path: Path) -> None:
    _classifier(VOCAB_SIZE, 2, ByteCodec(16, ["neg", "pos"])).save_pretrained(tmp_path / "model")
    card = (tmp_path / "model" / "README.md").read_text(encoding="utf-8")
    assert "## Data\n\nNot recorded" in card and "## Metrics\n\nNot recorded" in card
    assert "## Training\n\nNot recorded: the model was saved from Python" in card
    assert "| `codec.json` | the `bytes` codec" in card and "tokenizer.json" not in card
