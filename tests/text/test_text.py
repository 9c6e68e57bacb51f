"""zoo.text and the shared data-module base: the word tokenizer on ``tokenizers`` reads exactly as
the regex tokenizer it replaced, codecs refuse version-1 state, tasks import no corpus machinery,
predict inputs are read in one place, loaders pin memory on a GPU only, and an empty fra-eng
split is one clear line."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch

from tests.helpers.fresh_import import fresh_import_facts
from zoo.commands import main
from zoo.datamodules import FraEngDataModule
from zoo.datamodules.fra_eng import split_of
from zoo.datamodules.loaders import GPU_WORKERS, loader_options
from zoo.errors import DataError
from zoo.provenance import RECORD_KEY
from zoo.tasks import Sentiment
from zoo.text.codecs import CODEC_VERSION, TextClassificationCodec
from zoo.text.collators import PadCollator, TranslationCollator
from zoo.text.datasets import Columns, TokenIds
from zoo.text.inputs import predict_inputs
from zoo.text.words import Vocabulary, tokenize

# -- the regex tokenizer of codec version 1, kept here as the independent formulation -----------

_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_ESCAPE = re.compile(r"-([lr][rsc]b)-|\\([/*])")
_BRACKETS = {"lrb": "(", "rrb": ")", "lsb": "[", "rsb": "]", "lcb": "{", "rcb": "}"}
_WORD = re.compile(r"n't\b|'(?:s|re|ve|ll|d|m)\b|\d+(?:[.,]\d+)+|\w+(?:-\w+)*|\.{2,}|-{2,}|`+|'{2,}|[^\w\s]")


def regex_tokenize(text: str) -> list[str]:
    text = _BREAK.sub(" ", text.lower().replace("\u2019", "'"))
    text = _ESCAPE.sub(lambda m: f" {_BRACKETS[m[1]]} " if m[1] else m[2], text)
    return _WORD.findall(re.sub(r"n't\b", " n't", text))


def test_word_tokens_are_those_of_the_regex_tokenizer_on_real_sst2_and_imdb(shared_data: Path) -> None:
    sst2 = [
        *pq.read_table(shared_data / "sst2" / "data" / "validation-00000-of-00001.parquet")
        .column("sentence")
        .to_pylist(),
        *pq.read_table(shared_data / "sst2" / "data" / "train-00000-of-00001.parquet")
        .column("sentence")
        .to_pylist()[:20_000],
    ]
    imdb = (
        pq.read_table(shared_data / "imdb" / "plain_text" / "test-00000-of-00001.parquet")
        .column("text")
        .to_pylist()[:500]
    )
    for text in [*sst2, *imdb, "Can\u2019t -LRB- 9.5\\/10 -RRB- ... well-made `` sci-fi ''<BR/>1,000 it's"]:
        assert tokenize(text) == regex_tokenize(text), text
    vocab = Vocabulary.build(map(regex_tokenize, sst2[:5000]))
    encoded = vocab.encode_texts(sst2[:2000], max_length=20)  # the library's own encoding, batched
    assert encoded == [vocab.encode(regex_tokenize(text))[:20] for text in sst2[:2000]]


def test_codec_version_1_state_is_refused_with_its_version() -> None:
    old = {
        "vocabulary": {"format": "attention-zoo vocabulary", "version": 1, "tokens": ["<pad>", "<unk>", "good"]},
        "max_length": 16,
        "class_names": ["negative", "positive"],
        "tokenizer_version": 1,
    }
    with pytest.raises(DataError, match=rf"codec version 1; this zoo has version {CODEC_VERSION}.*retrain"):
        TextClassificationCodec.from_state_dict(old)


def test_codecs_store_tokenizers_json_and_label_heatmaps() -> None:
    codec = TextClassificationCodec(Vocabulary(["good", "film"]), 8, ["negative", "positive"])
    state = codec.state_dict()
    assert state["tokenizer"].lstrip().startswith("{") and '"WordLevel"' in state["tokenizer"]
    restored = TextClassificationCodec.from_state_dict(state)
    batch = restored.batch(["A good film!", "unseen"])
    assert batch["tokens"].tolist() == [[1, 2, 3, 1], [1, 0, 0, 0]] and batch["valid_lens"].tolist() == [4, 1]
    assert restored.id_to_token([2, 3, 1]) == ["good", "film", "<unk>"]


def test_tasks_import_no_corpus_machinery() -> None:
    assert fresh_import_facts()["datasets_imported"] is False


# -- datasets and collators -----------------------------------------------------------------------


def test_columns_skip_absent_fields_and_collators_pad() -> None:
    rows = Columns(src=TokenIds([[5, 6, 7], [8]]), tgt=TokenIds([[9], [10, 11]]), sources=None)
    assert set(rows[0]) == {"src", "tgt"} and rows.sources is None and len(rows) == 2
    batch = TranslationCollator(pad_id=0, bos_id=2, eos_id=3)([rows[0], rows[1]])
    assert batch["src"].tolist() == [[5, 6, 7], [8, 0, 0]] and batch["src_lens"].tolist() == [3, 1]
    assert batch["tgt_in"].tolist() == [[2, 9, 0], [2, 10, 11]]
    assert batch["tgt_out"].tolist() == [[9, 3, 0], [10, 11, 3]] and batch["tgt_lens"].tolist() == [2, 3]
    texts = Columns(tokens=TokenIds([[4, 5], [6]]), labels=[1, 0], texts=["a b", "c"])
    batch = PadCollator(0)([texts[0], texts[1]])
    assert batch["tokens"].tolist() == [[4, 5], [6, 0]] and batch["labels"].tolist() == [1, 0]
    assert batch["texts"] == ["a b", "c"]


# -- predict inputs: one reader ---------------------------------------------------------------------


def test_predict_inputs_come_from_a_list_or_a_file(tmp_path: Path) -> None:
    lines = tmp_path / "inputs.txt"
    lines.write_text("one\n\n  \ntwo\n", encoding="utf-8")
    assert predict_inputs(None, str(lines)) == ["one", "two"]
    assert predict_inputs(["x", 1.5], None) == ["x", 1.5]
    with pytest.raises(DataError, match="not both"):
        predict_inputs(["x"], str(lines))
    with pytest.raises(DataError, match="Nothing to predict"):
        predict_inputs([], None)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        predict_inputs(None, str(tmp_path / "missing.txt"))


# -- loaders on a GPU ---------------------------------------------------------------------------------


def _trainer(device: str, devices: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device(device)), num_devices=devices, distributed_sampler_kwargs=None
    )


def test_loaders_pin_memory_and_start_workers_on_a_gpu_only(tmp_path: Path) -> None:
    assert loader_options(None, None) == {"num_workers": 0, "persistent_workers": False, "pin_memory": False}
    assert loader_options(_trainer("cpu"), None) == {"num_workers": 0, "persistent_workers": False, "pin_memory": False}
    gpu = loader_options(_trainer("cuda"), None)
    assert gpu["pin_memory"] and gpu["persistent_workers"] and 1 <= gpu["num_workers"] <= GPU_WORKERS
    assert loader_options(_trainer("cuda"), 0) == {"num_workers": 0, "persistent_workers": False, "pin_memory": True}

    corpus = tmp_path / "fra.txt"
    corpus.write_text("".join(f"Sentence {i}.\tPhrase {i}.\n" for i in range(300)), encoding="utf-8")
    dm = FraEngDataModule(path=str(corpus), cache_dir=str(tmp_path), vocab_size=60)
    dm.setup("validate")
    dm.trainer = _trainer("cuda")
    loader = dm.val_dataloader()
    assert loader.pin_memory and loader.num_workers == gpu["num_workers"]
    dm.trainer = _trainer("cpu")
    assert not dm.val_dataloader().pin_memory and dm.val_dataloader().num_workers == 0


# -- an empty fra-eng split ----------------------------------------------------------------------------


def test_a_corpus_too_small_for_the_split_is_one_line_through_the_cli(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    english = [f"Sentence number {i}." for i in range(400)]
    train_only = [s for s in english if split_of(s) == "train"][:30]
    corpus = tmp_path / "fra.txt"
    corpus.write_text("".join(f"{s}\tPhrase {i}.\n" for i, s in enumerate(train_only)), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--model",
                "transformer",
                "--data.path",
                str(corpus),
                "--data.vocab_size",
                "60",
                "--trainer.fast_dev_run",
                "true",
                "--trainer.enable_progress_bar",
                "false",
            ]
        )
    assert exit_info.value.code != 0
    err = capsys.readouterr().err
    assert "The validation split of" in err and "30 distinct English sentences" in err and "Traceback" not in err
    assert "zero-size array" not in err


def test_a_checkpoint_with_a_version_1_codec_is_one_clear_line(tmp_path: Path, capsys) -> None:
    task = Sentiment(vocab_size=3, d_model=8, num_heads=2, num_layers=1, ffn_hidden=8)
    old_codec = {
        "vocabulary": {"format": "attention-zoo vocabulary", "version": 1, "tokens": ["<pad>", "<unk>", "good"]},
        "max_length": 16,
        "class_names": ["negative", "positive"],
        "tokenizer_version": 1,
    }
    path = tmp_path / "old.ckpt"
    torch.save(
        {
            "state_dict": task.state_dict(),
            "hyper_parameters": dict(task.hparams),
            RECORD_KEY: {"model": "sentiment", "codec": old_codec},
        },
        path,
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--ckpt_path", str(path), "--data.predict_texts", '["good"]'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"codec version 1; this zoo has version {CODEC_VERSION}" in err and "Traceback" not in err
