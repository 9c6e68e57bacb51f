"""Tokenizer, vocabulary and the SST-2 / IMDB data modules, on the real corpora in ../shared/data.

Every data module here caches its vocabulary under a temporary directory and trains on at most
2,000 texts (``limit_train``), so the whole file runs in seconds. Tiny corpora written into
``tmp_path`` in the hub layout test the error paths and exactly which texts the vocabulary sees.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # before datasets is imported: never reach the hub

from collections import Counter

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from jsonargparse import ArgumentParser

from tests.helpers import PROJECT_ROOT, SHARED_DATA
from tests.helpers.cli import QUIET
from zoo.datamodules.registry import DATAMODULE_REGISTRY
from zoo.datamodules.text_classification import IMDBDataModule, SST2DataModule
from zoo.text.words import Vocabulary, tokenize

LIMIT = 2000


@pytest.fixture(scope="module")
def data_dir() -> Path:
    if not (SHARED_DATA / "sst2").is_dir() or not (SHARED_DATA / "imdb").is_dir():
        pytest.skip(f"the shared corpora are not at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def vocab_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One vocabulary cache for the module: data modules with the same settings share it."""
    return tmp_path_factory.mktemp("vocab-cache")


@pytest.fixture(scope="module")
def sst2(data_dir: Path, vocab_cache: Path) -> SST2DataModule:
    dm = SST2DataModule(path=str(data_dir / "sst2"), cache_dir=str(vocab_cache), limit_train=LIMIT)
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    return dm


@pytest.fixture(scope="module")
def imdb(data_dir: Path, vocab_cache: Path) -> IMDBDataModule:
    dm = IMDBDataModule(path=str(data_dir / "imdb"), cache_dir=str(vocab_cache), limit_train=LIMIT)
    dm.setup("fit")
    return dm


@pytest.fixture
def tiny_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the arrow copies that datasets makes of the tiny corpora out of the user's cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def write_sst2_layout(root: Path, splits: dict[str, list[tuple[str, int]]], text_column: str = "sentence") -> Path:
    """A tiny corpus in the hub layout of stanfordnlp/sst2: data/<split>-00000-of-00001.parquet."""
    (root / "data").mkdir(parents=True)
    for split, rows in splits.items():
        table = pa.table(
            {
                "idx": list(range(len(rows))),
                text_column: [text for text, _ in rows],
                "label": [label for _, label in rows],
            }
        )
        pq.write_table(table, root / "data" / f"{split}-00000-of-00001.parquet")
    return root


def check_batch(batch: dict, max_length: int) -> None:
    """Shapes, dtypes, padding and lengths every labelled batch must have."""
    tokens, valid_lens, labels = batch["tokens"], batch["valid_lens"], batch["labels"]
    assert tokens.dtype == valid_lens.dtype == labels.dtype == torch.long
    assert tokens.dim() == 2 and valid_lens.shape == labels.shape == (tokens.shape[0],)
    assert tokens.shape[1] == int(valid_lens.max()) <= max_length
    assert int(valid_lens.min()) >= 1
    positions = torch.arange(tokens.shape[1])
    padding = positions[None, :] >= valid_lens[:, None]
    assert (tokens[padding] == 0).all()  # padded with padding_idx
    assert (tokens[~padding] != 0).all()  # and <pad> never inside a text
    assert set(labels.tolist()) <= {0, 1}


# -- tokenizer ----------------------------------------------------------------------------------


def test_tokenize_splits_contractions_like_sst() -> None:
    assert tokenize("Don't") == ["do", "n't"]
    assert tokenize("It's what they're doing, we'll see; I'd've") == [
        "it",
        "'s",
        "what",
        "they",
        "'re",
        "doing",
        ",",
        "we",
        "'ll",
        "see",
        ";",
        "i",
        "'d",
        "'ve",
    ]
    assert tokenize("can\u2019t") == ["ca", "n't"]  # typographic apostrophe, SST's "ca n't"


