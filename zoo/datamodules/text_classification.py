"""Sentiment data modules: SST-2 and IMDB as padded batches of word ids.

Both corpora are binary, 0 = negative and 1 = positive. A data module reads a corpus either
from the Hugging Face hub (``stanfordnlp/sst2``, ``stanfordnlp/imdb``) or from a local directory
in the same layout (``path=``), builds a word vocabulary from the training texts only, caches
it on disk, and serves batches shaped for the zoo's encoders::

    {"tokens": LongTensor (B, L),     # word ids, padded with padding_idx to the longest row
     "valid_lens": LongTensor (B,),   # unpadded lengths, each >= 1
     "labels": LongTensor (B,)}       # 0 or 1 (absent when predicting; "texts" instead)

Which split plays which role:

* SST-2: train / validation as published. The hub's SST-2 test split is unlabelled (every
  label is -1), so the test stage evaluates on the **validation split** too, and SST-2 results
  are reported on validation, as GLUE papers do.
* IMDB: a seeded 10% of the training reviews is held out for validation by ``datasets``'
  ``train_test_split`` (the same rows for the same ``seed``); the test stage uses the 25,000
  test reviews.

Reading goes through ``datasets``: labels are typed as a ``ClassLabel`` over :data:`CLASS_NAMES`
once checked, and texts are encoded by a cached, batched ``map`` (the word tokenizer of
:mod:`zoo.text.words` runs in the ``tokenizers`` library).

The vocabulary size is needed to build the model before ``setup`` runs (LightningCLI links
``data.vocab_size`` into the model when it instantiates both), so :attr:`vocab_size` loads the
cached vocabulary, or builds it, on first access.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import datasets
import numpy as np

from zoo.datamodules.base import CorpusDataModule, check_minimums, existing_path
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError
from zoo.text.codecs import CODEC_VERSION, TextClassificationCodec, check_texts
from zoo.text.collators import PadCollator
from zoo.text.datasets import Columns, TokenIds
from zoo.text.words import PAD_ID, Vocabulary, tokenize

__all__ = ["CLASS_NAMES", "IMDBDataModule", "SST2DataModule", "TextClassificationDataModule", "TextSplit"]

log = logging.getLogger(__name__)

CLASS_NAMES = ("negative", "positive")
"""Label ``i`` means ``CLASS_NAMES[i]`` in both corpora."""

_LABELS = datasets.ClassLabel(names=list(CLASS_NAMES))


@dataclass(frozen=True)
class TextSplit:
    """Raw texts and their labels, row-aligned (what baselines score on)."""

    texts: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.texts)


class _Encode:
    """``datasets.map`` function: word ids of a batch's texts (a class, so its fingerprint, and so
    the cache of the encoded split, follows the codec's vocabulary and length limit)."""

    def __init__(self, codec: TextClassificationCodec, column: str) -> None:
        self.codec, self.column = codec, column

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        return {"ids": self.codec.encode_many(batch[self.column])}


