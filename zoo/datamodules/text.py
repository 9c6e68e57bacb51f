"""Language-modelling data: any text as windows of token ids, read by characters, bytes or a byte-level BPE.

The corpus is a text file or a folder of ``.txt`` files (``--data.path``), or a Hugging Face data
set (``--data.dataset NAME --data.column text``); :mod:`zoo.datamodules.text_corpus` reads and
splits it (validation: the data set's own split, or the last ``val_fraction`` of the text; test:
the data set's own split, or else the validation split). Its codec (:mod:`zoo.text.language`) is
chosen by ``--data.tokenizer``:

* ``char``: nanoGPT's ``shakespeare_char`` protocol. The vocabulary is the sorted distinct
  characters of the **whole** corpus, validation and test included, as nanoGPT's ``prepare.py``
  takes them; validation then never meets an unknown character, and its losses compare with
  nanoGPT's. (This reveals which characters occur in the held-out text, never how often.)
* ``byte``: 256 ids, one per byte, nothing unknown (enwik8's reading); the file need not be UTF-8.
* ``bpe``: a byte-level BPE of ``bpe_vocab_size`` ids, trained with ``tokenizers`` on the
  training split only; nothing unknown.

The codec (the characters, or the BPE's JSON) is cached under ``cache_dir`` on first use, before
``setup``: LightningCLI links ``vocab_size`` (and ``block_size``) into the model when it
instantiates both, and every checkpoint carries the codec, so generation needs nothing else.

Training, validation and test batches are windows of the encoded splits
(:mod:`zoo.datamodules.windows`): random windows for training, an "epoch" being
``train_windows`` of them (the run's length is set by ``--trainer.max_steps``); fixed windows that
cover validation and test exactly once.
"""

from __future__ import annotations

import json
import logging
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor
from torch.utils.data import DataLoader

from zoo.datamodules.base import SplitsDataModule, check_minimums
from zoo.datamodules.download import download
from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.text_corpus import TextCorpus
from zoo.datamodules.windows import evaluation_windows, random_windows
from zoo.errors import DataError
from zoo.text.codecs import CODEC_VERSION, check_texts, restore_codec
from zoo.text.datasets import Columns
from zoo.text.files import load_or_build
from zoo.text.language import LANGUAGE_CODECS, BPECodec, ByteLevelCodec, CharCodec, LanguageCodec

__all__ = ["TOKENIZERS", "TextDataModule"]

log = logging.getLogger(__name__)

TOKENIZERS = ("char", "byte", "bpe")
"""The values of ``--data.tokenizer``."""

TRAIN_BATCHES = 1000
"""Batches per epoch (on one process) when ``train_windows`` is not given."""


@rank_zero_only
def _report(message: str, *args: object) -> None:
    log.info(message, *args)


