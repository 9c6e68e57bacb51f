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

**Tokens.** One joint English+French BPE vocabulary (:mod:`zoo.text.subwords`, which
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
counted); validation and test sentences are truncated to it (source and target ids), while
BLEU compares against the full references. Training batches group sentences of similar length
(:class:`BucketBatchSampler`), which cuts padding several-fold.

**Length extrapolation.** ``max_train_length`` drops training pairs longer than it on either
side while evaluation still reads sources of up to ``max_length`` tokens, and
``eval_sources_longer_than`` keeps in validation and test only the sentences whose source has
more subword tokens than it. Together they train on short pairs and score on longer sources,
which the positions never saw in training.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch.utilities import rank_zero_only

from zoo.datamodules.base import CorpusDataModule, check_minimums, existing_path
from zoo.datamodules.download import download, sha1_of
from zoo.datamodules.fra_eng_corpus import (
    EXPECTED,
    EvalItem,
    FraEngSplits,
    ParsedPairs,
    read_pairs,
    split_of,
    split_pairs,
)
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError
from zoo.text.codecs import TranslationCodec
from zoo.text.collators import TranslationCollator
from zoo.text.datasets import Columns, TokenIds
from zoo.text.files import load_or_build
from zoo.text.subwords import BOS_ID, EOS_ID, PAD_ID, SUBWORD_TOKENIZER_VERSION, SubwordTokenizer

__all__ = [
    "FRA_ENG_SHA1",
    "FRA_ENG_URL",
    "EvalItem",
    "FraEngDataModule",
    "FraEngSplits",
    "ParsedPairs",
    "padding_fraction",
    "read_pairs",
    "split_of",
    "split_pairs",
]

log = logging.getLogger(__name__)

FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"


@rank_zero_only
def _report(message: str, *args: object) -> None:
    log.info(message, *args)


def padding_fraction(batch: Mapping[str, Any]) -> float:
    """Share of padded positions in ``src`` and ``tgt_out`` (``tgt_in`` is padded alike): 0 is no waste."""
    total = batch["src"].numel() + (batch["tgt_out"].numel() if "tgt_out" in batch else 0)
    real = int(batch["src_lens"].sum()) + (int(batch["tgt_lens"].sum()) if "tgt_lens" in batch else 0)
    return 1.0 - real / total


