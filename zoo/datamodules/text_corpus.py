"""The text of a language-modelling corpus, read and split: plain-text files or a Hugging Face data set.

**Sources.** A UTF-8 text file; a folder, whose ``.txt`` files (in subfolders too) are read in
the sorted order of their paths relative to it and joined with a newline between consecutive
files, so that the last line of one never runs into the first line of the next; or a Hugging
Face data set (a Hub name, or a local directory ``datasets.load_dataset`` reads), whose text
column's rows are joined with newlines, split by split.

**Splits.** Validation is the data set's own ``validation`` split when it has one, else the last
``val_fraction`` of the text: ``train = text[:int(n * (1 - val_fraction))]``, as nanoGPT's
``prepare.py`` cuts Tiny Shakespeare at ``int(n * 0.9)``. The test split is the data set's own
``test`` split when it has one, else the validation split.

**Units.** Text is read as ``str``, or as ``bytes`` for the byte tokenizer: the cut then falls
between bytes, as enwik8's does, and a file need not be UTF-8.

Errors are raised unchained, their cause in their message: the corpus is read while LightningCLI
builds the data module (``vocab_size`` is linked into the model), and the command line reports an
error raised then by its innermost cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from zoo.datamodules.hub import load_hub_dataset, text_rows
from zoo.errors import DataError

__all__ = ["CorpusSplits", "TextCorpus", "files_identity", "text_files"]

_FIX_ENCODING = "read it as bytes with --data.tokenizer byte, or convert it to UTF-8"


@dataclass(frozen=True)
class CorpusSplits:
    """The text of each split. ``held_out``: validation is the end of the text (the corpus has no
    validation split of its own); ``test_source``: where the test text comes from, ``test``, or
    ``validation`` when the corpus has no test split of its own."""

    train: str | bytes
    validation: str | bytes
    test: str | bytes
    held_out: bool
    test_source: str


def text_files(root: Path) -> list[Path]:
    """``root`` itself, or the ``.txt`` files under the folder ``root`` in sorted order of their relative paths.

    Raises:
        DataError: a folder without ``.txt`` files.
    """
    if not root.is_dir():
        return [root]
    files = sorted((p for p in root.rglob("*.txt") if p.is_file()), key=lambda p: p.relative_to(root).as_posix())
    if not files:
        raise DataError(
            f"The folder {root} holds no .txt file: give a UTF-8 text file or a folder of .txt files with --data.path."
        )
    return files


def files_identity(root: Path) -> dict[str, Any]:
    """What identifies local data (cache keys): its files with their sizes and modification times."""
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    stats = [(p.stat(), p.relative_to(root).as_posix() if root.is_dir() else p.name) for p in files]
    return {"path": str(root), "files": [[name, stat.st_size, stat.st_mtime_ns] for stat, name in stats]}


def _decode(data: bytes, where: Path | str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
    raise DataError(f"{where} is not UTF-8 text (byte {data[start]:#04x} at offset {start}): {_FIX_ENCODING}.")


def _refuse_empty(text: str | bytes, where: str, fix: str) -> None:
    if not text.strip():
        raise DataError(f"{where} holds no text (only whitespace, or nothing): {fix}.")


class TextCorpus:
    """Reads one corpus, from ``path`` or ``dataset``, into :class:`CorpusSplits` (once).

    Args:
        path: A text file or a folder of ``.txt`` files (exclusive with ``dataset``).
        dataset: A Hugging Face data set: a Hub name or a local directory.
        column: The data set's text column.
        val_fraction: The share of the text held out for validation when the corpus has no
            validation split of its own.
        as_bytes: Read bytes (for the byte tokenizer) instead of text.
    """

    def __init__(
        self, *, path: Path | None, dataset: str | None, column: str, val_fraction: float, as_bytes: bool
    ) -> None:
        self.path, self.dataset, self.column = path, dataset, column
        self.val_fraction, self.as_bytes = val_fraction, as_bytes
        self._splits: CorpusSplits | None = None

    def splits(self) -> CorpusSplits:
        """The corpus's train, validation and test text (read on first use).

        Raises:
            DataError: no text, text that is not UTF-8 (when read as text), a data set without a
                train split or the text column, or a Hub data set out of reach.
        """
        if self._splits is None:
            own = self._read_files() if self.path is not None else self._read_dataset()
            train, held_out = own["train"], "validation" not in own
            if held_out:
                cut = int(len(train) * (1 - self.val_fraction))
                train, validation = train[:cut], train[cut:]
            else:
                validation = own["validation"]
            test_source = "test" if "test" in own else "validation"
            self._splits = CorpusSplits(train, validation, own.get("test", validation), held_out, test_source)
        return self._splits

    def identity(self) -> dict[str, Any]:
        """What identifies the source (cache keys): local files with sizes and times, or the Hub name."""
        if self.path is not None:
            return files_identity(self.path)
        local = Path(self.dataset).expanduser()  # type: ignore[arg-type]
        source = files_identity(local.resolve()) if local.is_dir() else {"hub": self.dataset}
        return {**source, "column": self.column}

    def _read_files(self) -> dict[str, str | bytes]:
        root: Path = self.path  # type: ignore[assignment]
        parts = [p.read_bytes() if self.as_bytes else _decode(p.read_bytes(), p) for p in text_files(root)]
        text = (b"\n" if self.as_bytes else "\n").join(parts)  # type: ignore[attr-defined]
        where = f"The .txt files of {root}" if root.is_dir() else str(root)
        _refuse_empty(text, where, "give a non-empty text file or folder of .txt files with --data.path")
        return {"train": text}

    def _read_dataset(self) -> dict[str, str | bytes]:
        name: str = self.dataset  # type: ignore[assignment]
        layout = f"a 'train' split (and optionally 'validation' and 'test') with a text column {self.column!r}"
        local = Path(name).expanduser()
        if local.is_dir():
            try:
                source = datasets.load_dataset(str(local.resolve()))
            except Exception as exc:  # whatever datasets could not read, say what it needs
                raise DataError(
                    f"Could not read the data set at {local}: {type(exc).__name__}: {exc}. Expected {layout}."
                ) from None  # the message holds the cause; chained, the command line would print the cause alone
        else:
            source = load_hub_dataset(
                name,
                f"--data.dataset DIR (a directory of parquet, json or csv files with {layout}) or a plain-text copy "
                "with --data.path FILE_OR_FOLDER",
            )
        if "train" not in source:
            raise DataError(f"The data set {name!r} has no 'train' split (found: {sorted(source)}). Expected {layout}.")
        own = [split for split in ("train", "validation", "test") if split in source]
        return {split: self._column_text(source[split], f"The {split!r} split of {name!r}") for split in own}

    def _column_text(self, data: datasets.Dataset, where: str) -> str | bytes:
        """The rows of the text column joined with newlines; refuses a missing column or rows that are not text."""
        if self.column not in data.column_names:
            raise DataError(
                f"{where} has no column {self.column!r} (columns: {data.column_names}): "
                "name the text column with --data.column."
            )
        text = "\n".join(text_rows(data, self.column, where).to_pylist())
        _refuse_empty(text, where, f"give a data set with text in its column {self.column!r}")
        return text.encode("utf-8") if self.as_bytes else text