def test_tokenize_lowercases_and_splits_punctuation() -> None:
    assert tokenize("A GREAT film... Really (9.5/10)!") == [
        "a",
        "great",
        "film",
        "...",
        "really",
        "(",
        "9.5",
        "/",
        "10",
        ")",
        "!",
    ]
    assert tokenize('well-made -- "sci-fi"') == ["well-made", "--", '"', "sci-fi", '"']


def test_tokenize_strips_html_line_breaks() -> None:
    assert tokenize("Bad.<br /><br />Very bad.<BR/>End<br>") == ["bad", ".", "very", "bad", ".", "end"]


def test_tokenize_leaves_sst_text_as_it_is(data_dir: Path) -> None:
    sentence = "it 's a charming and often affecting journey . does n't `` work '' ... "
    assert tokenize(sentence) == sentence.split()
    sentences = pq.read_table(data_dir / "sst2" / "data" / "validation-00000-of-00001.parquet")["sentence"].to_pylist()
    plain = [s for s in sentences if "-lrb-" not in s and "\\" not in s]
    unchanged = sum(tokenize(s) == s.split() for s in plain)
    assert unchanged / len(plain) > 0.97  # the rest: "mr." -> "mr" "." and "'70s" -> "'" "70s"


def test_tokenize_undoes_treebank_escapes() -> None:
    # SST-2 validation writes "-lrb-" and "\/" where its training split writes "(" and "/".
    assert tokenize("-lrb- funny \\/ sad -rrb- -lsb-x-rsb-") == ["(", "funny", "/", "sad", ")", "[", "x", "]"]


# -- vocabulary ---------------------------------------------------------------------------------


def test_vocabulary_orders_by_frequency_then_alphabetically() -> None:
    texts = [["b", "a", "c", "c"], ["c", "b", "d"]]
    assert Vocabulary.build(texts).tokens == ["<pad>", "<unk>", "c", "b", "a", "d"]
    assert Vocabulary.build(texts, min_freq=2).tokens == ["<pad>", "<unk>", "c", "b"]
    assert Vocabulary.build(texts, max_size=3).tokens == ["<pad>", "<unk>", "c"]
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.build(texts, max_size=2)


def test_vocabulary_encode_decode() -> None:
    vocab = Vocabulary(["good", "film"])
    assert (vocab.pad_id, vocab.unk_id, len(vocab)) == (0, 1, 4)
    assert vocab.encode(["good", "unseen", "film"]) == [2, 1, 3]
    assert vocab.decode([2, 1, 3, 0]) == ["good", "<unk>", "film", "<pad>"]
    with pytest.raises(IndexError, match="outside"):
        vocab.decode([4])
    with pytest.raises(ValueError, match="unique"):
        Vocabulary(["good", "good"])


def test_vocabulary_json_round_trip() -> None:
    vocab = Vocabulary(["é", "good", "n't"])
    assert Vocabulary.from_json(vocab.to_json()) == vocab


def test_vocabulary_json_rejects_other_json() -> None:
    with pytest.raises(ValueError, match="not an attention-zoo vocabulary"):
        Vocabulary.from_json(json.dumps({"tokens": ["a"]}))
    with pytest.raises(ValueError, match="not an attention-zoo vocabulary"):
        Vocabulary.from_json("{not json")


# -- which texts the vocabulary sees -------------------------------------------------------------


def test_sst2_vocabulary_comes_from_train_only(tmp_path: Path, tiny_hf_cache: None) -> None:
    root = write_sst2_layout(
        tmp_path / "sst2",
        {
            "train": [("a good movie", 1), ("a bad movie", 0)],
            "validation": [("a zebra movie", 1)],
        },
    )
    dm = SST2DataModule(path=str(root), cache_dir=str(tmp_path / "cache"), min_freq=1)
    assert "good" in dm.vocab and "zebra" not in dm.vocab
    dm.setup("validate")
    assert dm.vocab.decode(dm.val_dataloader().dataset.tokens[0].tolist()) == ["a", "<unk>", "movie"]


