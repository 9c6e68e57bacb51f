"""English-to-French translation data: Tatoeba sentence pairs (``fra-eng``) as subword batches.

The corpus is ``fra.txt`` from manythings.org/anki, one ``english<TAB>french`` pair a line (some
exports add a third, attribution column, which is ignored). It comes from the d2l data hub as
``fra-eng.zip`` (downloaded and checked by SHA-1), or from a local ``fra-eng.zip`` or ``fra.txt``
given as ``path``; local files are taken as they are, without a checksum.

**Split.** The corpus has no official split, and the same English sentence often appears with
several French translations, so a random split of *pairs* would put a sentence's translations in
both training and test. Pairs are therefore grouped by their English side, normalized (lowercase,
whitespace collapsed), and each group goes to one split by a hash anyone can recompute::

    k = int(hashlib.sha1(normalized.encode()).hexdigest()[:8], 16) % 100
    test: k < 5      validation: 5 <= k < 10      train: otherwise

(:func:`split_of`). About 5 / 5 / 90 % of the English sentences, the same on every machine and in
every tool. Training uses every pair. Validation and test use each English sentence once, with
its first French translation as the teacher-forcing target and all its French translations as
BLEU references.

**Tokens.** One joint English+French BPE vocabulary (:mod:`zoo.datamodules.subword`, which
argues for subwords over words) is trained on the training split only and cached under
``cache_dir``; ids 0-3 are ``<pad>``, ``<unk>``, ``<bos>``, ``<eos>``. All text is NFKC-normalized
and its whitespace (no-break and narrow no-break spaces included) collapsed to single spaces.

**Batches** are dicts::

    src       LongTensor (B, Ls)  source ids, padded with 0
    src_lens  LongTensor (B,)     unpadded source lengths
    tgt_in    LongTensor (B, Lt)  <bos> + target        (decoder input, teacher forcing)
    tgt_out   LongTensor (B, Lt)  target + <eos>        (what the decoder must predict)
    tgt_lens  LongTensor (B,)     len(target) + 1
    sources     list[str]         validation, test, predict: the source sentences
    references  list[list[str]]   validation, test: every French translation, for BLEU

Predict batches hold only ``src``, ``src_lens`` and ``sources``. ``max_length`` bounds subword
tokens per side, ``<bos>``/``<eos>`` not counted: longer *training* pairs are dropped (and
counted); validation and test sentences are never dropped, only truncated for the
teacher-forced loss, while BLEU compares against the full references. Training batches group
sentences of similar length (:class:`BucketBatchSampler`), which cuts padding several-fold.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from zoo.datamodules.codec_state import codec_fields
from zoo.datamodules.download import download, sha1_of
from zoo.datamodules.loaders import ResumableDataLoader, evaluation_loader
from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.sampling import BucketBatchSampler, EpochShuffleSampler
from zoo.datamodules.subword import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SUBWORD_TOKENIZER_VERSION,
    SubwordTokenizer,
    normalize_text,
)
from zoo.datamodules.text_classification import default_cache_dir
from zoo.errors import DataError

__all__ = [
    "FRA_ENG_SHA1",
    "FRA_ENG_URL",
    "EvalItem",
    "FraEngDataModule",
    "FraEngSplits",
    "ParsedPairs",
    "TokenIds",
    "TranslationCodec",
    "TranslationCollator",
    "TranslationDataset",
    "padding_fraction",
    "read_pairs",
    "split_of",
    "split_pairs",
]

log = logging.getLogger(__name__)

FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"
_MEMBER = "fra.txt"
_EXPECTED = f"a fra-eng.zip (as from {FRA_ENG_URL}) or the fra.txt inside it, one 'english<TAB>french' pair a line"

_STAGE_SPLITS = {"fit": ("train", "validation"), "validate": ("validation",), "test": ("test",), "predict": ()}
_ALL_SPLITS = ("train", "validation", "test")


@rank_zero_only
def _report(message: str, *args: object) -> None:
    log.info(message, *args)


# -- reading and splitting the corpus ----------------------------------------------------------------


@dataclass(frozen=True)
class ParsedPairs:
    """Normalized ``(english, french)`` pairs of a file, and how many non-blank lines were unusable."""

    pairs: list[tuple[str, str]]
    skipped: int


def read_pairs(path: Path) -> ParsedPairs:
    """Read ``fra.txt``, or the ``fra.txt`` inside a zip archive, into normalized pairs.

    A line is used when it has two tab-separated fields, or three (the third, an attribution,
    is ignored), and neither sentence is empty after :func:`normalize_text`. Other non-blank
    lines are skipped and counted; blank lines are ignored.

    Raises:
        ValueError: a corrupt or truncated zip, a zip without ``fra.txt``, text that is not
            UTF-8, or a file with no tab-separated line or no usable pair.
    """
    text = _read_text(path)
    pairs: list[tuple[str, str]] = []
    skipped, bad_lines, has_tab = 0, [], False
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        has_tab = has_tab or len(fields) > 1
        english, french = (normalize_text(f) for f in fields[:2]) if len(fields) in (2, 3) else ("", "")
        if english and french:
            pairs.append((english, french))
        else:
            skipped += 1
            bad_lines.append(number)
    if not has_tab:
        raise DataError(f"{path} has no tab-separated line, so it is not a sentence-pair file. Expected {_EXPECTED}.")
    if not pairs:
        raise DataError(f"{path} holds no usable sentence pair ({skipped} malformed lines). Expected {_EXPECTED}.")
    if skipped:
        log.warning(
            "Skipped %d malformed lines of %s (lines %s%s): expected 2 or 3 tab-separated fields, none empty.",
            skipped, path, ", ".join(map(str, bad_lines[:10])), ", ..." if skipped > 10 else "",
        )  # fmt: skip
    return ParsedPairs(pairs, skipped)


def _read_text(path: Path) -> str:
    """The text of ``path``, or of the ``fra.txt`` member when ``path`` is a zip archive."""
    with path.open("rb") as handle:
        is_zip = path.suffix.lower() == ".zip" or handle.read(4) == b"PK\x03\x04"
    if not is_zip:
        data, name = path.read_bytes(), str(path)
    else:
        try:
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.namelist() if m.rsplit("/", 1)[-1] == _MEMBER]
                if not members:
                    raise DataError(
                        f"The zip archive {path} holds no {_MEMBER} (it holds {archive.namelist()[:10]}). "
                        f"Expected {_EXPECTED}."
                    )
                name = f"{path}:{members[0]}"
                data = archive.read(members[0])
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise DataError(
                f"{path} is not a readable zip archive ({exc}): it is truncated or corrupt. Download it "
                f"again, or pass the extracted fra.txt with --data.path."
            ) from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{name} is not UTF-8 text ({exc}). Expected {_EXPECTED}.") from exc


def split_of(english: str) -> str:
    """``"train"``, ``"validation"`` or ``"test"``: where pairs with this English side belong.

    Depends only on the English sentence, lowercased with whitespace collapsed, through SHA-1,
    so any tool can reproduce the split (see the module docstring).
    """
    normalized = " ".join(english.lower().split())
    k = int(hashlib.sha1(normalized.encode()).hexdigest()[:8], 16) % 100
    return "test" if k < 5 else "validation" if k < 10 else "train"


@dataclass(frozen=True)
class EvalItem:
    """One English sentence to translate and all its French translations (the first is the target)."""

    source: str
    references: list[str]


@dataclass(frozen=True)
class FraEngSplits:
    """The corpus split by English sentence; ``skipped`` counts unusable lines of the file."""

    train: list[tuple[str, str]]
    validation: list[EvalItem]
    test: list[EvalItem]
    skipped: int


def split_pairs(parsed: ParsedPairs) -> FraEngSplits:
    """Assign pairs to splits by :func:`split_of`; group validation and test pairs by English sentence.

    Order is kept: training pairs in file order, evaluation items in order of their first line.
    A group's source text is its first spelling; repeated identical translations count once.
    """
    train: list[tuple[str, str]] = []
    groups: dict[str, dict[str, tuple[str, dict[str, None]]]] = {"validation": {}, "test": {}}
    where: dict[str, str] = {}
    for english, french in parsed.pairs:
        key = " ".join(english.lower().split())
        split = where.get(key)
        if split is None:
            split = where[key] = split_of(key)
        if split == "train":
            train.append((english, french))
        else:
            _, translations = groups[split].setdefault(key, (english, {}))
            translations[french] = None
    validation, test = (
        [EvalItem(source, list(translations)) for source, translations in groups[split].values()]
        for split in ("validation", "test")
    )
    return FraEngSplits(train, validation, test, parsed.skipped)


# -- datasets, batches and sampling -----------------------------------------------------------------


class TokenIds:
    """Many variable-length id sequences in one flat array: compact, and quick to pickle to workers."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self.lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
        self._starts = np.concatenate([[0], np.cumsum(self.lengths)])
        self._flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=int(self._starts[-1]))

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> np.ndarray:
        return self._flat[self._starts[index] : self._starts[index + 1]]


