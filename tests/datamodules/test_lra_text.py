"""The LRA Text task: IMDB-layout reviews as bytes, cut or padded to one length, no vocabulary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import PROJECT_ROOT
from zoo.datamodules import LRATextDataModule
from zoo.tasks import Classifier

ROOT = PROJECT_ROOT


def write_imdb_layout(root: Path) -> Path:
    """20 training and 6 test reviews in the hub layout of stanfordnlp/imdb."""
    (root / "plain_text").mkdir(parents=True)
    for split, count in (("train", 20), ("test", 6)):
        texts = [
            f"Review {i}: {'great' if i % 2 else 'awful'} film.<br />Déjà vu. " * (1 + i % 4) for i in range(count)
        ]
        pq.write_table(
            pa.table({"text": texts, "label": [i % 2 for i in range(count)]}),
            root / "plain_text" / f"{split}-00000-of-00001.parquet",
        )
    return root


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return write_imdb_layout(tmp_path / "imdb")


def test_reviews_become_bytes_cut_and_padded_to_max_length(corpus: Path, tmp_path: Path) -> None:
    module = LRATextDataModule(path=str(corpus), max_length=40, batch_size=4, cache_dir=str(tmp_path / "cache"))
    module.prepare_data()
    module.setup("fit")
    assert (module.vocab_size, module.padding_idx, module.num_classes) == (257, 0, 2)
    text = "Déjà vu"
    ids = module.codec.encode(text).tolist()
    assert ids == [b + 1 for b in text.encode("utf-8")]  # é is two bytes
    assert "".join(module.codec.id_to_token(module.codec.encode("plain ascii").tolist())) == "plain ascii"
    batch = module.codec.batch(["short", "x" * 100])
    assert batch["tokens"].shape == (2, 40) and batch["valid_lens"].tolist() == [5, 40]
    assert batch["tokens"][0, 5:].eq(0).all()
    for loader in (module.train_dataloader(), module.val_dataloader()):
        for batch in loader:
            assert batch["tokens"].shape[1] == 40 and batch["valid_lens"].max() <= 40
            assert set(batch["labels"].tolist()) <= {0, 1}
    train = module.split("train")
    first = module._datasets["train"].tokens[0]
    assert first.tolist() == [b + 1 for b in train.texts[0].encode("utf-8")[:40]]
    assert not (tmp_path / "cache").exists()  # bytes need no vocabulary


@pytest.mark.slow  # a CLI fit; the classifier's CLI fit on ListOps stays in the default run
def test_cli_fits_on_bytes(corpus: Path, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "zoo",
        "fit",
        "--model",
        "classifier",
        "--config",
        "configs/classifier_lra_text.yaml",
        "--config",
        "configs/classifier_lra_text_cpu.yaml",
        f"--data.path={corpus}",
        "--data.max_length=64",
        "--model.d_model=16",
        "--model.num_heads=2",
        "--model.num_layers=1",
        "--model.ffn_hidden=32",
        "--trainer.max_steps=2",
        "--trainer.limit_val_batches=1",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
    ]
    env = os.environ | {
        "PYTHONPATH": str(ROOT),
        "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"),
        "HF_DATASETS_OFFLINE": "1",
    }
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    config = (tmp_path / "runs" / "classifier" / "version_0" / "config.yaml").read_text()
    assert "max_length: 64" in config and "LRATextDataModule" in config and "pooling: cls" in config


def test_predict_inputs_as_bytes_and_the_task_adopts_the_byte_codec(corpus: Path, tmp_path: Path) -> None:
    module = LRATextDataModule(
        path=str(corpus), max_length=16, cache_dir=str(tmp_path / "cache"), predict_texts=["Déjà vu", "fine"]
    )
    batch = next(iter(module.predict_dataloader()))
    assert batch["texts"] == ["Déjà vu", "fine"] and batch["tokens"].shape == (2, 16)
    assert batch["valid_lens"].tolist() == [9, 4] and module.codec.decode(batch["tokens"][0]) == "Déjà vu"
    task = Classifier(vocab_size=module.vocab_size, d_model=8, num_heads=2, num_layers=1, ffn_hidden=8)
    task._trainer = SimpleNamespace(datamodule=module)
    task.setup("predict")
    assert task.codec is module.codec and task.codec.class_names == ["negative", "positive"]
