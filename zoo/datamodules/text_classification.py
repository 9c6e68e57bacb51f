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
* IMDB: a seeded 10% of the training reviews is held out for validation (the same rows for the
  same ``seed``); the test stage uses the 25,000 test reviews.

The vocabulary size is needed to build the model before ``setup`` runs (LightningCLI links
``data.vocab_size`` into the model when it instantiates both), so :attr:`vocab_size` loads the
cached vocabulary, or builds it, on first access.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import datasets
import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from zoo.datamodules.codec_state import codec_fields
from zoo.datamodules.loaders import ResumableDataLoader, evaluation_loader
from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.sampling import BucketBatchSampler, EpochShuffleSampler
from zoo.errors import DataError
from zoo.datamodules.tokenization import PAD_ID, TOKENIZER_VERSION, UNK_ID, Vocabulary, tokenize

__all__ = [
    "CLASS_NAMES",
    "EncodedTexts",
    "IMDBDataModule",
    "PadCollator",
    "SST2DataModule",
    "TextClassificationCodec",
    "TextClassificationDataModule",
    "TextSplit",
    "default_cache_dir",
    "split_indices",
]

log = logging.getLogger(__name__)

CLASS_NAMES = ("negative", "positive")
"""Label ``i`` means ``CLASS_NAMES[i]`` in both corpora."""

_STAGE_SPLITS = {"fit": ("train", "validation"), "validate": ("validation",), "test": ("test",), "predict": ()}
_ALL_SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class TextSplit:
    """Raw texts and their labels, row-aligned."""

    texts: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, rows: Sequence[int]) -> TextSplit:
        """The rows ``rows``, in that order."""
        return TextSplit([self.texts[i] for i in rows], [self.labels[i] for i in rows])


