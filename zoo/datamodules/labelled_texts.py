"""Labelled text corpora (SST-2, IMDB) read from the Hugging Face hub or a local copy, and the data
module every classifier over them shares.

A corpus is described once, as data (:class:`LabelledCorpus`: its hub id, columns, splits and how
a stage's split is cut from them), and read by :class:`LabelledTexts`, which checks what it
reads. :class:`LabelledTextDataModule` serves those texts encoded by a codec: the word vocabulary
of :mod:`zoo.datamodules.text_classification`, or the bytes of the Long Range Arena's Text task
(:mod:`zoo.datamodules.lra_text`), which reads IMDB without any of the vocabulary's arguments.

Both corpora are binary, 0 = negative and 1 = positive; reading goes through ``datasets``, with
labels typed as a ``ClassLabel`` over :data:`CLASS_NAMES` once checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import datasets
import numpy as np

from zoo.datamodules.base import CorpusDataModule, existing_path
from zoo.datamodules.hub import load_hub_dataset, text_rows
from zoo.errors import DataError
from zoo.text.codecs import ClassificationCodec, check_texts
from zoo.text.datasets import Columns, TokenIds

__all__ = ["CLASS_NAMES", "IMDB", "SST2", "LabelledCorpus", "LabelledTextDataModule", "LabelledTexts", "TextSplit"]

CLASS_NAMES = ("negative", "positive")
"""Label ``i`` means ``CLASS_NAMES[i]`` in both corpora."""

_LABELS = datasets.ClassLabel(names=list(CLASS_NAMES))


@dataclass(frozen=True)
class LabelledCorpus:
    """Where a labelled text corpus comes from and how its splits serve the stages.

    Attributes:
        hub_id: The hub data set (``stanfordnlp/sst2``).
        directory: The folder of its parquet files in the hub layout (``data``).
        text_column: The column of the texts (the labels are ``label``).
        stages: The source split each stage (train, validation, test) reads.
        held_out: A fraction of the training rows held out, by a seeded shuffle, as the
            validation split (the stages' ``validation`` then names the split it comes from).
    """

    hub_id: str
    directory: str
    text_column: str
    stages: Mapping[str, str]
    held_out: float | None = None
    label_column: str = "label"

    @property
    def source_splits(self) -> tuple[str, ...]:
        """The source splits read, in the order the stages first name them."""
        return tuple(dict.fromkeys(self.stages.values()))

    @property
    def layout(self) -> str:
        """The expected local layout, quoted in error messages."""
        files = " and ".join(f"<path>/{self.directory}/{split}-00000-of-00001.parquet" for split in self.source_splits)
        return f"the hub layout of {self.hub_id}: {files} with columns {self.text_column!r} (str) and 'label' (0 or 1)"


# the hub's SST-2 test split is unlabelled (every label -1): the test stage evaluates on validation
SST2 = LabelledCorpus(
    "stanfordnlp/sst2", "data", "sentence", {"train": "train", "validation": "validation", "test": "validation"}
)
IMDB = LabelledCorpus(
    "stanfordnlp/imdb", "plain_text", "text", {"train": "train", "validation": "train", "test": "test"}, 0.1
)


@dataclass(frozen=True)
class TextSplit:
    """Raw texts and their labels, row-aligned (what baselines score on)."""

    texts: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.texts)


class LabelledTexts:
    """Reads one :class:`LabelledCorpus` from the hub (``root=None``) or a local directory in its
    layout, checking each split once: the columns exist, the texts are text, the labels 0 or 1.

    Args:
        corpus: What to read.
        root: A local directory in the corpus's hub layout, or None to load the hub data set.
        name: The data module's name, for messages.
        seed: Seeds the choice of held-out validation rows.
    """

    def __init__(self, corpus: LabelledCorpus, root: Path | None, name: str, seed: int) -> None:
        self.corpus, self.root, self.name, self.seed = corpus, root, name, seed
        self._source: datasets.DatasetDict | None = None
        self._read: dict[str, datasets.Dataset] = {}

    def stage(self, stage: str) -> datasets.Dataset:
        """The rows a stage (``train``, ``validation``, ``test``) reads, before any ``limit_train``."""
        data = self.read(self.corpus.stages[stage])
        if self.corpus.held_out is None or stage == "test":
            return data
        parts = data.train_test_split(test_size=self.corpus.held_out, seed=self.seed)
        return parts["train" if stage == "train" else "test"]

    def read(self, split: str) -> datasets.Dataset:
        """A source split with only its text and label columns, checked (labels typed as the
        :data:`CLASS_NAMES` ``ClassLabel``)."""
        if split in self._read:
            return self._read[split]
        corpus, source = self.corpus, self._load_source()
        if split not in source:
            raise DataError(
                f"{self.source_name} has no {split!r} split (found: {sorted(source)}). "
                f"The {self.name} data module expects {corpus.layout}."
            )
        data = source[split]
        missing = [c for c in (corpus.text_column, corpus.label_column) if c not in data.column_names]
        if missing:
            raise DataError(
                f"The {split!r} split of {self.source_name} has no column {missing} "
                f"(columns: {data.column_names}). The {self.name} data module expects {corpus.layout}."
            )
        data = data.select_columns([corpus.text_column, corpus.label_column])
        text_rows(data, corpus.text_column, f"The {split!r} split of {self.source_name}")
        labels = np.asarray(data.data.column(corpus.label_column))
        bad_labels = sorted(set(np.unique(labels).tolist()) - set(range(_LABELS.num_classes)))
        if bad_labels:
            raise DataError(
                f"The {split!r} split of {self.source_name} has labels {bad_labels[:10]} outside "
                f"{{0, 1}}. The {self.name} data module needs binary sentiment labels, 0 = negative "
                f"and 1 = positive: relabel those rows or drop them. (An unlabelled split, such as "
                f"the hub SST-2 test split where every label is -1, cannot be trained or evaluated on.)"
            )
        self._read[split] = data.cast_column(corpus.label_column, _LABELS)
        return self._read[split]

    def _load_source(self) -> datasets.DatasetDict:
        """The corpus as a ``DatasetDict``, downloaded on first use when no ``root`` is given.

        Raises:
            DataError: the hub cannot be reached (no network, or offline mode), or the local copy
                cannot be read; either way, the message names the expected local layout.
        """
        if self._source is None:
            if self.root is None:
                self._source = load_hub_dataset(self.corpus.hub_id, f"--data.path DIR ({self.corpus.layout})")
            else:
                try:
                    self._source = datasets.load_dataset(str(self.root))
                except Exception as exc:  # whatever datasets could not read, say what it needs
                    raise DataError(
                        f"Could not read the {self.name} data at {self.root}: {type(exc).__name__}: "
                        f"{exc}. Expected {self.corpus.layout}."
                    ) from exc
        return self._source

    @property
    def source_name(self) -> str:
        return str(self.root) if self.root is not None else f"the hub data set {self.corpus.hub_id!r}"

    def identity(self) -> dict[str, Any]:
        """What identifies the source data: the hub id, or the local files with sizes and times."""
        if self.root is None:
            return {"hub": self.corpus.hub_id}
        files = []
        for file in sorted(p for p in self.root.rglob("*") if p.is_file()):
            stat = file.stat()
            files.append([file.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime_ns])
        return {"path": str(self.root), "files": files}


class _Encode:
    """``datasets.map`` function: token ids of a batch's texts (a class, so its fingerprint, and so
    the cache of the encoded split, follows the codec)."""

    def __init__(self, codec: ClassificationCodec, column: str) -> None:
        self.codec, self.column = codec, column

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        return {"ids": self.codec.encode_many(batch[self.column])}


class LabelledTextDataModule(CorpusDataModule):
    """A binary sentiment corpus (:attr:`corpus`) as padded batches of its codec's token ids::

        {"tokens": LongTensor (B, L),     # token ids, padded to the longest row (or max_length)
         "valid_lens": LongTensor (B,),   # unpadded lengths, each >= 1
         "labels": LongTensor (B,)}       # 0 or 1 (absent when predicting; "texts" instead)

    Subclasses name the corpus and provide :attr:`codec` (how texts become ids), ``vocab_size``
    and ``collator``. Texts are encoded by a cached, batched ``datasets`` map.

    Args:
        path: A local directory in the corpus's hub layout, used instead of downloading;
            ``None`` loads the hub data set through ``datasets``.
        kwargs: The shared arguments of :class:`~zoo.datamodules.base.CorpusDataModule`.
    """

    corpus: ClassVar[LabelledCorpus]

    def __init__(self, path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        root = existing_path(
            path, directory=True, what=f"The {self.name} data directory", expected=self.corpus.layout,
            otherwise=f"leave path unset to load {self.corpus.hub_id!r} from the hub",
        )  # fmt: skip
        self.texts = LabelledTexts(self.corpus, root, self.name, self.seed)

    @property
    def codec(self) -> ClassificationCodec:
        raise NotImplementedError

    @property
    def padding_idx(self) -> int:
        """The token id that pads batches."""
        return self.collator.padding_idx

    @property
    def num_classes(self) -> int:
        """Output classes of the classifier."""
        return _LABELS.num_classes

    @property
    def class_names(self) -> list[str]:
        """Human-readable name of each label id."""
        return list(_LABELS.names)

    def prepare_data(self) -> None:
        """Download (hub) or check (local path) the corpus; Lightning runs this once per node."""
        for split in self.corpus.source_splits:
            self.texts.read(split)

    def build_split(self, split: str) -> Columns:
        column = self.corpus.text_column
        rows = self._split_rows(split).map(
            _Encode(self.codec, column), batched=True, batch_size=2048, desc=f"Encoding {self.name} {split}"
        )
        return Columns(tokens=TokenIds(rows["ids"][:]), labels=rows[self.corpus.label_column][:])

    def sort_keys(self, rows: Columns) -> np.ndarray:
        return rows.tokens.lengths

    def predict_dataset(self, inputs: list[Any]) -> Columns:
        check_texts(inputs, "predict_texts" if self.predict_file is None else f"the lines of {self.predict_file}")
        return Columns(tokens=TokenIds(self.codec.encode_many(inputs)), texts=inputs)

    def encode_texts(self, texts: list[str]) -> dict[str, Any]:
        """Encode raw texts as one model-input batch: ``{"tokens", "valid_lens"}``.

        Raises:
            DataError: a text is empty or only whitespace.
        """
        return self.codec.batch(texts)

    def split(self, split: str) -> TextSplit:
        """The raw texts and labels of ``split`` (train, validation or test), ``limit_train``
        applied (public so that baselines can be scored on exactly the same splits)."""
        rows = self._split_rows(split)
        return TextSplit(rows[self.corpus.text_column][:], rows[self.corpus.label_column][:])

    def _split_rows(self, split: str) -> datasets.Dataset:
        """The rows of ``split``, ``limit_train`` applied to the training rows."""
        data = self.texts.stage(split)
        chosen = self.limited(len(data)) if split == "train" else None
        return data if chosen is None else data.select(chosen)
