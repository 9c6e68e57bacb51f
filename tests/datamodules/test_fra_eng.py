"""The fra_eng data module on the real corpus (../shared/data/fra-eng.zip) and on small files."""

from __future__ import annotations

import hashlib
import pickle
import socket
import unicodedata
import urllib.error
import urllib.request
import zipfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers import SHARED_DATA
from zoo.datamodules.download import DownloadError
from zoo.datamodules.fra_eng import FRA_ENG_URL, FraEngDataModule, padding_fraction, read_pairs, split_of
from zoo.datamodules.fra_eng_corpus import EXPECTED
from zoo.datamodules.sampling import BucketBatchSampler, EpochShuffleSampler
from zoo.text.collators import TranslationCollator
from zoo.text.subwords import SubwordTokenizer

FRA_ENG_ZIP = SHARED_DATA / "fra-eng.zip"
LIMIT_TRAIN = 5000
VOCAB_SIZE = 1000
SETTINGS = {"limit_train": LIMIT_TRAIN, "vocab_size": VOCAB_SIZE, "batch_size": 64}


def _key(english: str) -> str:
    return " ".join(english.lower().split())


@pytest.fixture(scope="module")
def real_zip() -> Path:
    if not FRA_ENG_ZIP.is_file():
        pytest.skip(f"the fra-eng corpus is not at {FRA_ENG_ZIP}")
    return FRA_ENG_ZIP


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private ZOO_CACHE_DIR shared by this module's tests on the real corpus."""
    root = tmp_path_factory.mktemp("zoo-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_CACHE_DIR", str(root))
        yield root


@pytest.fixture(scope="module")
def trained(real_zip: Path, cache: Path) -> tuple[FraEngDataModule, list[str]]:
    """A set-up data module on the real corpus, and the texts its tokenizer was trained on."""
    seen: list[str] = []
    original = SubwordTokenizer.train.__func__  # type: ignore[attr-defined]

    def recording_train(cls: type, texts: object, vocab_size: int, **kwargs: object) -> SubwordTokenizer:
        texts = list(texts)  # type: ignore[call-overload]
        seen.extend(texts)
        return original(cls, texts, vocab_size, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SubwordTokenizer, "train", classmethod(recording_train))
        dm = FraEngDataModule(path=str(real_zip), **SETTINGS)
        dm.prepare_data()
    dm.setup()
    return dm, seen


@pytest.fixture(scope="module")
def dm(trained: tuple[FraEngDataModule, list[str]]) -> FraEngDataModule:
    return trained[0]


# -- split ----------------------------------------------------------------------------------------------


def test_split_is_deterministic_and_disjoint(dm: FraEngDataModule, real_zip: Path) -> None:
    again = FraEngDataModule(path=str(real_zip), **SETTINGS)
    assert again.splits == dm.splits
    keys = {
        "train": {_key(en) for en, _ in dm.splits.train},
        "validation": {_key(item.source) for item in dm.splits.validation},
        "test": {_key(item.source) for item in dm.splits.test},
    }
    assert not keys["train"] & keys["validation"]
    assert not keys["train"] & keys["test"]
    assert not keys["validation"] & keys["test"]
    for split, members in keys.items():
        assert all(split_of(key) == split for key in members)


def test_split_sizes_are_about_5_5_90_percent(dm: FraEngDataModule) -> None:
    splits = dm.splits
    assert splits.skipped == 0
    # Every pair is used; the few exact duplicates in validation and test count once as references.
    n_pairs = len(splits.train) + sum(len(i.references) for i in splits.validation + splits.test)
    assert 142_700 < n_pairs <= 142_787
    sentences = {
        "train": len({_key(en) for en, _ in splits.train}),
        "validation": len(splits.validation),
        "test": len(splits.test),
    }
    total = sum(sentences.values())
    assert 0.04 < sentences["validation"] / total < 0.06
    assert 0.04 < sentences["test"] / total < 0.06
    assert 0.88 < sentences["train"] / total < 0.92