def test_imdb_vocabulary_excludes_the_validation_part(tmp_path: Path, tiny_hf_cache: None) -> None:
    rows = [(f"review{i:02d} film", i % 2) for i in range(20)]
    root = tmp_path / "imdb"
    (root / "plain_text").mkdir(parents=True)
    for split in ("train", "test"):
        table = pa.table({"text": [t for t, _ in rows], "label": [label for _, label in rows]})
        pq.write_table(table, root / "plain_text" / f"{split}-00000-of-00001.parquet")
    dm = IMDBDataModule(path=str(root), cache_dir=str(tmp_path / "cache"), min_freq=1, seed=3)
    kept, held_out = (dm.split(split).texts for split in ("train", "validation"))
    assert len(held_out) == 2 and len(kept) == 18
    assert all(text.split()[0] in dm.vocab for text in kept)
    assert not any(text.split()[0] in dm.vocab for text in held_out)


# -- batches from the real corpora ---------------------------------------------------------------


def test_sst2_batches(sst2: SST2DataModule) -> None:
    assert len(sst2.train_dataloader().dataset) == LIMIT
    for loader in (sst2.train_dataloader(), sst2.val_dataloader()):
        check_batch(next(iter(loader)), sst2.max_length)


def test_sst2_test_stage_uses_the_validation_split(sst2: SST2DataModule) -> None:
    test, validation = sst2.test_dataloader().dataset, sst2.val_dataloader().dataset
    assert len(test) == len(validation) == 872
    assert test.labels == validation.labels


def test_imdb_batches_are_truncated_to_max_length(imdb: IMDBDataModule, data_dir: Path, vocab_cache: Path) -> None:
    check_batch(next(iter(imdb.train_dataloader())), 512)
    short = IMDBDataModule(path=str(data_dir / "imdb"), cache_dir=str(vocab_cache), limit_train=LIMIT, max_length=16)
    assert short.vocab_file == imdb.vocab_file  # truncation does not change the vocabulary
    batch = short.encode_texts(["word " * 100, "two words"])
    assert batch["tokens"].shape == (2, 16)
    assert batch["valid_lens"].tolist() == [16, 2]


def test_train_loader_buckets_shuffles_per_epoch_and_collate_pickles(sst2: SST2DataModule) -> None:
    loader = sst2.train_dataloader()
    sampler = loader.batch_sampler
    first = [batch["labels"] for batch in loader]  # an epoch's order is reproducible
    assert all(
        torch.equal(a, b) for a, b in zip(first, (batch["labels"] for batch in loader))
    )  # same epoch, same batches
    sampler.set_epoch(1)
    assert not all(torch.equal(a, b) for a, b in zip(first, (batch["labels"] for batch in loader)))
    # batches of similar length: far less padding than random batches of the same texts
    batches = list(loader)
    padded = sum(batch["tokens"].numel() for batch in batches)
    real = sum(int(batch["valid_lens"].sum()) for batch in batches)
    lengths = torch.cat([batch["valid_lens"] for batch in batches])
    random_padded = sum(
        int(chunk.max()) * len(chunk) for chunk in lengths[torch.randperm(len(lengths))].split(sst2.batch_size)
    )
    assert padded - real < 0.5 * (random_padded - real)
    collate = pickle.loads(pickle.dumps(loader.collate_fn))
    assert collate([loader.dataset[0]])["tokens"].shape[0] == 1