@register_datamodule("text")
class TextDataModule(SplitsDataModule[Tensor]):
    """Any text as windows of token ids, for a decoder-only language model (see the module docstring).

    Batches are ``{"tokens": LongTensor (B, L)}``; a model predicts ``tokens[:, 1:]`` from
    ``tokens[:, :-1]``. Training: ``(batch_size, block_size + 1)``. Validation and test:
    ``(b, block_size + 1)`` with ``b <= batch_size``, and at the end, when the split leaves one, a
    shorter window alone, ``(1, r + 1)``. Predict: one prompt per batch, ``{"tokens": (1, L),
    "text": [prompt]}``.

    Args:
        path: A UTF-8 text file, or a folder whose ``.txt`` files (sorted by path, subfolders
            included) are joined with a newline between files. Exclusive with ``dataset``.
        dataset: A Hugging Face data set: a Hub name, or a local directory that
            ``datasets.load_dataset`` reads (parquet, json, csv files). Its ``train`` split is
            required; its ``validation`` and ``test`` splits are used when it has them.
        column: The data set's text column; its rows are joined with newlines.
        tokenizer: ``char`` (sorted distinct characters of the whole corpus), ``byte`` (256 ids)
            or ``bpe`` (a byte-level BPE trained on the training split).
        bpe_vocab_size: The BPE's ids, the 256 bytes included (``bpe`` only; fewer if the
            training text runs out of pairs to merge).
        block_size: Tokens a model reads at once; windows hold ``block_size + 1``.
        val_fraction: The last share of the text held out for validation (nanoGPT's 10%), unless
            the data set has a validation split.
        batch_size: Windows per batch.
        train_windows: Random windows per training epoch, over all processes, rounded up to whole
            batches on each; default ``1000 * batch_size`` (1,000 steps on one process). The
            run's length is ``--trainer.max_steps``; an epoch only paces validation and checkpoints.
        num_workers: DataLoader worker processes; ``None``: none on a CPU, a few on a GPU.
        cache_dir: Where the codec (and a download) is cached; default
            ``~/.cache/attention-zoo/<name>``, or ``$ZOO_CACHE_DIR/<name>``.
        seed: Seeds the training windows: those of epoch ``e`` are a function of ``(seed, e)``.
        predict_texts: Prompts to continue in the predict stage.
        predict_file: A UTF-8 file of prompts, one a line (blank lines skipped).
    """

    name = "text"
    collator = None
    """DataLoader's default: window items stack into ``{"tokens": (B, L)}``, evaluation's come batched."""
    download_url: ClassVar[str | None] = None
    """A public copy fetched into ``cache_dir`` when neither ``path`` nor ``dataset`` is given (None: one is required)."""
    download_sha256: ClassVar[str | None] = None
    """The SHA-256 the download must have."""
    local_copy: ClassVar[str] = "FILE_OR_FOLDER"
    """What ``--data.path`` should name when the download fails (quoted in its message)."""

    def __init__(
        self,
        path: str | None = None,
        dataset: str | None = None,
        column: str = "text",
        tokenizer: Literal["char", "byte", "bpe"] = "char",
        bpe_vocab_size: int = 2048,
        block_size: int = 256,
        val_fraction: float = 0.1,
        batch_size: int = 64,
        train_windows: int | None = None,
        num_workers: int | None = None,
        cache_dir: str | None = None,
        seed: int = 0,
        predict_texts: list[str] | None = None,
        predict_file: str | None = None,
    ) -> None:
        super().__init__(
            batch_size=batch_size, max_length=block_size + 1, num_workers=num_workers, cache_dir=cache_dir,
            seed=seed, predict_texts=predict_texts, predict_file=predict_file,
        )  # fmt: skip
        self.save_hyperparameters()
        check_minimums(
            block_size=(block_size, 1), bpe_vocab_size=(bpe_vocab_size, 256), train_windows=(train_windows, 1)
        )
        if tokenizer not in TOKENIZERS:
            raise DataError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}.")
        if not 0 < val_fraction < 1:
            raise DataError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction}.")
        if path is not None and dataset is not None:
            raise DataError("Give the corpus with either --data.path or --data.dataset, not both.")
        if path is None and dataset is None and self.download_url is None:
            raise DataError(
                f"The {self.name} data module needs a corpus: --data.path FILE_OR_FOLDER (plain text) or "
                "--data.dataset NAME (a Hugging Face data set; --data.column names its text column)."
            )
        self.path = _existing(path)
        self.dataset, self.column, self.tokenizer = dataset, column, tokenizer
        self.bpe_vocab_size, self.block_size, self.val_fraction = bpe_vocab_size, block_size, val_fraction
        self.train_windows = TRAIN_BATCHES * batch_size if train_windows is None else train_windows

    # -- what the model needs, available right after construction ---------------------------------

    @cached_property
    def codec(self) -> LanguageCodec:
        """Text to ids and back: loaded from the cache, or built (and cached) on first use."""
        return self._load_or_build_codec()

    @property
    def vocab_size(self) -> int:
        """Rows of the model's embedding table and its output logits."""
        return self.codec.vocab_size

    @cached_property
    def corpus(self) -> TextCorpus:
        """The corpus reader (the public copy is downloaded first when it is the source)."""
        return TextCorpus(
            path=self._corpus_path(), dataset=self.dataset, column=self.column,
            val_fraction=self.val_fraction, as_bytes=self.tokenizer == "byte",
        )  # fmt: skip

    @property
    def codec_file(self) -> Path:
        """The cached codec, named by a hash of everything that changes it."""
        bpe = self.tokenizer == "bpe"
        return self.cache_file("codec", {
            "source": self._source_identity(),
            "tokenizer": self.tokenizer,
            "bpe_vocab_size": self.bpe_vocab_size if bpe else None,
            "val_fraction": self.val_fraction if bpe else None,  # the BPE learns from the training split only
            "codec_version": CODEC_VERSION,
        })  # fmt: skip

    # -- Lightning hooks and the corpus-specific parts of the base ----------------------------------

    def prepare_data(self) -> None:
        """Download (the public copy) or read the corpus, and cache the codec; once per node, before ``setup``."""
        self.corpus.splits()
        self.codec = self._load_or_build_codec()

    def build_split(self, split: str) -> Tensor:
        """The ids of ``split``, in the smallest integer type that holds them.

        Raises:
            DataError: the split is shorter than one window of ``block_size + 1`` tokens.
        """
        splits = self.corpus.splits()
        if split == "test" and splits.test_source == "validation":
            _report("%s has no test split of its own: the test stage reads the validation split", self.name)
            if "validation" in self._datasets:
                return self._datasets["validation"]
        ids = torch.from_numpy(self.codec.encode_array(getattr(splits, split)))
        self._check_length(split, len(ids))
        _report("%s %s: %d tokens (%s)", self.name, split, len(ids), self.codec.unit)
        return ids

    def training_batches(self, split: Tensor) -> DataLoader:
        """``train_windows`` random windows of the training split per epoch, drawn from ``(seed, epoch)``;
        under several processes, each draws others; resumable mid-epoch."""
        return random_windows(
            split,
            self.block_size,
            self.batch_size,
            self.train_windows,
            self.seed,
            self.trainer,
            **self._loader_kwargs(),
        )

    def evaluation_batches(self, split: Tensor) -> DataLoader:
        """Every validation or test target once, in fixed windows; under several processes, whole batches each."""
        return evaluation_windows(split, self.block_size, self.batch_size, self.trainer, **self._loader_kwargs())

    @property
    def predict_batch_size(self) -> int:
        """One prompt per batch: ``{"tokens": (1, L), "text": [prompt]}`` (nothing pads prompts of other lengths)."""
        return 1

    def predict_dataset(self, inputs: list[Any]) -> Columns:
        """Items ``{"tokens": ids, "text": prompt}``.

        Raises:
            DataError: no prompts, an empty one, or one with characters the codec cannot encode.
        """
        where = "predict_texts" if self.predict_file is None else f"the lines of {self.predict_file}"
        check_texts(inputs, where, action="continue")
        tokens = []
        for index, text in enumerate(inputs):
            try:
                tokens.append(torch.tensor(self.codec.encode(text), dtype=torch.long))
            except DataError as exc:
                raise DataError(f"{where}[{index}]: {exc}") from exc
        return Columns(tokens=tokens, text=inputs)

    # -- internals -----------------------------------------------------------------------------------

    def _corpus_path(self) -> Path | None:
        """``path``, or the verified public copy (downloaded into ``cache_dir`` when missing)."""
        if self.path is not None or self.dataset is not None:
            return self.path
        url: str = self.download_url  # type: ignore[assignment]
        destination = self.cache_dir / url.rsplit("/", 1)[-1]
        return download(url, destination, sha256=self.download_sha256, local_copy=self.local_copy)

    def _source_identity(self) -> dict[str, Any]:
        """What identifies the corpus without reading it (nor downloading it)."""
        if self.path is None and self.dataset is None:
            return {"url": self.download_url, "sha256": self.download_sha256}
        return self.corpus.identity()

    def _load_or_build_codec(self) -> LanguageCodec:
        """The byte codec, or the cached codec for these settings, or one built from the corpus and cached."""
        if self.tokenizer == "byte":
            return ByteLevelCodec()
        return load_or_build(
            self.codec_file, what="codec", build=self._build_codec, read=_read_codec, write=_codec_text
        )

    def _build_codec(self) -> LanguageCodec:
        """The characters of the whole corpus, or a BPE trained on the training split."""
        splits = self.corpus.splits()
        if self.tokenizer == "char":
            return CharCodec.from_texts([splits.train, splits.validation, splits.test])  # type: ignore[list-item]
        _report("Training a %d-id byte-level BPE on the %s training split", self.bpe_vocab_size, self.name)
        return BPECodec.train([splits.train], self.bpe_vocab_size)  # type: ignore[list-item]

    def _check_length(self, split: str, tokens: int) -> None:
        """Refuse a split shorter than one window, naming both sizes and the fix."""
        window = self.block_size + 1
        if tokens >= window:
            return
        fixes = [f"lower --data.block_size to at most {tokens - 1}"] if tokens > 1 else []
        if split != "train" and self.corpus.splits().held_out:
            fixes.append("raise --data.val_fraction")
        fixes.append("give more text")
        raise DataError(
            f"The {split} split of {self.name} holds {tokens:,} tokens, fewer than one window of block_size + 1 = "
            f"{window:,}: {', or '.join(fixes)}."
        )


def _read_codec(text: str) -> LanguageCodec:
    """The codec of a cache file's text (:func:`_codec_text`)."""
    return restore_codec(json.loads(text), LANGUAGE_CODECS)  # type: ignore[return-value]


def _codec_text(codec: LanguageCodec) -> str:
    """A codec as a cache file's text: its state as JSON."""
    return json.dumps(codec.state_dict())


def _existing(path: str | None) -> Path | None:
    """``path`` resolved, or a one-line error when it does not exist."""
    if path is None:
        return None
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise FileNotFoundError(
            f"The text corpus {path!r} does not exist: give a UTF-8 text file or a folder of .txt files with --data.path."
        )
    return resolved