def split_indices(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Shuffle ``range(n)`` with ``seed`` and cut off ``round(n * fraction)`` rows.

    Returns ``(kept, held_out)``: disjoint, together all of ``range(n)``, and the same for the
    same arguments on every machine (NumPy's PCG64 generator), so every process of a multi-GPU
    run holds out the same validation rows.
    """
    order = np.random.default_rng(seed).permutation(n).tolist()
    n_held_out = round(n * fraction)
    return order[n_held_out:], order[:n_held_out]


def default_cache_dir(name: str) -> Path:
    """``$ZOO_CACHE_DIR/<name>`` if that variable is set, else ``~/.cache/attention-zoo/<name>``."""
    root = os.environ.get("ZOO_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "attention-zoo"
    return base / name


class EncodedTexts(Dataset):
    """Token-id tensors, one per text, with their labels (training) or raw texts (prediction)."""

    def __init__(self, tokens: list[Tensor], labels: list[int] | None = None, texts: list[str] | None = None) -> None:
        self.tokens = tokens
        self.labels = labels
        self.texts = texts

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item: dict[str, Any] = {"tokens": self.tokens[index]}
        if self.labels is not None:
            item["label"] = self.labels[index]
        if self.texts is not None:
            item["text"] = self.texts[index]
        return item


class PadCollator:
    """Stacks :class:`EncodedTexts` items into a batch, padding tokens to the longest row.

    A class rather than a closure so that DataLoader worker processes and DDP can pickle it.
    """

    def __init__(self, padding_idx: int) -> None:
        self.padding_idx = padding_idx

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        tokens = [item["tokens"] for item in items]
        batch: dict[str, Any] = {
            "tokens": pad_sequence(tokens, batch_first=True, padding_value=self.padding_idx),
            "valid_lens": torch.tensor([len(t) for t in tokens], dtype=torch.long),
        }
        if "label" in items[0]:
            batch["labels"] = torch.tensor([item["label"] for item in items], dtype=torch.long)
        if "text" in items[0]:
            batch["texts"] = [item["text"] for item in items]
        return batch


def _require(name: str, value: int | None, minimum: int) -> None:
    if value is not None and value < minimum:
        raise DataError(f"{name} must be at least {minimum}, got {value}.")


def _check_texts(texts: Sequence[str], where: str) -> None:
    """Refuse what cannot be classified: a bare string, no texts, or an empty text."""
    if isinstance(texts, str):
        raise TypeError(f"{where} must be a list of texts, not one string: wrap it as [text].")
    if len(texts) == 0:
        raise DataError(f"{where} holds no texts; give at least one text to classify.")
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise DataError(
                f"{where}[{index}] is empty text ({text!r}): there is nothing to classify. "
                f"Remove it or give a non-empty text."
            )


class TextClassificationCodec:
    """Raw texts to a classifier's inputs, and label ids to names: what predicting needs besides
    the weights.

    It holds the training vocabulary, the length limit and the class names, and converts to and
    from plain data (:meth:`state_dict`), so a checkpoint carries it, still loads with
    ``torch.load(weights_only=True)``, and a model restored from the checkpoint alone classifies
    raw text without the corpus.
    """

    def __init__(self, vocab: Vocabulary, max_length: int, class_names: Sequence[str]) -> None:
        self.vocab = vocab
        self.max_length = max_length
        self.class_names = list(class_names)

    def encode(self, text: str) -> Tensor:
        """Token ids of ``text``, truncated to ``max_length``; ``[<unk>]`` if nothing is left."""
        ids = self.vocab.encode(tokenize(text)[: self.max_length]) or [UNK_ID]
        return torch.tensor(ids, dtype=torch.long)

    def batch(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Raw texts as one model-input batch: ``{"tokens", "valid_lens"}``.

        Raises:
            ValueError: a text is empty or only whitespace.
        """
        _check_texts(texts, "texts")
        return PadCollator(PAD_ID)([{"tokens": self.encode(t)} for t in texts])

    def state_dict(self) -> dict[str, Any]:
        """Plain data: strings, integers, lists and dicts."""
        return {
            "vocabulary": self.vocab.to_dict(),
            "max_length": self.max_length,
            "class_names": list(self.class_names),
            "tokenizer_version": TOKENIZER_VERSION,
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> TextClassificationCodec:
        """Rebuild the codec of :meth:`state_dict`.

        Raises:
            DataError: the state is incomplete, or was made by another version of :func:`tokenize`
                (the model would read its words differently).
        """
        saved = codec_fields(
            state, codec="The text classification codec", pipeline="tokenizer",
            version=TOKENIZER_VERSION, fields={"max_length": int, "class_names": list},
        )
        return cls(Vocabulary.from_dict(state.get("vocabulary"), where="the saved vocabulary"), saved["max_length"], saved["class_names"])


class TextClassificationDataModule(L.LightningDataModule):
    """A binary sentiment corpus as padded word-id batches; subclasses name the corpus.

    Args:
        path: A local directory in the hub layout of the corpus (see the subclass), used
            instead of downloading; ``None`` loads the hub data set through ``datasets``.
        batch_size: Texts per batch.
        max_length: Tokens kept per text; longer texts are truncated.
        max_vocab_size: The largest vocabulary, ``<pad>`` and ``<unk>`` included.
        min_freq: Words seen fewer times in the training texts map to ``<unk>``.
        num_workers: DataLoader worker processes.
        cache_dir: Where the vocabulary is cached; default ``~/.cache/attention-zoo/<name>``,
            or ``$ZOO_CACHE_DIR/<name>`` when that variable is set.
        limit_train: Use only the first N training texts after a shuffle seeded by ``seed``
            (fast experiments and tests); the vocabulary is built from those N only.
        seed: Seeds that shuffle, the order of training batches in each epoch and, for IMDB, the
            choice of validation rows.
        predict_texts: Texts to classify in the predict stage.
        predict_file: A UTF-8 file of texts to classify, one per line (blank lines skipped).
    """

    name: ClassVar[str]
    hub_id: ClassVar[str]
    text_column: ClassVar[str]
    label_column: ClassVar[str] = "label"
    source_splits: ClassVar[tuple[str, ...]]
    """The splits of the source data set this module reads."""
    layout: ClassVar[str]
    """The expected local layout, quoted in error messages."""

    def __init__(
        self,
        path: str | None = None,
        batch_size: int = 64,
        max_length: int = 512,
        max_vocab_size: int = 30000,
        min_freq: int = 2,
        num_workers: int = 0,
        cache_dir: str | None = None,
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
            ("max_vocab_size", max_vocab_size, 3),
            ("min_freq", min_freq, 1),
            ("num_workers", num_workers, 0),
            ("limit_train", limit_train, 1),
        ]:
            _require(arg, value, minimum)
        self.root = self._check_path(path)
        self.batch_size = batch_size
        self.max_length = max_length
        self.max_vocab_size = max_vocab_size
        self.min_freq = min_freq
        self.num_workers = num_workers
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir(self.name)
        self.limit_train = limit_train
        self.seed = seed
        self.predict_texts = predict_texts
        self.predict_file = predict_file
        self._source: datasets.DatasetDict | None = None
        self._read: dict[str, TextSplit] = {}
        self._vocab: Vocabulary | None = None
        self._codec: TextClassificationCodec | None = None
        self._datasets: dict[str, EncodedTexts] = {}

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
        return len(CLASS_NAMES)

    @property
    def class_names(self) -> list[str]:
        """Human-readable name of each label id."""
        return list(CLASS_NAMES)

    @property
    def codec(self) -> TextClassificationCodec:
        """Raw text to token ids (this module's vocabulary and ``max_length``), ids to class names."""
        if self._codec is None:
            self._codec = TextClassificationCodec(self.vocab, self.max_length, self.class_names)
        return self._codec

    @property
    def vocab_file(self) -> Path:
        """The cached vocabulary, named by a hash of everything that changes its content."""
        key = {
            "data_module": self.name,
            "dataset": self._dataset_identity(),
            "max_vocab_size": self.max_vocab_size,
            "min_freq": self.min_freq,
            "limit_train": self.limit_train,
            "seed": self.seed,
            "tokenizer_version": TOKENIZER_VERSION,
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return self.cache_dir / f"vocab-{digest}.json"

    # -- Lightning hooks ------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download (hub) or check (local path) the corpus and cache the vocabulary.

        Lightning runs this once per node before ``setup``, so the download and the vocabulary
        build happen once; ``setup`` then only reads.
        """
        for split in self.source_splits:
            self._read_split(split)
        self._vocab = self._load_or_build_vocabulary()

    def setup(self, stage: str | None = None) -> None:
        """Encode the splits that ``stage`` uses (all of them for ``None``)."""
        for split in _ALL_SPLITS if stage is None else _STAGE_SPLITS[stage]:
            if split not in self._datasets:
                data = self.split(split)
                self._datasets[split] = EncodedTexts([self.codec.encode(t) for t in data.texts], labels=data.labels)

    def train_dataloader(self) -> DataLoader:
        """Shuffled batches of texts of similar length (IMDB: about 5% padding instead of 40%), in an
        order fixed by ``seed`` and the epoch, so that a run resumes exactly."""
        dataset = self._encoded("train", "fit")
        sampler = BucketBatchSampler(
            EpochShuffleSampler(len(dataset), self.seed),
            self.batch_size,
            sort_keys=[len(tokens) for tokens in dataset.tokens],
            seed=self.seed,
        )
        return ResumableDataLoader(dataset, batch_sampler=sampler, **self._loader_kwargs())

    def val_dataloader(self) -> DataLoader:
        """Validation batches in order; under several processes, each gets whole batches (no repeats)."""
        return evaluation_loader(self._encoded("validation", "validate"), self.batch_size, self.trainer, **self._loader_kwargs())

    def test_dataloader(self) -> DataLoader:
        """Test batches in order; under several processes, each gets whole batches (no repeats)."""
        return evaluation_loader(self._encoded("test", "test"), self.batch_size, self.trainer, **self._loader_kwargs())

    def predict_dataloader(self) -> DataLoader:
        """Batches of ``predict_texts`` or the lines of ``predict_file``, with a ``"texts"`` key."""
        texts = self._predict_texts()
        dataset = EncodedTexts([self.codec.encode(t) for t in texts], texts=texts)
        return DataLoader(dataset, batch_size=self.batch_size, **self._loader_kwargs())

    # -- encoding raw text ----------------------------------------------------------------------

    def encode_texts(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """Encode raw texts as one model-input batch: ``{"tokens", "valid_lens"}``.

        Raises:
            ValueError: a text is empty or only whitespace.
        """
        return self.codec.batch(texts)

    def decode_tokens(self, ids: Sequence[int]) -> list[str]:
        """The words behind token ids, e.g. to label attention heatmaps."""
        return self.vocab.decode(ids)

    # -- reading the corpus -----------------------------------------------------------------------

    def split(self, split: str) -> TextSplit:
        """The raw texts and labels of ``split`` (train, validation or test), ``limit_train`` applied

        (public so that baselines can be scored on exactly the same splits)."""
        data = self._unlimited_split(split)
        if split == "train" and self.limit_train is not None:
            order = np.random.default_rng(self.seed).permutation(len(data))[: self.limit_train]
            data = data.subset(order.tolist())
        return data

    def _unlimited_split(self, split: str) -> TextSplit:
        """Map a stage's split name to the source data; subclasses decide how."""
        raise NotImplementedError

    def _read_split(self, split: str) -> TextSplit:
        """Texts and labels of a source split, checked: the columns exist, labels are 0 or 1."""
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
        columns = data.select_columns([self.text_column, self.label_column]).to_dict()
        texts, labels = columns[self.text_column], columns[self.label_column]
        bad_texts = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad_texts:
            raise DataError(
                f"The {split!r} split of {self._source_name} has {len(bad_texts)} rows whose "
                f"{self.text_column!r} is not text (first rows: {bad_texts[:5]}); drop or fix them."
            )
        bad_labels = sorted({label for label in labels if label not in (0, 1)}, key=repr)
        if bad_labels:
            raise DataError(
                f"The {split!r} split of {self._source_name} has labels {bad_labels[:10]} outside "
                f"{{0, 1}}. The {self.name} data module needs binary sentiment labels, 0 = negative "
                f"and 1 = positive: relabel those rows or drop them. (An unlabelled split, such as "
                f"the hub SST-2 test split where every label is -1, cannot be trained or evaluated on.)"
            )
        self._read[split] = TextSplit(texts, [int(label) for label in labels])
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

    def _check_path(self, path: str | None) -> Path | None:
        """Fail at construction, before any training, when ``path`` cannot hold the corpus."""
        if path is None:
            return None
        root = Path(path).expanduser().resolve()
        if not root.exists():
            raise FileNotFoundError(
                f"The {self.name} data directory {path!r} does not exist. Expected {self.layout}; "
                f"or leave path unset to load {self.hub_id!r} from the hub."
            )
        if not root.is_dir():
            raise DataError(f"The {self.name} data path {path!r} is not a directory. Expected {self.layout}.")
        return root

    def _dataset_identity(self) -> dict[str, Any]:
        """What identifies the source data: the hub id, or the local files with sizes and times."""
        if self.root is None:
            return {"hub": self.hub_id}
        files = []
        for file in sorted(p for p in self.root.rglob("*") if p.is_file()):
            stat = file.stat()
            files.append([file.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime_ns])
        return {"path": str(self.root), "files": files}

    # -- vocabulary, loaders, predict inputs -------------------------------------------------------

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
        vocab = Vocabulary.build(
            (tokenize(text) for text in train.texts), max_size=self.max_vocab_size, min_freq=self.min_freq
        )
        vocab.save(file)
        return vocab

    def _encoded(self, split: str, stage: str) -> EncodedTexts:
        if split not in self._datasets:
            raise RuntimeError(
                f"The {split} split of {self.name} is not set up: call setup({stage!r}) first "
                f"(a Trainer does this itself)."
            )
        return self._datasets[split]

    def _loader_kwargs(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "collate_fn": PadCollator(self.padding_idx), "persistent_workers": self.num_workers > 0}

    def _predict_texts(self) -> list[str]:
        """The texts to classify, from ``predict_texts`` or ``predict_file``, checked."""
        if self.predict_texts is not None and self.predict_file is not None:
            raise DataError("Pass either --data.predict_texts or --data.predict_file, not both.")
        if self.predict_texts is not None:
            _check_texts(self.predict_texts, "predict_texts")
            return list(self.predict_texts)
        if self.predict_file is not None:
            file = Path(self.predict_file).expanduser()
            if not file.is_file():
                raise FileNotFoundError(f"predict_file {self.predict_file!r} does not exist; give a text file, one text per line.")
            texts = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
            _check_texts(texts, f"the lines of {self.predict_file}")
            return texts
        raise DataError(
            "Nothing to predict: pass --data.predict_texts '[\"a text\", \"another\"]' or "
            "--data.predict_file FILE (one text per line)."
        )


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

    def _unlimited_split(self, split: str) -> TextSplit:
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

    def _unlimited_split(self, split: str) -> TextSplit:
        if split == "test":
            return self._read_split("test")
        train_rows, validation_rows = split_indices(len(self._read_split("train")), self.validation_fraction, self.seed)
        return self._read_split("train").subset(train_rows if split == "train" else validation_rows)
