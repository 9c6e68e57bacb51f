"""The language-modelling data modules, ``text`` and ``shakespeare``: nanoGPT's protocol on Tiny
Shakespeare (../shared/data), windows that train from a seed and evaluate every target once on
one process or several, the sources (file, folder, Hugging Face data set), and every bad input's
one line."""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from jsonargparse import ArgumentParser

from zoo.datamodules.download import ChecksumError, DownloadError
from zoo.datamodules.registry import DATAMODULE_REGISTRY
from zoo.datamodules.shakespeare import TINY_SHAKESPEARE_SHA256, ShakespeareDataModule
from zoo.datamodules.text import TextDataModule
from zoo.datamodules.text_corpus import TextCorpus
from zoo.datamodules.windows import evaluation_windows, random_windows
from zoo.errors import DataError
from zoo.text.language import BPECodec, CharCodec

TRAIN_CHARS = 1_003_854  # nanoGPT's prepare.py: "train has 1,003,854 tokens"
VAL_CHARS = 111_540


def _trainer(processes: int, rank: int) -> SimpleNamespace:
    """What the loaders read from a Trainer: where this process sits among the others, on a CPU."""
    return SimpleNamespace(
        distributed_sampler_kwargs={"num_replicas": processes, "rank": rank},
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
        num_devices=processes,
    )


def _tokens(loader) -> list[torch.Tensor]:
    return [batch["tokens"] for batch in loader]


@pytest.fixture
def input_txt(shared_data: Path) -> Path:
    return shared_data / "tinyshakespeare" / "input.txt"


@pytest.fixture
def shakespeare(input_txt: Path, tmp_path: Path) -> ShakespeareDataModule:
    return ShakespeareDataModule(path=str(input_txt), cache_dir=str(tmp_path / "cache"))


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


# -- nanoGPT's protocol on Tiny Shakespeare --------------------------------------------------------


def test_shakespeare_follows_nanogpts_char_protocol(shakespeare: ShakespeareDataModule, input_txt: Path) -> None:
    assert hashlib.sha256(input_txt.read_bytes()).hexdigest() == TINY_SHAKESPEARE_SHA256
    text = input_txt.read_text(encoding="utf-8")
    assert shakespeare.vocab_size == 65 and shakespeare.block_size == 256  # right after construction
    assert isinstance(shakespeare.codec, CharCodec) and shakespeare.codec.chars == "".join(sorted(set(text)))
    shakespeare.setup("fit")
    shakespeare.setup("test")
    train, validation = shakespeare._dataset("train", "fit"), shakespeare._dataset("validation", "validate")
    assert (len(train), len(validation)) == (TRAIN_CHARS, VAL_CHARS) and TRAIN_CHARS == int(len(text) * 0.9)
    assert shakespeare.codec.decode(train) == text[:TRAIN_CHARS]
    assert shakespeare.codec.decode(validation) == text[TRAIN_CHARS:]
    assert shakespeare._dataset("test", "test") is validation  # no test split of its own: validation
    assert train.dtype == torch.uint8  # 65 ids: one byte each


def test_the_codec_is_cached_and_read_back_without_the_corpus(
    shakespeare: ShakespeareDataModule, input_txt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chars = shakespeare.codec.chars  # type: ignore[attr-defined]
    assert json.loads(shakespeare.codec_file.read_text())["chars"] == chars

    def unread(self: TextCorpus) -> None:
        raise AssertionError("the corpus was read although its codec is cached")

    monkeypatch.setattr(TextCorpus, "splits", unread)
    again = ShakespeareDataModule(path=str(input_txt), cache_dir=str(shakespeare.cache_dir))
    assert again.codec.chars == chars and again.vocab_size == 65  # type: ignore[attr-defined]


def test_the_public_copy_is_downloaded_verified_and_cached(input_txt: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ShakespeareDataModule, "download_url", input_txt.as_uri())  # file://, no network needed
    module = ShakespeareDataModule(cache_dir=str(tmp_path / "cache"))
    assert module.vocab_size == 65
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith("codec-")) == ["input.txt"]
    _write(tmp_path / "changed" / "input.txt", input_txt.read_bytes()[:-1])
    monkeypatch.setattr(ShakespeareDataModule, "download_url", (tmp_path / "changed" / "input.txt").as_uri())
    with pytest.raises(ChecksumError, match="sha256"):
        ShakespeareDataModule(cache_dir=str(tmp_path / "other")).vocab_size  # noqa: B018
    assert list((tmp_path / "other").iterdir()) == []  # nothing half written