class TranslationDataset(Dataset):
    """Row-aligned source ids and, optionally, target ids, source texts and reference lists."""

    def __init__(
        self,
        src: TokenIds,
        tgt: TokenIds | None = None,
        sources: list[str] | None = None,
        references: list[list[str]] | None = None,
    ) -> None:
        self.src, self.tgt, self.sources, self.references = src, tgt, sources, references

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item: dict[str, Any] = {"src": self.src[index]}
        if self.tgt is not None:
            item["tgt"] = self.tgt[index]
        if self.sources is not None:
            item["source"] = self.sources[index]
        if self.references is not None:
            item["references"] = self.references[index]
        return item


class TranslationCollator:
    """Pads :class:`TranslationDataset` items into a batch (keys: module docstring).

    A top-level class, not a closure, so DataLoader workers and DDP processes can pickle it.
    """

    def __init__(self, pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> None:
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        src_lens = torch.tensor([len(item["src"]) for item in items], dtype=torch.long)
        src = torch.full((len(items), int(src_lens.max())), self.pad_id, dtype=torch.long)
        for row, item in enumerate(items):
            src[row, : len(item["src"])] = torch.as_tensor(item["src"])
        batch: dict[str, Any] = {"src": src, "src_lens": src_lens}
        if "tgt" in items[0]:
            tgt_lens = torch.tensor([len(item["tgt"]) + 1 for item in items], dtype=torch.long)
            tgt_in = torch.full((len(items), int(tgt_lens.max())), self.pad_id, dtype=torch.long)
            tgt_out = tgt_in.clone()
            for row, item in enumerate(items):
                target, n = torch.as_tensor(item["tgt"]), len(item["tgt"])
                tgt_in[row, 0], tgt_in[row, 1 : n + 1] = self.bos_id, target
                tgt_out[row, :n], tgt_out[row, n] = target, self.eos_id
            batch.update(tgt_in=tgt_in, tgt_out=tgt_out, tgt_lens=tgt_lens)
        if "source" in items[0]:
            batch["sources"] = [item["source"] for item in items]
        if "references" in items[0]:
            batch["references"] = [item["references"] for item in items]
        return batch


class TranslationCodec:
    """English sentences to a translation model's source batch, output ids to French text.

    What predicting needs besides the weights: the subword tokenizer and the source length limit.
    It converts to and from plain data (:meth:`state_dict`: the tokenizer's JSON text and
    integers), so a checkpoint carries it, still loads with ``torch.load(weights_only=True)``, and
    a model restored from the checkpoint alone translates without the corpus.
    """

    def __init__(self, tokenizer: SubwordTokenizer, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length

    def items(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """Checked, encoded sentences as collator items ``{"src", "source"}``.

        Raises:
            ValueError: no sentences, an empty sentence, or one longer than ``max_length`` tokens.
        """
        if isinstance(texts, str):
            raise TypeError("Expected a list of sentences, not one string: wrap it as [sentence].")
        if len(texts) == 0:
            raise DataError("No sentences to translate; give at least one.")
        items = []
        for index, text in enumerate(texts):
            ids = self.tokenizer.encode(text) if isinstance(text, str) else []
            if not ids:
                raise DataError(f"Sentence {index} is empty ({text!r}): there is nothing to translate.")
            if len(ids) > self.max_length:
                raise DataError(
                    f"Sentence {index} has {len(ids)} subword tokens, more than max_length={self.max_length}: "
                    f"{text[:60]!r}... Shorten or split it, or raise the limit with --data.max_length "
                    f"(the model must have been trained for such lengths)."
                )
            items.append({"src": ids, "source": text})
        return items

    def batch(self, texts: Sequence[str]) -> dict[str, Any]:
        """English sentences as one model-input batch: ``{"src", "src_lens", "sources"}``."""
        return TranslationCollator()(self.items(texts))

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """French text of predicted ids, up to the first ``<eos>``, specials skipped."""
        return self.tokenizer.decode(ids)

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the tokenizer's JSON text and integers."""
        return {"tokenizer": self.tokenizer.to_json(), "max_length": self.max_length, "tokenizer_version": SUBWORD_TOKENIZER_VERSION}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> TranslationCodec:
        """Rebuild the codec of :meth:`state_dict`.

        Raises:
            DataError: the state is incomplete, or was made by another version of the text
                pipeline (the model would read its inputs differently).
        """
        saved = codec_fields(
            state, codec="The translation codec", pipeline="subword tokenizer",
            version=SUBWORD_TOKENIZER_VERSION, fields={"tokenizer": str, "max_length": int},
        )
        try:
            return cls(SubwordTokenizer.from_json(saved["tokenizer"]), saved["max_length"])
        except DataError as exc:
            raise DataError(f"The saved tokenizer is {exc}") from exc


def padding_fraction(batch: Mapping[str, Any]) -> float:
    """Share of padded positions in ``src`` and ``tgt_out`` (``tgt_in`` is padded alike): 0 is no waste."""
    total = batch["src"].numel() + (batch["tgt_out"].numel() if "tgt_out" in batch else 0)
    real = int(batch["src_lens"].sum()) + (int(batch["tgt_lens"].sum()) if "tgt_lens" in batch else 0)
    return 1.0 - real / total


# -- the data module ------------------------------------------------------------------------------------


@register_datamodule("fra_eng")
class FraEngDataModule(L.LightningDataModule):
    """English-to-French pairs from Tatoeba as subword batches (see the module docstring).

    Args:
        path: A local ``fra-eng.zip`` or ``fra.txt`` used as it is; ``None`` downloads the d2l
            copy of ``fra-eng.zip`` into ``cache_dir`` and checks its SHA-1.
        batch_size: Sentence pairs per batch.
        max_length: Most subword tokens per side (``<bos>``/``<eos>`` not counted). Longer
            training pairs are dropped; validation and test sentences are truncated for the
            teacher-forced loss only; longer prediction inputs are refused.
        vocab_size: Size of the joint English+French BPE vocabulary, the 4 specials included.
        cache_dir: Where the download and the tokenizer are cached; default
            ``~/.cache/attention-zoo/fra_eng``, or ``$ZOO_CACHE_DIR/fra_eng`` when that is set.
        num_workers: DataLoader worker processes.
        limit_train: Use only the first N training pairs after a shuffle seeded by ``seed``
            (fast experiments and tests); the tokenizer is trained on those N only.
        seed: Seeds that shuffle, and the order of training batches in each epoch.
        predict_texts: English sentences to translate in the predict stage.
        predict_file: A UTF-8 file of English sentences to translate, one a line (blank lines skipped).
    """

    name = "fra_eng"

    def __init__(
        self,
        path: str | None = None,
        batch_size: int = 128,
        max_length: int = 48,
        vocab_size: int = 8000,
        cache_dir: str | None = None,
        num_workers: int = 0,
        limit_train: int | None = None,
        seed: int = 0,
        predict_texts: list[str] | None = None,
        predict_file: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for arg, value, minimum in [
            ("batch_size", batch_size, 1),
            ("max_length", max_length, 1),
            ("vocab_size", vocab_size, 5),
            ("num_workers", num_workers, 0),
            ("limit_train", limit_train, 1),
            ("seed", seed, 0),
        ]:
            if value is not None and value < minimum:
                raise DataError(f"{arg} must be at least {minimum}, got {value}.")
        self.path = _check_path(path)
        self.batch_size = batch_size
        self.max_length = max_length
        self.requested_vocab_size = vocab_size
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir(self.name)
        self.num_workers = num_workers
        self.limit_train = limit_train
        self.seed = seed
        self.predict_texts = predict_texts
        self.predict_file = predict_file
        self.filtered_train_pairs: int | None = None
        """Training pairs dropped for exceeding ``max_length``; known after ``setup("fit")``."""
        self._file: Path | None = None
        self._sha1: str | None = None
        self._splits: FraEngSplits | None = None
        self._tokenizer: SubwordTokenizer | None = None
        self._datasets: dict[str, TranslationDataset] = {}

    # -- what the model needs, available right after construction ---------------------------------

    @property
    def tokenizer(self) -> SubwordTokenizer:
        """The joint subword tokenizer: loaded from the cache, or trained and cached on first use."""
        if self._tokenizer is None:
            self._tokenizer = self._load_or_train_tokenizer()
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        """Rows of the (shared) source and target embedding tables; may differ from the requested size."""
        return self.tokenizer.vocab_size

    @property
    def padding_idx(self) -> int:
        return PAD_ID

    @property
    def bos_idx(self) -> int:
        return BOS_ID

    @property
    def eos_idx(self) -> int:
        return EOS_ID

    @property
    def codec(self) -> TranslationCodec:
        """English text to source ids (this module's tokenizer and ``max_length``), ids to French."""
        return TranslationCodec(self.tokenizer, self.max_length)

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """French text of predicted ids, up to the first ``<eos>``, specials skipped."""
        return self.tokenizer.decode(ids)

    def encode_source(self, texts: Sequence[str]) -> dict[str, Any]:
        """English sentences as one model-input batch: ``{"src", "src_lens", "sources"}``.

        Raises:
            ValueError: no sentences, an empty sentence, or one longer than ``max_length`` tokens.
        """
        return self.codec.batch(texts)

    # -- the corpus ------------------------------------------------------------------------------

    @property
    def splits(self) -> FraEngSplits:
        """The parsed and split corpus (all training pairs, before ``limit_train``)."""
        if self._splits is None:
            file = self._data_file()
            self._splits = split_pairs(read_pairs(file))
            s = self._splits
            _report(
                "fra_eng %s: %d training pairs, %d validation and %d test sentences (%d and %d pairs); "
                "%d lines skipped",
                file, len(s.train), len(s.validation), len(s.test),
                sum(len(i.references) for i in s.validation), sum(len(i.references) for i in s.test), s.skipped,
            )  # fmt: skip
        return self._splits

    @property
    def skipped_lines(self) -> int:
        """Non-blank lines of the corpus file that were not a usable pair."""
        return self.splits.skipped

    def train_pairs(self) -> list[tuple[str, str]]:
        """The training pairs in use: all of them, or ``limit_train`` of them picked by ``seed``."""
        train = self.splits.train
        if self.limit_train is None:
            return train
        order = np.random.default_rng(self.seed).permutation(len(train))[: self.limit_train]
        return [train[i] for i in order]

    @property
    def tokenizer_file(self) -> Path:
        """The cached tokenizer, named by a hash of everything that changes what it learns."""
        key = {
            "data_module": self.name,
            "data_sha1": FRA_ENG_SHA1 if self.path is None else self._local_sha1(),
            "vocab_size": self.requested_vocab_size,
            "limit_train": self.limit_train,
            "seed": self.seed if self.limit_train is not None else None,  # without a limit, seed changes nothing
            "tokenizer_version": SUBWORD_TOKENIZER_VERSION,
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return self.cache_dir / f"tokenizer-{digest}.json"

    # -- Lightning hooks ---------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download and verify the corpus (unless ``path`` is given) and cache the tokenizer.

        Lightning runs this on one process per node before ``setup``, so the download and the
        tokenizer training happen once and ``setup`` only reads the cache.
        """
        self._data_file()
        self._load_or_train_tokenizer()

    def setup(self, stage: str | None = None) -> None:
        """Encode the splits that ``stage`` uses (all three for ``None``)."""
        for split in _ALL_SPLITS if stage is None else _STAGE_SPLITS[stage]:
            if split not in self._datasets:
                self._datasets[split] = self._encode_train() if split == "train" else self._encode_eval(split)

    def train_dataloader(self) -> DataLoader:
        dataset = self._dataset("train", "fit")
        assert dataset.tgt is not None
        # Sort by source length, then target length: about 7% padding on the full corpus, where
        # sorting by the sum of both lengths leaves 23% and random batches 62%.
        src_lens, tgt_lens = dataset.src.lengths, dataset.tgt.lengths
        sampler = BucketBatchSampler(
            EpochShuffleSampler(len(dataset), self.seed),
            self.batch_size,
            sort_keys=src_lens * (int(tgt_lens.max()) + 1) + tgt_lens,
            seed=self.seed,
        )
        return ResumableDataLoader(dataset, batch_sampler=sampler, **self._loader_kwargs())

    def val_dataloader(self) -> DataLoader:
        """Validation batches in corpus order; under several processes, each gets whole batches (no repeats)."""
        return evaluation_loader(self._dataset("validation", "validate"), self.batch_size, self.trainer, **self._loader_kwargs())

    def test_dataloader(self) -> DataLoader:
        """Test batches in corpus order; under several processes, each gets whole batches (no repeats)."""
        return evaluation_loader(self._dataset("test", "test"), self.batch_size, self.trainer, **self._loader_kwargs())

    def predict_dataloader(self) -> DataLoader:
        """Batches of ``predict_texts`` or the lines of ``predict_file``: ``src``, ``src_lens``, ``sources``."""
        items = self.codec.items(self._predict_texts())
        dataset = TranslationDataset(TokenIds([i["src"] for i in items]), sources=[i["source"] for i in items])
        return DataLoader(dataset, batch_size=self.batch_size, **self._loader_kwargs())

    # -- internals -----------------------------------------------------------------------------------

    def _data_file(self) -> Path:
        """The local corpus file, or the verified download in the cache (fetched when missing)."""
        if self._file is None:
            self._file = self.path or download(FRA_ENG_URL, self.cache_dir / "fra-eng.zip", sha1=FRA_ENG_SHA1)
        return self._file

    def _local_sha1(self) -> str:
        """Content hash of the user's file: the tokenizer cache follows the data, not the path."""
        if self._sha1 is None:
            self._sha1 = sha1_of(self._data_file())
        return self._sha1

    def _load_or_train_tokenizer(self) -> SubwordTokenizer:
        """Reuse the cached tokenizer for these settings, or train it on the training pairs and cache it.

        Processes that train at the same time write the same content atomically; any one wins.
        """
        file = self.tokenizer_file
        if file.is_file():
            return SubwordTokenizer.load(file)
        pairs = self.train_pairs()
        _report("Training a %d-id BPE tokenizer on %d pairs into %s", self.requested_vocab_size, len(pairs), file)
        tokenizer = SubwordTokenizer.train(
            itertools.chain.from_iterable(pairs), self.requested_vocab_size, length=2 * len(pairs)
        )
        tokenizer.save(file)
        return tokenizer

    def _encode_train(self) -> TranslationDataset:
        """Encode the training pairs; drop (and count) those over ``max_length`` on either side."""
        pairs = self.train_pairs()
        src = self.tokenizer.encode_batch([english for english, _ in pairs])
        tgt = self.tokenizer.encode_batch([french for _, french in pairs])
        keep = [i for i in range(len(pairs)) if max(len(src[i]), len(tgt[i])) <= self.max_length]
        self.filtered_train_pairs = len(pairs) - len(keep)
        _report(
            "fra_eng train: %d pairs, %d dropped as longer than max_length=%d",
            len(keep), self.filtered_train_pairs, self.max_length,
        )  # fmt: skip
        return TranslationDataset(TokenIds([src[i] for i in keep]), TokenIds([tgt[i] for i in keep]))

    def _encode_eval(self, split: str) -> TranslationDataset:
        """Encode every validation or test sentence; truncate ids beyond ``max_length``, keep texts whole."""
        items: list[EvalItem] = getattr(self.splits, split)
        src = self.tokenizer.encode_batch([item.source for item in items])
        tgt = self.tokenizer.encode_batch([item.references[0] for item in items])
        truncated = sum(len(s) > self.max_length or len(t) > self.max_length for s, t in zip(src, tgt))
        if truncated:
            _report("fra_eng %s: %d pairs truncated to max_length=%d for the loss", split, truncated, self.max_length)
        return TranslationDataset(
            TokenIds([s[: self.max_length] for s in src]),
            TokenIds([t[: self.max_length] for t in tgt]),
            sources=[item.source for item in items],
            references=[item.references for item in items],
        )

    def _predict_texts(self) -> list[str]:
        if self.predict_texts is not None and self.predict_file is not None:
            raise DataError("Pass either --data.predict_texts or --data.predict_file, not both.")
        if self.predict_texts is not None:
            return list(self.predict_texts)
        if self.predict_file is not None:
            file = Path(self.predict_file).expanduser()
            if not file.is_file():
                raise FileNotFoundError(
                    f"predict_file {self.predict_file!r} does not exist; give a text file, one sentence a line."
                )
            return [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        raise DataError(
            "Nothing to translate: pass --data.predict_texts '[\"A sentence.\", \"Another.\"]' or "
            "--data.predict_file FILE (one English sentence a line)."
        )

    def _dataset(self, split: str, stage: str) -> TranslationDataset:
        if split not in self._datasets:
            raise RuntimeError(
                f"The {split} split of fra_eng is not set up: call setup({stage!r}) first (a Trainer does this itself)."
            )
        return self._datasets[split]

    def _loader_kwargs(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "collate_fn": TranslationCollator(), "persistent_workers": self.num_workers > 0}


def _check_path(path: str | None) -> Path | None:
    """Fail at construction, before any training, when ``path`` cannot be the corpus."""
    if path is None:
        return None
    file = Path(path).expanduser().resolve()
    if not file.exists():
        raise FileNotFoundError(
            f"The fra_eng data file {path!r} does not exist. Pass {_EXPECTED}; or leave --data.path "
            f"unset to download it."
        )
    if not file.is_file():
        raise DataError(f"The fra_eng data path {path!r} is not a file. Pass {_EXPECTED}.")
    return file