def test_split_follows_the_published_hash() -> None:
    for english in ["Go.", "I love you.", "  Tom  is HERE. "]:
        normalized = " ".join(english.lower().split())
        k = int(hashlib.sha1(normalized.encode()).hexdigest()[:8], 16) % 100
        expected = "test" if k < 5 else "validation" if k < 10 else "train"
        assert split_of(english) == expected


def test_references_hold_every_translation(dm: FraEngDataModule, real_zip: Path) -> None:
    translations: dict[str, list[str]] = defaultdict(list)
    for english, french in read_pairs(real_zip).pairs:
        translations[_key(english)].append(french)
    for item in dm.splits.validation + dm.splits.test:
        expected = translations[_key(item.source)]
        assert item.references == list(dict.fromkeys(expected))  # all of them, first one first
    assert any(len(item.references) > 1 for item in dm.splits.test)


# -- tokenizer ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sentence",
    [
        "Je suis allé à l'école à 8 heures.",
        "Où est la gare ? C'est à côté du café.",
        "Tom a acheté 3 pommes et 12 œufs.",
        "« Ça va ? », demanda-t-elle.",
        "Il était très fâché contre Marie.",
        "I don't think it's 1999 anymore, Mr. Jackson!",
        "Qu’est-ce que tu fais ?",
    ],
)
def test_tokenizer_round_trips_text(dm: FraEngDataModule, sentence: str) -> None:
    ids = dm.tokenizer.encode(sentence)
    assert dm.tokenizer.unk_id not in ids
    assert dm.codec.decode(ids) == unicodedata.normalize("NFKC", sentence)
    assert dm.codec.decode([dm.bos_idx, *ids, dm.eos_idx, *ids, dm.padding_idx]) == unicodedata.normalize(
        "NFKC", sentence
    )


def test_tokenizer_normalizes_no_break_spaces(dm: FraEngDataModule) -> None:
    assert dm.codec.decode(dm.tokenizer.encode("Cours\u202f!\u00a0 Vite\u00a0!")) == "Cours ! Vite !"
    assert dm.tokenizer.encode("Cours\u202f!") == dm.tokenizer.encode("Cours !")


def test_special_ids_and_vocab_size(dm: FraEngDataModule) -> None:
    assert (dm.padding_idx, dm.bos_idx, dm.eos_idx) == (0, 2, 3)
    assert dm.vocab_size == dm.tokenizer.vocab_size == VOCAB_SIZE
    assert 3 not in dm.tokenizer.encode("<eos> is text here")
    pieces = dm.tokenizer.tokens("Tom est là.")
    assert pieces[0].startswith("\u2581") and "".join(pieces).replace("\u2581", " ").strip() == "Tom est là."


def test_tokenizer_is_trained_on_training_pairs_only(trained: tuple[FraEngDataModule, list[str]]) -> None:
    dm, seen = trained
    used = dm.train_pairs()
    assert len(used) == LIMIT_TRAIN
    assert seen == [text for pair in used for text in pair]
    evaluation = {_key(item.source) for item in dm.splits.validation + dm.splits.test}
    assert not evaluation & {_key(en) for en, _ in used}