@register_datamodule("fra_eng")
class FraEngDataModule(CorpusDataModule):
    """English-to-French pairs from Tatoeba as subword batches (see the module docstring).

    Args:
        path: A local ``fra-eng.zip`` or ``fra.txt`` used as it is; ``None`` downloads the d2l
            copy of ``fra-eng.zip`` into ``cache_dir`` and checks its SHA-1.
        batch_size: Sentence pairs per batch.
        max_length: Most subword tokens per side (``<bos>``/``<eos>`` not counted). Longer
            training pairs are dropped; validation and test sentences are truncated to it (the
            BLEU references stay whole); longer prediction inputs are refused.
        max_train_length: Most subword tokens per side of a *training* pair, at most
            ``max_length``; ``None`` means ``max_length``. Below ``max_length`` the model is
            evaluated on sources longer than any it trained on (length extrapolation).
        eval_sources_longer_than: Validation and test keep only the sentences whose source has
            more subword tokens than this; 0 keeps all.
        vocab_size: Size of the joint English+French BPE vocabulary, the 4 specials included.
        kwargs: The shared arguments of :class:`~zoo.datamodules.base.CorpusDataModule`
            (``cache_dir``, ``num_workers``, ``limit_train``, ``seed``, ``predict_texts`` and
            ``predict_file``: English sentences to translate).
    """

    name = "fra_eng"

    def __init__(
        self,
        path: str | None = None,
        batch_size: int = 128,
        max_length: int = 48,
        vocab_size: int = 8000,
        max_train_length: int | None = None,
        eval_sources_longer_than: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length, **kwargs)
        self.save_hyperparameters()
        check_minimums(vocab_size=(vocab_size, 5), max_train_length=(max_train_length, 1))
        if max_train_length is not None and max_train_length > max_length:
            raise DataError(
                f"max_train_length={max_train_length} exceeds max_length={max_length}, which evaluation truncates "
                f"to: raise --data.max_length to at least {max_train_length}."
            )
        if not 0 <= eval_sources_longer_than < max_length:
            raise DataError(
                f"eval_sources_longer_than must be in 0..{max_length - 1} (sources are truncated to "
                f"max_length={max_length}), got {eval_sources_longer_than}."
            )
        self.max_train_length = max_length if max_train_length is None else max_train_length
        self.eval_sources_longer_than = eval_sources_longer_than
        self.path = existing_path(
            path,
            directory=False,
            what="The fra_eng data file",
            expected=EXPECTED,
            otherwise="leave --data.path unset to download it",
        )
        self.requested_vocab_size = vocab_size
        self.collator = TranslationCollator()
        self.filtered_train_pairs: int | None = None
        """Training pairs dropped for exceeding ``max_train_length``; known after ``setup("fit")``."""
        self._file: Path | None = None
        self._sha1: str | None = None
        self._splits: FraEngSplits | None = None

    # -- what the model needs, available right after construction ---------------------------------

    @cached_property
    def tokenizer(self) -> SubwordTokenizer:
        """The joint subword tokenizer: loaded from the cache, or trained and cached on first use."""
        return self._load_or_train_tokenizer()

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

    def encode_source(self, texts: list[str]) -> dict[str, Any]:
        """English sentences as one model-input batch: ``{"src", "src_lens", "sources"}``.

        Raises:
            DataError: no sentences, an empty sentence, or one longer than ``max_length`` tokens.
        """
        return self.codec.batch(texts)

    # -- the corpus ------------------------------------------------------------------------------

    @property
    def splits(self) -> FraEngSplits:
        """The parsed and split corpus (all training pairs, before ``limit_train``)."""
        if self._splits is None:
            file = self._data_file()
            self._splits = s = split_pairs(read_pairs(file))
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
        rows = self.limited(len(train))
        return train if rows is None else [train[i] for i in rows]

    @property
    def tokenizer_file(self) -> Path:
        """The cached tokenizer, named by a hash of everything that changes what it learns."""
        return self.cache_file("tokenizer", {
            "data_sha1": FRA_ENG_SHA1 if self.path is None else self._local_sha1(),
            "vocab_size": self.requested_vocab_size,
            "limit_train": self.limit_train,
            "seed": self.seed if self.limit_train is not None else None,  # without a limit, seed changes nothing
            "tokenizer_version": SUBWORD_TOKENIZER_VERSION,
        })  # fmt: skip

    # -- Lightning hooks and the corpus-specific parts of the base ----------------------------------

    def prepare_data(self) -> None:
        """Download and verify the corpus (unless ``path`` is given) and cache the tokenizer.

        Lightning runs this on one process per node before ``setup``, so the download and the
        tokenizer training happen once and ``setup`` only reads the cache.
        """
        self._data_file()
        self._load_or_train_tokenizer()

    def build_split(self, split: str) -> Columns:
        self._require_rows(split)
        return self._encode_train() if split == "train" else self._encode_eval(split)

    def sort_keys(self, rows: Columns) -> np.ndarray:
        # Sort by source length, then target length: about 7% padding on the full corpus, where
        # sorting by the sum of both lengths leaves 23% and random batches 62%.
        src_lens, tgt_lens = rows.src.lengths, rows.tgt.lengths
        return src_lens * (int(tgt_lens.max()) + 1) + tgt_lens

    def predict_dataset(self, inputs: list[Any]) -> Columns:
        items = self.codec.items(inputs)
        return Columns(src=[item["src"] for item in items], sources=[item["sources"] for item in items])

    # -- internals -----------------------------------------------------------------------------------

    def _data_file(self) -> Path:
        """The local corpus file, or the verified download in the cache (fetched when missing).

        Raises:
            DownloadError: the copy cannot be fetched (no network); the message names ``--data.path``.
        """
        if self._file is None:
            self._file = self.path or download(
                FRA_ENG_URL, self.cache_dir / "fra-eng.zip", sha1=FRA_ENG_SHA1, local_copy=f"FILE ({EXPECTED})"
            )
        return self._file

    def _local_sha1(self) -> str:
        """Content hash of the user's file: the tokenizer cache follows the data, not the path."""
        if self._sha1 is None:
            self._sha1 = sha1_of(self._data_file())
        return self._sha1

    def _require_rows(self, split: str) -> None:
        """Refuse a split that the hash left empty, in one line that says why."""
        rows = getattr(self.splits, split)
        if not rows:
            distinct = len({" ".join(english.lower().split()) for english, _ in self.splits.train}) + sum(
                len(getattr(self.splits, other)) for other in ("validation", "test")
            )
            raise DataError(
                f"The {split} split of {self._data_file()} is empty: its {distinct} distinct English sentences all "
                f"hash into the other splits (5% test, 5% validation, 90% train, by sentence). Give a corpus with "
                f"more distinct English sentences (a few hundred at least)."
            )

    def _load_or_train_tokenizer(self) -> SubwordTokenizer:
        """Reuse the cached tokenizer for these settings, or train it on the training pairs and cache it."""
        return load_or_build(
            self.tokenizer_file, what="subword tokenizer", build=self._train_tokenizer,
            read=SubwordTokenizer.from_json, write=SubwordTokenizer.to_json,
        )  # fmt: skip

    def _train_tokenizer(self) -> SubwordTokenizer:
        """A joint BPE of ``vocab_size`` ids, trained on both sides of the training pairs in use."""
        pairs = self.train_pairs()
        _report(
            "Training a %d-id BPE tokenizer on %d pairs into %s",
            self.requested_vocab_size,
            len(pairs),
            self.tokenizer_file,
        )
        return SubwordTokenizer.train(
            itertools.chain.from_iterable(pairs), self.requested_vocab_size, length=2 * len(pairs)
        )

    def _encode_train(self) -> Columns:
        """Encode the training pairs; drop (and count) those over ``max_train_length`` on either side."""
        pairs = self.train_pairs()
        src = self.tokenizer.encode_batch([english for english, _ in pairs])
        tgt = self.tokenizer.encode_batch([french for _, french in pairs])
        limit, option = self._train_limit()
        keep = [i for i in range(len(pairs)) if max(len(src[i]), len(tgt[i])) <= limit]
        self.filtered_train_pairs = len(pairs) - len(keep)
        if not keep:
            raise DataError(
                f"All {len(pairs)} training pairs of fra_eng are longer than {option}={limit} subword "
                f"tokens on one side, so the train split is empty: raise --data.{option}."
            )
        _report(
            "fra_eng train: %d pairs, %d dropped as longer than %s=%d",
            len(keep), self.filtered_train_pairs, option, limit,
        )  # fmt: skip
        return Columns(src=TokenIds([src[i] for i in keep]), tgt=TokenIds([tgt[i] for i in keep]))

    def _encode_eval(self, split: str) -> Columns:
        """Encode the validation or test sentences with sources longer than ``eval_sources_longer_than``
        tokens; truncate ids beyond ``max_length``, keep texts whole."""
        items: list[EvalItem] = getattr(self.splits, split)
        src = self.tokenizer.encode_batch([item.source for item in items])
        if self.eval_sources_longer_than:
            kept = [i for i, ids in enumerate(src) if len(ids) > self.eval_sources_longer_than]
            if not kept:
                raise DataError(
                    f"No {split} source of fra_eng has more than eval_sources_longer_than="
                    f"{self.eval_sources_longer_than} subword tokens: lower --data.eval_sources_longer_than."
                )
            _report(
                "fra_eng %s: %d of %d sentences kept, their sources longer than %d subword tokens",
                split, len(kept), len(items), self.eval_sources_longer_than,
            )  # fmt: skip
            items, src = [items[i] for i in kept], [src[i] for i in kept]
        tgt = self.tokenizer.encode_batch([item.references[0] for item in items])
        truncated = sum(len(s) > self.max_length or len(t) > self.max_length for s, t in zip(src, tgt, strict=True))
        if truncated:
            _report("fra_eng %s: %d pairs truncated to max_length=%d for the loss", split, truncated, self.max_length)
        return Columns(
            src=TokenIds([s[: self.max_length] for s in src]),
            tgt=TokenIds([t[: self.max_length] for t in tgt]),
            sources=[item.source for item in items],
            references=[item.references for item in items],
        )

    def _train_limit(self) -> tuple[int, str]:
        """The length bound of training pairs, and the option that set it (for messages)."""
        if self.max_train_length < self.max_length:
            return self.max_train_length, "max_train_length"
        return self.max_length, "max_length"