def test_imdb_validation_is_a_seeded_tenth_of_train(imdb: IMDBDataModule, data_dir: Path, vocab_cache: Path) -> None:
    unlimited = IMDBDataModule(path=str(data_dir / "imdb"), cache_dir=str(vocab_cache))
    kept, held_out = (unlimited.split(split).texts for split in ("train", "validation"))
    assert len(held_out) == 2_500 and len(kept) == 22_500
    assert Counter(kept) + Counter(held_out) == Counter(
        unlimited.texts.read("train")[unlimited.corpus.text_column][:]
    )  # disjoint, all
    again = IMDBDataModule(path=str(data_dir / "imdb"), cache_dir=str(vocab_cache))
    assert again.split("validation").texts == held_out
    other = IMDBDataModule(path=str(data_dir / "imdb"), cache_dir=str(vocab_cache), seed=1)
    assert other.split("validation").texts != held_out

    validation = imdb.val_dataloader().dataset
    assert len(validation) == 2_500
    again = IMDBDataModule(path=str(data_dir / "imdb"), cache_dir=str(vocab_cache), limit_train=LIMIT)
    again.setup("validate")
    assert again.val_dataloader().dataset.labels == validation.labels
    assert all(torch.equal(again.val_dataloader().dataset.tokens[i], validation.tokens[i]) for i in range(50))


# -- the vocabulary cache and the sizes the model needs -------------------------------------------


def test_properties_are_available_right_after_construction(data_dir: Path, tmp_path: Path) -> None:
    dm = SST2DataModule(path=str(data_dir / "sst2"), cache_dir=str(tmp_path), limit_train=LIMIT)
    assert dm.vocab_size > 1_000 and dm.vocab_file.is_file()
    assert (dm.padding_idx, dm.num_classes, dm.max_length) == (0, 2, 66)
    assert dm.class_names == ["negative", "positive"]
    assert IMDBDataModule(path=str(data_dir / "imdb"), cache_dir=str(tmp_path)).max_length == 512


def test_cached_vocabulary_is_reused(
    sst2: SST2DataModule, data_dir: Path, vocab_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = sst2.vocab_file
    mtime = file.stat().st_mtime_ns

    def no_rebuild(*args: object, **kwargs: object) -> Vocabulary:
        raise AssertionError("the cached vocabulary should have been reused")

    monkeypatch.setattr(Vocabulary, "build", no_rebuild)
    again = SST2DataModule(path=str(data_dir / "sst2"), cache_dir=str(vocab_cache), limit_train=LIMIT, batch_size=8)
    again.prepare_data()
    assert again.vocab == sst2.vocab
    assert file.stat().st_mtime_ns == mtime
    other = SST2DataModule(path=str(data_dir / "sst2"), cache_dir=str(vocab_cache), limit_train=LIMIT, min_freq=1)
    assert other.vocab_file != file  # other settings, another cache entry


def test_zoo_cache_dir_variable_sets_the_cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path))
    assert SST2DataModule().cache_dir == tmp_path / "sst2"
    assert IMDBDataModule(cache_dir=str(tmp_path / "mine")).cache_dir == tmp_path / "mine"


# -- errors ---------------------------------------------------------------------------------------


def test_labels_outside_zero_one_are_refused(tmp_path: Path, tiny_hf_cache: None) -> None:
    root = write_sst2_layout(
        tmp_path / "sst2",
        {
            "train": [("good", 1), ("unlabelled", -1)],
            "validation": [("fine", 1)],
        },
    )
    dm = SST2DataModule(path=str(root), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"'train' split .* labels \[-1\] outside \{0, 1\}.*relabel"):
        dm.prepare_data()


def test_missing_text_column_is_refused(tmp_path: Path, tiny_hf_cache: None) -> None:
    root = write_sst2_layout(
        tmp_path / "sst2", {"train": [("good", 1)], "validation": [("fine", 1)]}, text_column="text"
    )
    with pytest.raises(ValueError, match="no column \\['sentence'\\]"):
        SST2DataModule(path=str(root), cache_dir=str(tmp_path / "cache")).prepare_data()