# -- windows ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [1, 2])
def test_validation_windows_cover_every_target_once(shakespeare: ShakespeareDataModule, processes: int) -> None:
    shakespeare.setup("validate")
    validation = shakespeare._dataset("validation", "validate")
    single = _tokens(shakespeare.val_dataloader())
    assert [tuple(t.shape) for t in single] == [(64, 257)] * 6 + [(51, 257), (1, 180)]  # 435 windows, then 179 targets
    assert sum(t[:, 1:].numel() for t in single) == VAL_CHARS - 1  # every id but the first is a target, once
    rows = [row for batch in single for row in batch]
    assert torch.equal(torch.cat([rows[0][:1], *(row[1:] for row in rows)]), validation.long())  # in order
    shares = []
    for rank in range(processes):
        shakespeare.trainer = _trainer(processes, rank)  # type: ignore[assignment]
        shares.append(_tokens(shakespeare.val_dataloader()))
    merged = [shares[k % processes][k // processes] for k in range(sum(map(len, shares)))]
    assert len(merged) == len(single) and all(
        torch.equal(a, b) for a, b in zip(merged, single)
    )  # no repeat, none missing


@pytest.mark.parametrize(
    ("size", "block_size", "batch_size", "processes"),
    [(1000, 16, 8, 1), (1000, 16, 8, 3), (17, 16, 4, 1), (18, 16, 4, 2), (97, 8, 50, 4), (33, 8, 1, 2)],
)
def test_evaluation_windows_of_positions(size: int, block_size: int, batch_size: int, processes: int) -> None:
    """With ids that are their own positions, the targets of all shares are each position once (the first excepted)."""
    shares = [
        _tokens(evaluation_windows(torch.arange(size), block_size, batch_size, _trainer(processes, rank)))
        for rank in range(processes)
    ]
    assert all(shares)  # every process has a batch, or the others would wait for it
    windows = [row for share in shares for batch in share for row in batch]
    assert all(torch.equal(w, torch.arange(int(w[0]), int(w[0]) + len(w))) for w in windows)  # consecutive ids
    assert sorted(int(i) for w in windows for i in w[1:]) == list(range(1, size))
    assert all(len(w) == block_size + 1 for w in windows if int(w[-1]) != size - 1)  # only the last may be short


def test_training_windows_are_a_function_of_seed_and_epoch(input_txt: Path, tmp_path: Path) -> None:
    def epoch(seed: int, number: int, batches: int = 3) -> list[torch.Tensor]:
        module = ShakespeareDataModule(
            path=str(input_txt), cache_dir=str(tmp_path), seed=seed, batch_size=8, train_windows=8 * batches
        )
        module.setup("fit")
        loader = module.train_dataloader()
        loader.sampler.set_epoch(number)  # as Lightning does
        return _tokens(loader)

    first = epoch(seed=1, number=0)
    assert len(first) == 3 and all(t.shape == (8, 257) for t in first)
    assert all(torch.equal(a, b) for a, b in zip(first, epoch(seed=1, number=0)))
    assert not torch.equal(first[0], epoch(seed=2, number=0)[0])
    assert not torch.equal(first[0], epoch(seed=1, number=1)[0])
    train = input_txt.read_text(encoding="utf-8")[:TRAIN_CHARS]
    codec = ShakespeareDataModule(path=str(input_txt), cache_dir=str(tmp_path)).codec
    assert all(codec.decode(row) in train for row in first[0])  # consecutive characters of the training split


def test_each_process_draws_its_own_share_of_the_epochs_windows() -> None:
    ids = torch.arange(10_000)

    def offsets(processes: int, rank: int, windows: int) -> list[list[int]]:
        loader = random_windows(ids, 16, 4, windows, seed=3, trainer=_trainer(processes, rank))
        loader.sampler.set_epoch(5)
        batches = _tokens(loader)
        assert all(torch.equal(row, torch.arange(int(row[0]), int(row[0]) + 17)) for b in batches for row in b)
        assert all(0 <= int(b[:, 0].min()) and int(b[:, 0].max()) < 10_000 - 16 for b in batches)
        return [b[:, 0].tolist() for b in batches]

    single = [o for batch in offsets(1, 0, 24) for o in batch]
    shares = [[o for batch in offsets(2, rank, 24) for o in batch] for rank in range(2)]
    assert shares[0] == single[0::2] and shares[1] == single[1::2]  # the same draws, dealt out by rank
    assert [len(offsets(3, rank, 25)) for rank in range(3)] == [3, 3, 3]  # whole batches, as many on each


def test_a_resumed_loader_serves_the_rest_of_the_interrupted_epoch(input_txt: Path, tmp_path: Path) -> None:
    def loader():
        module = ShakespeareDataModule(
            path=str(input_txt), cache_dir=str(tmp_path), seed=7, batch_size=4, block_size=32, train_windows=40
        )
        module.setup("fit")
        return module.train_dataloader()

    whole = loader()
    whole.sampler.set_epoch(2)
    uninterrupted = _tokens(whole)
    interrupted = loader()
    interrupted.sampler.set_epoch(2)
    served = [batch for _, batch in zip(range(4), interrupted)]
    assert all(torch.equal(a["tokens"], b) for a, b in zip(served, uninterrupted))
    resumed = loader()
    resumed.load_state_dict(interrupted.state_dict())
    resumed.sampler.set_epoch(2)
    rest = _tokens(resumed)
    assert len(rest) == 6 and all(torch.equal(a, b) for a, b in zip(rest, uninterrupted[4:]))


def test_lightning_leaves_the_samplers_alone(shakespeare: ShakespeareDataModule) -> None:
    shakespeare.setup("fit")
    shakespeare.trainer = _trainer(2, 1)  # type: ignore[assignment]
    for loader in (shakespeare.train_dataloader(), shakespeare.val_dataloader()):
        assert isinstance(loader.sampler, torch.utils.data.distributed.DistributedSampler)


# -- other tokenizers and sources ------------------------------------------------------------------


def test_bpe_on_shakespeare_round_trips_each_split(input_txt: Path, tmp_path: Path) -> None:
    module = ShakespeareDataModule(path=str(input_txt), cache_dir=str(tmp_path), tokenizer="bpe", bpe_vocab_size=512)
    assert isinstance(module.codec, BPECodec) and module.vocab_size == 512 and module.codec.unit == "token"
    module.setup("fit")
    text = input_txt.read_text(encoding="utf-8")
    assert module.codec.decode(module._dataset("train", "fit")) == text[:TRAIN_CHARS]
    assert module.codec.decode(module._dataset("validation", "validate")) == text[TRAIN_CHARS:]
    assert len(module._dataset("train", "fit")) < 0.6 * TRAIN_CHARS  # merges: fewer tokens than characters


def test_bpe_learns_from_the_training_split_only(tmp_path: Path) -> None:
    train, held_out = "the quick brown fox jumps over the lazy dog\n" * 180, "zyzzyva quaggas\n" * 55  # 90% + 10%
    corpus = _write(tmp_path / "corpus.txt", train + held_out)
    module = TextDataModule(path=str(corpus), tokenizer="bpe", bpe_vocab_size=300, cache_dir=str(tmp_path / "c"))
    splits = module.corpus.splits()
    assert (splits.train, splits.validation) == (train, held_out)
    tokens = module.codec.id_to_token(range(module.vocab_size))
    assert " quick" in tokens and " lazy" in tokens  # training words are merged
    assert not any("zz" in t or "agg" in t for t in tokens)  # held-out words never are
    assert module.codec.decode(module.codec.encode(splits.validation)) == splits.validation  # type: ignore[arg-type]


def test_bytes_read_any_file_and_split_between_bytes(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    module = TextDataModule(path=str(_write(tmp_path / "raw.txt", data)), tokenizer="byte", block_size=8)
    assert module.vocab_size == 256 and module.codec.unit == "byte"
    module.setup("fit")
    assert module._dataset("train", "fit").tolist() == list(data[:921])  # int(1024 * 0.9)
    assert module._dataset("validation", "validate").tolist() == list(data[921:])


def test_a_folder_reads_its_txt_files_in_sorted_order_joined_by_newlines(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    _write(folder / "b.txt", "second file\n")
    _write(folder / "a.txt", "first file")
    _write(folder / "sub" / "c.txt", "third file")
    _write(folder / "notes.md", "not text to model")
    module = TextDataModule(path=str(folder), block_size=4, val_fraction=0.25, cache_dir=str(tmp_path / "c"))
    splits = module.corpus.splits()
    assert splits.train + splits.validation == "first file\nsecond file\n\nthird file"  # type: ignore[operator]
    assert module.codec.chars == "".join(sorted(set("first file\nsecond file\n\nthird file")))  # type: ignore[attr-defined]


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the arrow copies that datasets makes of the tiny data sets out of the user's cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def _jsonl(path: Path, rows: list[str], column: str = "text") -> None:
    _write(path, "".join(json.dumps({column: row, "id": i}) + "\n" for i, row in enumerate(rows)))


def test_a_hugging_face_data_set_keeps_its_own_splits(tmp_path: Path, hf_cache: None) -> None:
    root = tmp_path / "wiki"
    _jsonl(root / "train.jsonl", ["Alpha beta gamma.", "Delta epsilon."] * 20, column="body")
    _jsonl(root / "validation.jsonl", ["Zeta eta.", "Theta!"], column="body")
    module = TextDataModule(dataset=str(root), column="body", block_size=4, cache_dir=str(tmp_path / "c"))
    splits = module.corpus.splits()
    assert splits.train == "\n".join(["Alpha beta gamma.", "Delta epsilon."] * 20)
    assert (splits.validation, splits.test_source) == ("Zeta eta.\nTheta!", "validation")
    assert "Z" in module.codec.chars and "!" in module.codec.chars  # type: ignore[attr-defined]  # the whole corpus
    module.setup(None)
    assert module.codec.decode(module._dataset("test", "test")) == "Zeta eta.\nTheta!"
    _jsonl(root / "test.jsonl", ["Iota kappa."], column="body")
    with_test = TextDataModule(dataset=str(root), column="body", block_size=4, cache_dir=str(tmp_path / "d"))
    assert with_test.corpus.splits().test == "Iota kappa." and with_test.corpus.splits().test_source == "test"
    with pytest.raises(DataError, match=r"has no column 'text' \(columns: \['body', 'id'\]\): name the text column"):
        TextDataModule(dataset=str(root), block_size=4, cache_dir=str(tmp_path / "e")).vocab_size  # noqa: B018


def test_predict_items_hold_each_prompts_ids_and_text(shakespeare: ShakespeareDataModule) -> None:
    shakespeare.predict_texts = ["ROMEO:", "To be, or not"]
    batches = list(shakespeare.predict_dataloader())
    assert [b["text"] for b in batches] == [["ROMEO:"], ["To be, or not"]]
    assert [shakespeare.codec.decode(b["tokens"][0]) for b in batches] == ["ROMEO:", "To be, or not"]
    shakespeare.predict_texts = ["fine", "Whence 🦜"]
    with pytest.raises(DataError, match=r"^predict_texts\[1\]: The text holds characters .* '🦜'; remove or replace"):
        shakespeare.predict_dataloader()


def test_the_arguments_on_the_command_line() -> None:
    assert DATAMODULE_REGISTRY.get("text") is TextDataModule
    assert DATAMODULE_REGISTRY.get("shakespeare") is ShakespeareDataModule
    for cls in (TextDataModule, ShakespeareDataModule):
        parser = ArgumentParser()
        parser.add_class_arguments(cls, "data")
        config = parser.parse_args(["--data.tokenizer", "bpe"]).data
        assert (config.tokenizer, config.block_size, config.val_fraction, config.batch_size) == ("bpe", 256, 0.1, 64)
        assert not {"max_length", "limit_train"} & set(vars(config))
        assert ({"dataset", "column"} <= set(vars(config))) is (cls is TextDataModule)
        with pytest.raises(SystemExit):
            parser.parse_args(["--data.tokenizer", "words"])


# -- bad input, one line each ----------------------------------------------------------------------


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_an_empty_corpus_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        TextDataModule(path=str(_write(tmp_path / "empty.txt", "")), cache_dir=str(tmp_path)).vocab_size  # noqa: B018
    assert _one_line(info) == (
        f"{tmp_path / 'empty.txt'} holds no text (only whitespace, or nothing): give a non-empty text file or folder "
        "of .txt files with --data.path."
    )
    (tmp_path / "folder").mkdir()
    _write(tmp_path / "folder" / "README.md", "no text files here")
    with pytest.raises(DataError) as info:
        TextDataModule(path=str(tmp_path / "folder"), cache_dir=str(tmp_path)).vocab_size  # noqa: B018
    assert _one_line(info) == (
        f"The folder {tmp_path / 'folder'} holds no .txt file: give a UTF-8 text file or a folder of .txt files "
        "with --data.path."
    )


def test_a_file_that_is_not_utf8_suggests_bytes(tmp_path: Path) -> None:
    latin1 = _write(tmp_path / "latin1.txt", "Ça va très bien.\n".encode("latin-1") * 10)
    for tokenizer in ("char", "bpe"):
        with pytest.raises(DataError) as info:
            TextDataModule(path=str(latin1), tokenizer=tokenizer, cache_dir=str(tmp_path)).vocab_size  # noqa: B018
        assert _one_line(info) == (
            f"{latin1} is not UTF-8 text (byte 0xc7 at offset 0): read it as bytes with --data.tokenizer byte, "
            "or convert it to UTF-8."
        )


def test_a_block_longer_than_a_split_names_both_sizes_and_the_fix(tmp_path: Path) -> None:
    corpus = str(_write(tmp_path / "small.txt", "abcdefghij" * 10))  # 90 training and 10 validation characters
    module = TextDataModule(path=corpus, block_size=128, cache_dir=str(tmp_path))
    with pytest.raises(DataError) as info:
        module.setup("fit")
    assert _one_line(info) == (
        "The train split of text holds 90 tokens, fewer than one window of block_size + 1 = 129: "
        "lower --data.block_size to at most 89, or give more text."
    )
    with pytest.raises(DataError) as info:
        TextDataModule(path=corpus, block_size=50, cache_dir=str(tmp_path)).setup("validate")
    assert _one_line(info) == (
        "The validation split of text holds 10 tokens, fewer than one window of block_size + 1 = 51: "
        "lower --data.block_size to at most 9, or raise --data.val_fraction, or give more text."
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "The text data module needs a corpus: --data.path FILE_OR_FOLDER (plain text) or --data.dataset NAME"),
        ({"path": "a.txt", "dataset": "x"}, "Give the corpus with either --data.path or --data.dataset, not both."),
        ({"path": "a.txt", "val_fraction": 1.0}, "val_fraction must lie strictly between 0 and 1, got 1.0."),
        ({"path": "a.txt", "tokenizer": "bpe", "bpe_vocab_size": 100}, "bpe_vocab_size must be at least 256, got 100."),
        ({"path": "a.txt", "tokenizer": "words"}, "tokenizer must be one of char, byte, bpe, got 'words'."),
    ],
)
def test_arguments_that_cannot_work_are_refused_at_construction(arguments: dict, message: str) -> None:
    with pytest.raises(DataError) as info:
        TextDataModule(**arguments)
    assert _one_line(info).startswith(message)


def test_a_missing_path_is_named() -> None:
    with pytest.raises(FileNotFoundError, match=r"^The text corpus 'no/such.txt' does not exist: give a UTF-8"):
        TextDataModule(path="no/such.txt")


# -- offline ---------------------------------------------------------------------------------------


def test_offline_the_public_copy_names_data_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(url: str, timeout: float) -> None:
        raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    module = ShakespeareDataModule(cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DownloadError) as info:
        module.prepare_data()
    assert _one_line(info) == (
        f"Could not reach {module.download_url} ([Errno -3] Temporary failure in name resolution). If this machine has no "
        "network access, download the file by other means and pass it with --data.path FILE (char-rnn's "
        "data/tinyshakespeare/input.txt)."
    )
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half written


def test_offline_a_hub_data_set_names_data_path(tmp_path: Path, hf_cache: None) -> None:
    module = TextDataModule(dataset="nobody/no-such-corpus", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError) as info:
        module.vocab_size  # noqa: B018
    assert _one_line(info) == (
        "Could not download 'nobody/no-such-corpus' from the Hugging Face Hub (no network, or offline mode): give a "
        "local copy with --data.dataset DIR (a directory of parquet, json or csv files with a 'train' split (and "
        "optionally 'validation' and 'test') with a text column 'text') or a plain-text copy with --data.path "
        "FILE_OR_FOLDER."
    )