class TextClassificationDataModule(CorpusDataModule):
    """A binary sentiment corpus as padded word-id batches; subclasses name the corpus.

    Args:
        path: A local directory in the hub layout of the corpus (see the subclass), used
            instead of downloading; ``None`` loads the hub data set through ``datasets``.
        max_vocab_size: The largest vocabulary, ``<pad>`` and ``<unk>`` included.
        min_freq: Words seen fewer times in the training texts map to ``<unk>``.
        kwargs: The shared arguments of :class:`~zoo.datamodules.base.CorpusDataModule`
            (``batch_size``, ``max_length``: longer texts are truncated, ``cache_dir``,
            ``num_workers``, ``limit_train``, ``seed``: for IMDB also the choice of validation
            rows, ``predict_texts`` and ``predict_file``: texts to classify).
    """

    hub_id: ClassVar[str]
    text_column: ClassVar[str]
    label_column: ClassVar[str] = "label"
    source_splits: ClassVar[tuple[str, ...]]
    """The splits of the source data set this module reads."""
    layout: ClassVar[str]
    """The expected local layout, quoted in error messages."""

    def __init__(self, path: str | None = None, max_vocab_size: int = 30000, min_freq: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.save_hyperparameters()
        check_minimums(max_vocab_size=(max_vocab_size, 3), min_freq=(min_freq, 1))
        self.root = existing_path(
            path, directory=True, what=f"The {self.name} data directory", expected=self.layout,
            otherwise=f"leave path unset to load {self.hub_id!r} from the hub",
        )  # fmt: skip
        self.max_vocab_size = max_vocab_size
        self.min_freq = min_freq
        self.collator = PadCollator(PAD_ID)
        self._source: datasets.DatasetDict | None = None
        self._read: dict[str, datasets.Dataset] = {}
        self._vocab: Vocabulary | None = None
        self._codec: TextClassificationCodec | None = None

    # -- sizes the model needs, available right after construction ----------------------------

    @property
    def vocab(self) -> Vocabulary:
        """The training vocabulary: loaded from the cache, or built and cached on first use."""
        if self._vocab is None:
            self._vocab = self._load_or_build_vocabulary()
        return self._vocab

    @property
    def vocab_size(self) -> int:
        """Rows the model's embedding table needs."""
        return len(self.vocab)

    @property
    def padding_idx(self) -> int:
        """The token id that pads batches (``<pad>``, always 0)."""
        return PAD_ID

    @property
    def num_classes(self) -> int:
        """Output classes of the classifier."""
        return _LABELS.num_classes

    @property
    def class_names(self) -> list[str]:
        """Human-readable name of each label id."""
        return list(_LABELS.names)

    @property
    def codec(self) -> TextClassificationCodec:
        """Raw text to token ids (this module's vocabulary and ``max_length``), ids to class names."""
        if self._codec is None:
            self._codec = TextClassificationCodec(self.vocab, self.max_length, self.class_names)
        return self._codec

    @property
    def vocab_file(self) -> Path:
        """The cached vocabulary, named by a hash of everything that changes its content."""
        return self.cache_file("vocab", {
            "dataset": self._dataset_identity(),
            "max_vocab_size": self.max_vocab_size,
            "min_freq": self.min_freq,
            "limit_train": self.limit_train,
            "seed": self.seed,
            "codec_version": CODEC_VERSION,  # what the vocabulary file holds, and how text is read
        })  # fmt: skip

    # -- Lightning hooks and the corpus-specific parts of the base ------------------------------

    def prepare_data(self) -> None:
        """Download (hub) or check (local path) the corpus and cache the vocabulary.

        Lightning runs this once per node before ``setup``, so the download and the vocabulary
        build happen once; ``setup`` then only reads.
        """
        for split in self.source_splits:
            self._read_split(split)
        self._vocab = self._load_or_build_vocabulary()

    def build_split(self, split: str) -> Columns:
        rows = self._split_rows(split).map(
            _Encode(self.codec, self.text_column), batched=True, batch_size=2048, desc=f"Encoding {self.name} {split}"
        )
        return Columns(tokens=TokenIds(rows["ids"][:]), labels=rows[self.label_column][:])

    def sort_keys(self, rows: Columns) -> np.ndarray:
        return rows.tokens.lengths

    def predict_dataset(self, inputs: list[Any]) -> Columns:
        check_texts(inputs, "predict_texts" if self.predict_file is None else f"the lines of {self.predict_file}")
        return Columns(tokens=TokenIds(self.codec.encode_many(inputs)), texts=inputs)

    def encode_texts(self, texts: Sequence[str]) -> dict[str, Any]:
        """Encode raw texts as one model-input batch: ``{"tokens", "valid_lens"}``.

        Raises:
            DataError: a text is empty or only whitespace.
        """
        return self.codec.batch(texts)

    # -- reading the corpus -----------------------------------------------------------------------

    def split(self, split: str) -> TextSplit:
        """The raw texts and labels of ``split`` (train, validation or test), ``limit_train`` applied

        (public so that baselines can be scored on exactly the same splits)."""
        rows = self._split_rows(split)
        return TextSplit(rows[self.text_column][:], rows[self.label_column][:])

    def _split_rows(self, split: str) -> datasets.Dataset:
        """The rows of ``split``, ``limit_train`` applied to the training rows."""
        data = self._unlimited_split(split)
        chosen = self.limited(len(data)) if split == "train" else None
        return data if chosen is None else data.select(chosen)

    def _unlimited_split(self, split: str) -> datasets.Dataset:
        """Map a stage's split name to the source data; subclasses decide how."""
        raise NotImplementedError

    def _read_split(self, split: str) -> datasets.Dataset:
        """A source split with only its text and label columns, checked: the columns exist, the
        texts are text, the labels are 0 or 1 (typed as the :data:`CLASS_NAMES` ``ClassLabel``)."""
        if split in self._read:
            return self._read[split]
        source = self._load_source()
        if split not in source:
            raise DataError(
                f"{self._source_name} has no {split!r} split (found: {sorted(source)}). "
                f"The {self.name} data module expects {self.layout}."
            )
        data = source[split]
        missing = [c for c in (self.text_column, self.label_column) if c not in data.column_names]
        if missing:
            raise DataError(
                f"The {split!r} split of {self._source_name} has no column {missing} "
                f"(columns: {data.column_names}). The {self.name} data module expects {self.layout}."
            )
        data = data.select_columns([self.text_column, self.label_column])
        texts = data.data.column(self.text_column)
        if texts.null_count or data.features[self.text_column] not in (
            datasets.Value("string"),
            datasets.Value("large_string"),
        ):
            raise DataError(
                f"The {split!r} split of {self._source_name} has rows whose {self.text_column!r} is not text "
                f"({texts.null_count} missing, type {data.features[self.text_column]}); drop or fix them."
            )
        labels = np.asarray(data.data.column(self.label_column))
        bad_labels = sorted(set(np.unique(labels).tolist()) - set(range(_LABELS.num_classes)))
        if bad_labels:
            raise DataError(
                f"The {split!r} split of {self._source_name} has labels {bad_labels[:10]} outside "
                f"{{0, 1}}. The {self.name} data module needs binary sentiment labels, 0 = negative "
                f"and 1 = positive: relabel those rows or drop them. (An unlabelled split, such as "
                f"the hub SST-2 test split where every label is -1, cannot be trained or evaluated on.)"
            )
        self._read[split] = data.cast_column(self.label_column, _LABELS)
        return self._read[split]

    def _load_source(self) -> datasets.DatasetDict:
        """The corpus as a ``DatasetDict``, downloaded on first use when no ``path`` is given."""
        if self._source is None:
            if self.root is None:
                self._source = datasets.load_dataset(self.hub_id)
            else:
                try:
                    self._source = datasets.load_dataset(str(self.root))
                except Exception as exc:  # whatever datasets could not read, say what it needs
                    raise DataError(
                        f"Could not read the {self.name} data at {self.root}: {type(exc).__name__}: "
                        f"{exc}. Expected {self.layout}."
                    ) from exc
        return self._source

    @property
    def _source_name(self) -> str:
        return str(self.root) if self.root is not None else f"the hub data set {self.hub_id!r}"

    def _dataset_identity(self) -> dict[str, Any]:
        """What identifies the source data: the hub id, or the local files with sizes and times."""
        if self.root is None:
            return {"hub": self.hub_id}
        files = []
        for file in sorted(p for p in self.root.rglob("*") if p.is_file()):
            stat = file.stat()
            files.append([file.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime_ns])
        return {"path": str(self.root), "files": files}

    def _load_or_build_vocabulary(self) -> Vocabulary:
        """Reuse the cached vocabulary for these settings, or build it from the training texts.

        Processes that build it at the same time (ranks of a multi-GPU run, each linking
        ``vocab_size`` into its model) write identical files atomically, so any of them wins.
        """
        file = self.vocab_file
        if file.exists():
            return Vocabulary.load(file)
        train = self.split("train")
        log.info("Building the %s vocabulary from %d training texts into %s", self.name, len(train), file)
        vocab = Vocabulary.build(map(tokenize, train.texts), max_size=self.max_vocab_size, min_freq=self.min_freq)
        vocab.save(file)
        return vocab


@register_datamodule("sst2")
class SST2DataModule(TextClassificationDataModule):
    """Stanford Sentiment Treebank, binary (GLUE SST-2): 67,349 training and 872 validation sentences.

    The test stage evaluates on the **validation split**: the hub's SST-2 test split carries no
    labels (all -1), so SST-2 results are reported on validation, as GLUE papers do. The test
    split is never read. Sentences are already tokenized and lowercased; the longest has 56
    tokens, hence ``max_length=66``. Other arguments: :class:`TextClassificationDataModule`.
    """

    name = "sst2"
    hub_id = "stanfordnlp/sst2"
    text_column = "sentence"
    source_splits = ("train", "validation")
    layout = (
        "the hub layout of stanfordnlp/sst2: <path>/data/train-00000-of-00001.parquet and "
        "<path>/data/validation-00000-of-00001.parquet with columns 'sentence' (str) and 'label' (0 or 1)"
    )

    def __init__(self, path: str | None = None, batch_size: int = 64, max_length: int = 66, **kwargs: Any) -> None:
        super().__init__(path=path, batch_size=batch_size, max_length=max_length, **kwargs)

    def _unlimited_split(self, split: str) -> datasets.Dataset:
        return self._read_split("train" if split == "train" else "validation")


@register_datamodule("imdb")
class IMDBDataModule(TextClassificationDataModule):
    """Large Movie Review Dataset (IMDB): 25,000 training and 25,000 test reviews.

    A seeded 10% of the training reviews (2,500) is held out for validation and never enters the
    vocabulary; the test stage uses the test reviews. Reviews contain ``<br />`` tags, which the
    tokenizer drops. Reviews average about 270 tokens; ``max_length=512`` truncates roughly
    one in ten. Other arguments: :class:`TextClassificationDataModule`.
    """

    name = "imdb"
    hub_id = "stanfordnlp/imdb"
    text_column = "text"
    source_splits = ("train", "test")
    validation_fraction: ClassVar[float] = 0.1
    layout = (
        "the hub layout of stanfordnlp/imdb: <path>/plain_text/train-00000-of-00001.parquet and "
        "<path>/plain_text/test-00000-of-00001.parquet with columns 'text' (str) and 'label' (0 or 1)"
    )

    def __init__(self, path: str | None = None, batch_size: int = 64, max_length: int = 512, **kwargs: Any) -> None:
        super().__init__(path=path, batch_size=batch_size, max_length=max_length, **kwargs)

    def _unlimited_split(self, split: str) -> datasets.Dataset:
        if split == "test":
            return self._read_split("test")
        parts = self._read_split("train").train_test_split(test_size=self.validation_fraction, seed=self.seed)
        return parts["train" if split == "train" else "test"]
