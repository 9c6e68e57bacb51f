"""The published findings beside the matrix's families: ``published.yaml`` in the matrix's protocol
folder (``configs/matrix/published.yaml``).

Each entry names the rows it speaks of, the task, the paper, a verdict (``agrees``, ``partly`` or
``not reproduced``), what the paper reports, what the zoo measured, how the two protocols differ,
and the results page section that holds the numbers (``docs/results/PAGE.md#anchor``). The board
shows an entry on the family page of each of its rows, so a reader of a family's row sees where it
departs from the literature and why, next to the cells.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from zoo.errors import ConfigurationError

__all__ = ["FILE", "VERDICTS", "Finding", "code_spans", "findings_for", "read_findings"]

#: The file's name inside the protocol folder.
FILE = "published.yaml"
VERDICTS = ("agrees", "partly", "not reproduced")


@dataclass(frozen=True)
class Finding:
    """One published finding and the zoo's measurement of the same task."""

    rows: tuple[str, ...]
    task: str
    source: str
    verdict: str
    published: str
    here: str
    protocols: str
    see: str

    @property
    def page(self) -> str:
        """The results page of ``see``, without its anchor."""
        return self.see.partition("#")[0]

    @property
    def anchor(self) -> str:
        """The heading's anchor within :attr:`page`."""
        return self.see.partition("#")[2]


def read_findings(protocols: Path) -> list[Finding]:
    """The entries of ``protocols / published.yaml`` (none where the folder has no such file),
    checked: every field present and a string, ``rows`` a non-empty list, a known verdict, and
    ``see`` a page with an anchor."""
    path = protocols / FILE
    if not path.is_file():
        return []
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{path}: not YAML ({getattr(error, 'problem', error)}).") from None
    if not isinstance(entries, list):
        raise ConfigurationError(f"{path}: a list of findings, one mapping each.")
    names = [field.name for field in fields(Finding)]
    found = []
    for number, entry in enumerate(entries, 1):
        where = f"{path}, entry {number}"
        if not isinstance(entry, dict) or sorted(entry) != sorted(names):
            keys = sorted(entry) if isinstance(entry, dict) else entry
            raise ConfigurationError(f"{where}: the fields are {names}; got {keys}.")
        rows = entry["rows"]
        if not isinstance(rows, list) or not rows or not all(isinstance(row, str) for row in rows):
            raise ConfigurationError(f"{where}: `rows` lists the attention names it speaks of.")
        if wrong := [name for name in names[1:] if not isinstance(entry[name], str) or not entry[name].strip()]:
            raise ConfigurationError(f"{where}: `{wrong[0]}` is text, and not empty.")
        if entry["verdict"] not in VERDICTS:
            raise ConfigurationError(f"{where}: verdict {entry['verdict']!r} is not one of {list(VERDICTS)}.")
        if "#" not in entry["see"]:
            raise ConfigurationError(f"{where}: `see` is a results page and a heading's anchor (PAGE.md#anchor).")
        found.append(Finding(tuple(rows), *(" ".join(entry[name].split()) for name in names[1:])))
    return found


def findings_for(findings: Sequence[Finding], name: str) -> list[Finding]:
    """The findings that speak of the row ``name``, in the file's order."""
    return [finding for finding in findings if name in finding.rows]


def code_spans(text: str) -> str:
    """``text`` as HTML, its Markdown code spans (```name```) as ``<code>`` (a Jinja filter of the
    board: the entries are written as the results pages are)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))
