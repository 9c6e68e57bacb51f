"""Sentiment data modules over a word vocabulary: SST-2 and IMDB as padded batches of word ids.

The corpora are read by :mod:`zoo.datamodules.labelled_texts` (hub or ``path=``); here a word
vocabulary is built from the training texts only, cached on disk, and carried by the codec.

Which split plays which role:

* SST-2: train / validation as published. The hub's SST-2 test split is unlabelled (every
  label is -1), so the test stage evaluates on the **validation split** too, and SST-2 results
  are reported on validation, as GLUE papers do.
* IMDB: a seeded 10% of the training reviews is held out for validation by ``datasets``'
  ``train_test_split`` (the same rows for the same ``seed``); the test stage uses the 25,000
  test reviews.

The vocabulary size is needed to build the model before ``setup`` runs (LightningCLI links
``data.vocab_size`` into the model when it instantiates both), so :attr:`vocab_size` loads the
cached vocabulary, or builds it, on first access.
"""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path
from typing import Any

from zoo.datamodules.base import check_minimums
from zoo.datamodules.labelled_texts import CLASS_NAMES, IMDB, SST2, LabelledTextDataModule, TextSplit
from zoo.datamodules.registry import register_datamodule
from zoo.text.codecs import CODEC_VERSION, TextClassificationCodec
from zoo.text.collators import PadCollator
from zoo.text.files import load_or_build
from zoo.text.words import PAD_ID, Vocabulary, tokenize

__all__ = ["CLASS_NAMES", "IMDBDataModule", "SST2DataModule", "TextClassificationDataModule", "TextSplit"]

log = logging.getLogger(__name__)


class TextClassificationDataModule(LabelledTextDataModule):
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

    def __init__(self, path: str | None = None, max_vocab_size: int = 30000, min_freq: int = 2, **kwargs: Any) -> None:
        super().__init__(path=path, **kwargs)
        self.save_hyperparameters()
        check_minimums(max_vocab_size=(max_vocab_size, 3), min_freq=(min_freq, 1))
        self.max_vocab_size = max_vocab_size
        self.min_freq = min_freq
        self.collator = PadCollator(PAD_ID)

    # -- sizes the model needs, available right after construction ----------------------------

    @cached_property
    def vocab(self) -> Vocabulary:
        """The training vocabulary: loaded from the cache, or built and cached on first use."""
        return self._load_or_build_vocabulary()

    @property
    def vocab_size(self) -> int:
        """Rows the model's embedding table needs."""
        return len(self.vocab)

    @cached_property
    def codec(self) -> TextClassificationCodec:
        """Raw text to token ids (this module's vocabulary and ``max_length``), ids to class names."""
        return TextClassificationCodec(self.vocab, self.max_length, self.class_names)

    @property
    def vocab_file(self) -> Path:
        """The cached vocabulary, named by a hash of everything that changes its content."""
        return self.cache_file("vocab", {
            "dataset": self.texts.identity(),
            "max_vocab_size": self.max_vocab_size,
            "min_freq": self.min_freq,
            "limit_train": self.limit_train,
            "seed": self.seed,
            "codec_version": CODEC_VERSION,  # what the vocabulary file holds, and how text is read
        })  # fmt: skip

    def prepare_data(self) -> None:
        """Download (hub) or check (local path) the corpus and cache the vocabulary.

        Lightning runs this once per node before ``setup``, so the download and the vocabulary
        build happen once; ``setup`` then only reads.
        """
        super().prepare_data()
        self.vocab = self._load_or_build_vocabulary()

    def _load_or_build_vocabulary(self) -> Vocabulary:
        """Reuse the cached vocabulary for these settings, or build it from the training texts and cache it
        (ranks of a multi-GPU run, each linking ``vocab_size`` into its model, may build it at once)."""
        return load_or_build(
            self.vocab_file, what="vocabulary", build=self._build_vocabulary,
            read=Vocabulary.from_json, write=Vocabulary.to_json,
        )  # fmt: skip

    def _build_vocabulary(self) -> Vocabulary:
        """The ``max_vocab_size`` most frequent words of the training texts seen ``min_freq`` times or more."""
        train = self.split("train")
        log.info("Building the %s vocabulary from %d training texts into %s", self.name, len(train), self.vocab_file)
        return Vocabulary.build(map(tokenize, train.texts), max_size=self.max_vocab_size, min_freq=self.min_freq)


@register_datamodule("sst2")
class SST2DataModule(TextClassificationDataModule):
    """Stanford Sentiment Treebank, binary (GLUE SST-2): 67,349 training and 872 validation sentences.

    The test stage evaluates on the **validation split**: the hub's SST-2 test split carries no
    labels (all -1), so SST-2 results are reported on validation, as GLUE papers do. The test
    split is never read. Sentences are already tokenized and lowercased; the longest has 56
    tokens, hence ``max_length=66``. Other arguments: :class:`TextClassificationDataModule`.
    """

    name = "sst2"
    corpus = SST2

    def __init__(self, path: str | None = None, batch_size: int = 64, max_length: int = 66, **kwargs: Any) -> None:
        super().__init__(path=path, batch_size=batch_size, max_length=max_length, **kwargs)


@register_datamodule("imdb")
class IMDBDataModule(TextClassificationDataModule):
    """Large Movie Review Dataset (IMDB): 25,000 training and 25,000 test reviews.

    A seeded 10% of the training reviews (2,500) is held out for validation and never enters the
    vocabulary; the test stage uses the test reviews. Reviews contain ``<br />`` tags, which the
    tokenizer drops. Reviews average about 270 tokens; ``max_length=512`` truncates roughly
    one in ten. Other arguments: :class:`TextClassificationDataModule`.
    """

    name = "imdb"
    corpus = IMDB

    def __init__(self, path: str | None = None, batch_size: int = 64, max_length: int = 512, **kwargs: Any) -> None:
        super().__init__(path=path, batch_size=batch_size, max_length=max_length, **kwargs)