def test_cached_tokenizer_is_reused(dm: FraEngDataModule, real_zip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert dm.tokenizer_file.is_file()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tokenizer was trained again instead of loaded from the cache")

    monkeypatch.setattr(SubwordTokenizer, "train", refuse)
    again = FraEngDataModule(path=str(real_zip), **SETTINGS)
    again.prepare_data()
    assert again.tokenizer_file == dm.tokenizer_file
    assert again.tokenizer.encode("Bonjour tout le monde !") == dm.tokenizer.encode("Bonjour tout le monde !")
    assert FraEngDataModule(path=str(real_zip), **{**SETTINGS, "vocab_size": 900}).tokenizer_file != dm.tokenizer_file


# -- batches --------------------------------------------------------------------------------------------


def _check_rows(batch: dict, eos: int, bos: int) -> None:
    for row in range(len(batch["src_lens"])):
        n_src, n_tgt = int(batch["src_lens"][row]), int(batch["tgt_lens"][row])
        assert (batch["src"][row, :n_src] != 0).all() and (batch["src"][row, n_src:] == 0).all()
        tgt_in, tgt_out = batch["tgt_in"][row], batch["tgt_out"][row]
        assert tgt_in[0] == bos and tgt_out[n_tgt - 1] == eos
        assert torch.equal(tgt_in[1:n_tgt], tgt_out[: n_tgt - 1])
        assert (tgt_in[n_tgt:] == 0).all() and (tgt_out[n_tgt:] == 0).all()
        assert eos not in tgt_in[:n_tgt].tolist() and bos not in tgt_out[:n_tgt].tolist()


def test_training_batches(dm: FraEngDataModule) -> None:
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"src", "src_lens", "tgt_in", "tgt_out", "tgt_lens"}
    b = len(batch["src_lens"])
    assert b == 64 and batch["src"].dtype == torch.long
    assert batch["src"].shape == (b, int(batch["src_lens"].max()))
    assert batch["tgt_in"].shape == batch["tgt_out"].shape == (b, int(batch["tgt_lens"].max()))
    _check_rows(batch, dm.eos_idx, dm.bos_idx)


def test_validation_batches_carry_sources_and_references(dm: FraEngDataModule) -> None:
    loader = dm.val_dataloader()
    batch = next(iter(loader))
    assert set(batch) == {"src", "src_lens", "tgt_in", "tgt_out", "tgt_lens", "sources", "references"}
    _check_rows(batch, dm.eos_idx, dm.bos_idx)
    items = [dm.splits.validation[i] for i in loader.sampler.indices[: len(batch["sources"])]]
    assert batch["sources"] == [item.source for item in items]
    assert batch["references"] == [item.references for item in items]
    for row, item in enumerate(items):
        assert dm.codec.decode(batch["tgt_out"][row]) == item.references[0]
        assert dm.codec.decode(batch["src"][row]) == item.source


def test_long_training_pairs_are_dropped_and_evaluation_pairs_kept(dm: FraEngDataModule, real_zip: Path) -> None:
    encode = dm.tokenizer.encode
    too_long = sum(max(len(encode(en)), len(encode(fr))) > 48 for en, fr in dm.train_pairs())
    assert dm.filtered_train_pairs == too_long and len(dm._datasets["train"]) == LIMIT_TRAIN - too_long
    short = FraEngDataModule(path=str(real_zip), **SETTINGS, max_length=8)
    short.setup()
    assert short.filtered_train_pairs is not None and short.filtered_train_pairs > 100
    train = short._datasets["train"]
    assert len(train) == LIMIT_TRAIN - short.filtered_train_pairs
    assert train.src.lengths.max() <= 8 and train.tgt.lengths.max() <= 8
    test = short._datasets["test"]
    assert len(test) == len(short.splits.test)
    long_items = [i for i, item in enumerate(short.splits.test) if len(short.tokenizer.encode(item.source)) > 8]
    assert long_items and test.src.lengths.max() == 8
    batch = TranslationCollator()([test[i] for i in long_items[:4]])
    assert batch["sources"] == [short.splits.test[i].source for i in long_items[:4]]  # full text for BLEU
    assert batch["references"] == [short.splits.test[i].references for i in long_items[:4]]


