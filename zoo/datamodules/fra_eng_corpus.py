"""Reading Tatoeba's ``fra.txt`` and splitting it by English sentence, as :mod:`zoo.datamodules.fra_eng` describes.

Everything here is plain Python on strings: the split is a SHA-1 hash of the normalized English
side that any tool can recompute (:func:`split_of`), deliberately independent of any library's
random generator.
"""

from __future__ import annotations

import hashlib
import logging
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import DataError
from zoo.text.subwords import normalize_text

__all__ = ["EXPECTED", "EvalItem", "FraEngSplits", "ParsedPairs", "read_pairs", "split_of", "split_pairs"]

log = logging.getLogger(__name__)

_MEMBER = "fra.txt"
EXPECTED = "a fra-eng.zip (as from the d2l data hub) or the fra.txt inside it, one 'english<TAB>french' pair a line"
"""What a corpus file must be, quoted in error messages."""


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
        raise DataError(f"{path} has no tab-separated line, so it is not a sentence-pair file. Expected {EXPECTED}.")
    if not pairs:
        raise DataError(f"{path} holds no usable sentence pair ({skipped} malformed lines). Expected {EXPECTED}.")
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
                        f"Expected {EXPECTED}."
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
        raise DataError(f"{name} is not UTF-8 text ({exc}). Expected {EXPECTED}.") from exc


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