def test_missing_or_unreadable_path_is_refused(tmp_path: Path, tiny_hf_cache: None) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=f"{missing}.*does not exist.*data/train-00000-of-00001.parquet"):
        SST2DataModule(path=str(missing))
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a corpus")
    with pytest.raises(ValueError, match="not a directory"):
        IMDBDataModule(path=str(a_file))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="Could not read the imdb data.*plain_text/train"):
        IMDBDataModule(path=str(empty), cache_dir=str(tmp_path / "cache")).prepare_data()


def test_offline_the_command_line_names_data_path(tmp_path: Path) -> None:
    """``python -m zoo fit --model sentiment`` offline, as CI runs, with nothing cached: one line
    that names the cause and the local copy to give, not the cache lookup that failed after it."""
    env = os.environ | {
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
        "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
        "ZOO_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    command = [sys.executable, "-m", "zoo", "fit", "--model", "sentiment", *QUIET]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: Could not download 'stanfordnlp/sst2' from the Hugging Face Hub (no network, or offline mode): give a "
        "local copy with --data.path DIR (the hub layout of stanfordnlp/sst2: <path>/data/train-00000-of-00001.parquet "
        "and <path>/data/validation-00000-of-00001.parquet with columns 'sentence' (str) and 'label' (0 or 1))."
    ]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        SST2DataModule(batch_size=0)
    with pytest.raises(ValueError, match="limit_train"):
        IMDBDataModule(limit_train=0)


# -- raw text: encode_texts and the predict stage -------------------------------------------------


def test_encode_texts(sst2: SST2DataModule) -> None:
    batch = sst2.encode_texts(["A charming, funny film.", "<br />"])
    assert set(batch) == {"tokens", "valid_lens"}
    assert batch["tokens"].dtype == torch.long and batch["tokens"].shape == (2, 6)
    assert batch["valid_lens"].tolist() == [6, 1]  # nothing left after tokenizing: one <unk>
    assert batch["tokens"][1].tolist() == [1, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="empty text"):
        sst2.encode_texts(["fine", "   "])
    with pytest.raises(TypeError, match="list"):
        sst2.encode_texts("one string")


def test_predict_dataloader(sst2: SST2DataModule, data_dir: Path, vocab_cache: Path, tmp_path: Path) -> None:
    def module(**kwargs: object) -> SST2DataModule:
        return SST2DataModule(path=str(data_dir / "sst2"), cache_dir=str(vocab_cache), limit_train=LIMIT, **kwargs)

    batch = next(iter(module(predict_texts=["a great movie", "dull"]).predict_dataloader()))
    assert batch["texts"] == ["a great movie", "dull"] and "labels" not in batch
    assert batch["tokens"].shape == (2, 3) and batch["valid_lens"].tolist() == [3, 1]

    lines = tmp_path / "reviews.txt"
    lines.write_text("first review\n\nsecond one\n", encoding="utf-8")
    assert next(iter(module(predict_file=str(lines)).predict_dataloader()))["texts"] == ["first review", "second one"]

    with pytest.raises(ValueError, match="--data.predict_texts .* --data.predict_file"):
        sst2.predict_dataloader()
    with pytest.raises(ValueError, match="empty text"):
        module(predict_texts=["good", ""]).predict_dataloader()


# -- registry and LightningCLI ---------------------------------------------------------------------


def test_registered_and_exposed_to_lightning_cli() -> None:
    assert DATAMODULE_REGISTRY.get("sst2") is SST2DataModule
    assert DATAMODULE_REGISTRY.get("imdb") is IMDBDataModule
    for cls, max_length in ((SST2DataModule, 66), (IMDBDataModule, 512)):
        parser = ArgumentParser()
        parser.add_class_arguments(cls, "data")
        config = parser.parse_args(["--data.limit_train", "10", "--data.predict_texts", '["fine"]'])
        assert config.data.max_length == max_length
        assert (config.data.limit_train, config.data.predict_texts, config.data.min_freq) == (10, ["fine"], 2)