def test_bucketing_reduces_padding(dm: FraEngDataModule) -> None:
    bucketed = np.mean([padding_fraction(b) for b in dm.train_dataloader()])
    loader = DataLoader(
        dm._datasets["train"], batch_size=dm.batch_size, shuffle=True, collate_fn=TranslationCollator(),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    random = np.mean([padding_fraction(b) for b in loader])
    assert bucketed < random / 2


def test_bucket_sampler_is_deterministic_per_epoch() -> None:
    keys = np.random.default_rng(1).integers(1, 30, size=1000)

    def batches(epoch: int) -> list[list[int]]:
        sampler = BucketBatchSampler(EpochShuffleSampler(1000, seed=3), 32, sort_keys=keys, bucket_batches=4, seed=3)
        sampler.set_epoch(epoch)
        return list(sampler)

    first = batches(0)
    assert first == batches(0) and first != batches(1)
    assert sorted(i for batch in first for i in batch) == list(range(1000))
    assert len(first) == len(BucketBatchSampler(EpochShuffleSampler(1000), 32, sort_keys=keys)) == 32


def test_loaders_pickle_for_workers(dm: FraEngDataModule) -> None:
    loader = dm.train_dataloader()
    for part in (loader.collate_fn, loader.batch_sampler, loader.dataset):
        pickle.loads(pickle.dumps(part))


# -- prediction inputs ----------------------------------------------------------------------------------


def test_encode_source_and_predict_batches(real_zip: Path, cache: Path) -> None:
    dm = FraEngDataModule(path=str(real_zip), **SETTINGS, predict_texts=["Go.", "I love you, Tom."])
    batch = next(iter(dm.predict_dataloader()))
    assert set(batch) == {"src", "src_lens", "sources"}
    assert batch["sources"] == ["Go.", "I love you, Tom."]
    assert batch["src"].shape == (2, int(batch["src_lens"].max()))
    assert torch.equal(dm.encode_source(["Go.", "I love you, Tom."])["src"], batch["src"])


@pytest.mark.parametrize("text", ["", "   ", "\u00a0"])
def test_encode_source_refuses_empty_sentences(dm: FraEngDataModule, text: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        dm.encode_source(["Hello.", text])


def test_encode_source_refuses_too_long_sentences(dm: FraEngDataModule) -> None:
    with pytest.raises(ValueError, match=r"max_length=48.*--data\.max_length"):
        dm.encode_source(["word " * 60])


# -- malformed input --------------------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_spaces_are_normalized(tmp_path: Path, dm: FraEngDataModule) -> None:
    file = _write(tmp_path / "fra.txt", "Run!\tCours\u202f!\nWow!\tÇa alors\u00a0!\n  Hi.  \tSalut\u2009!  \n")
    assert read_pairs(file).pairs == [("Run!", "Cours !"), ("Wow!", "Ça alors !"), ("Hi.", "Salut !")]
    spaces = {"\u202f", "\u00a0"}
    assert not any(spaces & set(en + fr) for en, fr in dm.splits.train)


def test_malformed_lines_are_skipped_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        "Go.\tVa !",
        "no tab on this line",  # skipped
        "Hi.\tSalut !\tCC-BY 2.0 (France) Attribution: tatoeba.org #538123 (CM) & #509819 (Aiji)",
        "Run!\tCours !\textra\tfields",  # skipped: four fields
        "\tNothing in English",  # skipped: empty side
        "Empty French.\t \u00a0",  # skipped: empty side after normalization
        "",  # blank: ignored
        "Thanks.\tMerci !",
    ]
    file = _write(tmp_path / "fra.txt", "\n".join(lines) + "\n")
    parsed = read_pairs(file)
    assert parsed.pairs == [("Go.", "Va !"), ("Hi.", "Salut !"), ("Thanks.", "Merci !")]
    assert parsed.skipped == 4
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    assert FraEngDataModule(path=str(file), vocab_size=50).skipped_lines == 4


def test_file_without_tabs_is_refused(tmp_path: Path) -> None:
    file = _write(tmp_path / "fra.txt", "Go. Va !\nHi. Salut !\n")
    with pytest.raises(ValueError, match=r"no tab-separated line.*english<TAB>french") as info:
        read_pairs(file)
    assert str(file) in str(info.value)


def test_truncated_zip_is_a_clear_error(tmp_path: Path, real_zip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    truncated = tmp_path / "fra-eng.zip"
    truncated.write_bytes(real_zip.read_bytes()[:1000])
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    dm = FraEngDataModule(path=str(truncated))
    with pytest.raises(ValueError, match=r"not a readable zip archive.*truncated or corrupt") as info:
        dm.prepare_data()
    assert str(truncated) in str(info.value)


def test_zip_without_fra_txt_is_a_clear_error(tmp_path: Path) -> None:
    archive = tmp_path / "other.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("fra-eng/_about.txt", "nothing here")
    with pytest.raises(ValueError, match=r"holds no fra\.txt"):
        read_pairs(archive)


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "fra-eng.zip"
    with pytest.raises(FileNotFoundError, match=r"does not exist.*--data\.path") as info:
        FraEngDataModule(path=str(missing))
    assert str(missing) in str(info.value)


def test_offline_the_download_names_data_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(url: str, timeout: float) -> None:
        raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(DownloadError) as info:
        FraEngDataModule(cache_dir=str(tmp_path / "cache")).prepare_data()
    assert str(info.value) == (
        f"Could not reach {FRA_ENG_URL} ([Errno -3] Temporary failure in name resolution). If this machine has no "
        f"network access, download the file by other means and pass it with --data.path FILE ({EXPECTED})."
    )
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half written


# -- length extrapolation: short training pairs, long evaluation sources ------------------------------------


def test_max_train_length_drops_training_pairs_and_leaves_evaluation_sources_whole(
    dm: FraEngDataModule, real_zip: Path
) -> None:
    short = FraEngDataModule(path=str(real_zip), **SETTINGS, max_train_length=8)
    short.setup()
    encode = short.tokenizer.encode
    too_long = sum(max(len(encode(en)), len(encode(fr))) > 8 for en, fr in short.train_pairs())
    assert short.filtered_train_pairs == too_long > 100
    train = short._datasets["train"]
    assert len(train) == LIMIT_TRAIN - too_long and train.src.lengths.max() <= 8 and train.tgt.lengths.max() <= 8
    test = short._datasets["test"]
    assert len(test) == len(short.splits.test)
    long_items = [i for i, item in enumerate(short.splits.test) if 8 < len(encode(item.source)) <= 48]
    assert long_items and test.src.lengths.max() > 8
    batch = TranslationCollator()([test[i] for i in long_items[:8]])
    for row, i in enumerate(long_items[:8]):  # the model reads the whole source, not its first 8 tokens
        assert int(batch["src_lens"][row]) == len(encode(short.splits.test[i].source)) > 8
        assert short.codec.decode(batch["src"][row]) == short.splits.test[i].source


def test_eval_sources_longer_than_keeps_only_longer_sources(dm: FraEngDataModule, real_zip: Path) -> None:
    longer = FraEngDataModule(path=str(real_zip), **SETTINGS, eval_sources_longer_than=12)
    longer.setup("validate")
    longer.setup("test")
    for split in ("validation", "test"):
        items = getattr(longer.splits, split)
        expected = [item for item in items if len(longer.tokenizer.encode(item.source)) > 12]
        rows = longer._datasets[split]
        assert 0 < len(rows) == len(expected) < len(items)
        batch = TranslationCollator()([rows[i] for i in range(len(rows))])
        assert batch["sources"] == [item.source for item in expected]
        assert batch["references"] == [item.references for item in expected]
        assert int(batch["src_lens"].min()) > 12


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_train_length": 0}, r"^max_train_length must be at least 1, got 0\.$"),
        ({"max_train_length": 60}, r"max_train_length=60 exceeds max_length=48.*--data\.max_length to at least 60"),
        ({"eval_sources_longer_than": -1}, r"eval_sources_longer_than must be in 0\.\.47 .*got -1\."),
        ({"eval_sources_longer_than": 48}, r"eval_sources_longer_than must be in 0\.\.47 .*got 48\."),
    ],
)
def test_bad_length_options_are_one_clear_line(real_zip: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        FraEngDataModule(path=str(real_zip), **options)
    assert "\n" not in str(info.value)


def test_eval_filter_that_keeps_nothing_is_refused(dm: FraEngDataModule, real_zip: Path) -> None:
    longer = FraEngDataModule(path=str(real_zip), **SETTINGS, max_length=500, eval_sources_longer_than=499)
    with pytest.raises(
        ValueError, match=r"No test source of fra_eng has more than eval_sources_longer_than=499 .*lower"
    ):
        longer.setup("test")
