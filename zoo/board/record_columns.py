"""Which runs a records table's column reads, and how it writes their numbers.

A column's spelling (:mod:`zoo.board.record_cells`) reads the row's runs. Two forms read another
study's runs of the same combination, so that a block over several sources can set a study beside
another one (a layer against the per-head form it replaced)::

    SOURCE:SPELLING              SPELLING over the row's combination in SOURCE (the folder's name or
                                 the file's stem): "lm_variants:val/loss"
    paired METRIC from SOURCE    the row's METRIC minus the same combination's in SOURCE, seed by
                                 seed on the seeds both have, with its 95% interval (a change
                                 between two studies; with no ``baseline:`` row)

For the row ``SOURCE:COMBINATION`` (or a bare ``COMBINATION``) these columns read
``OTHER:COMBINATION``, OTHER the column's source; a ``SOURCE:paired`` column pairs it with the
baseline row's combination in OTHER. Neither form goes beside a ``pivot`` (whose rows gather
every source).

``decimals`` and ``bold_at_least`` are one value for every metric column, or a mapping from
column spellings to values: a column it does not name has 3 decimals and no bold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from zoo.board.record_cells import CellStyle
from zoo.errors import ConfigurationError

__all__ = ["column_runs", "column_spelling", "column_styles", "needs_baseline", "sourced_columns"]

_SOURCED = re.compile(r"^(?P<source>[\w.-]+):(?P<spelling>.+)$")
_FROM = re.compile(r"^paired (?P<metric>\S+) from (?P<source>[\w.-]+)$")


def column_spelling(field: str) -> str:
    """The spelling of :mod:`zoo.board.record_cells` a column reads, its source left off."""
    if match := _FROM.match(field):
        return f"paired {match['metric']}"
    match = _SOURCED.match(field)
    return match["spelling"] if match else field


def needs_baseline(field: str) -> bool:
    """Whether the column pairs its row with the block's ``baseline:`` row."""
    parts = column_spelling(field).split(" / ")
    return not _FROM.match(field) and any(part.startswith("paired ") for part in parts)


def sourced_columns(columns: Mapping[str, str]) -> dict[str, str]:
    """The columns that read another source than their row's: spelling -> that source."""
    return {field: match["source"] for field in columns if (match := _FROM.match(field) or _SOURCED.match(field))}


def _in(source: str, row: str) -> str:
    """The row's combination (its seed suffix kept) in ``source``."""
    return f"{source}:{row.split(':', 1)[1] if ':' in row else row}"


def column_runs(
    field: str,
    row: str,
    runs: list[dict[str, Any]],
    baseline: str | None,
    read: Callable[[str], list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The runs ``field`` reads for ``row`` (whose own are ``runs``), and the runs it is paired
    with: ``read(name)`` gives a row name's runs, ``baseline`` is the block's baseline row."""
    if match := _FROM.match(field):
        return runs, read(_in(match["source"], row))
    if match := _SOURCED.match(field):
        other = read(_in(match["source"], baseline)) if baseline is not None else None
        return read(_in(match["source"], row)), other
    return runs, read(baseline) if baseline is not None else None


def column_styles(
    decimals: object, bold: object, columns: Mapping[str, str], where: str
) -> tuple[CellStyle, dict[str, CellStyle]]:
    """The block's style, and each column's where ``decimals`` or ``bold_at_least`` is a mapping."""
    for name, value in (("decimals", decimals), ("bold_at_least", bold)):
        if isinstance(value, dict) and (unknown := [str(key) for key in value if str(key) not in columns]):
            raise ConfigurationError(
                f"{where}: `{name}:` names {unknown[0]!r}, not one of the columns {list(columns)}."
            )
    places = {str(k): int(v) for k, v in decimals.items()} if isinstance(decimals, dict) else {}
    at_least = {str(k): float(v) for k, v in bold.items()} if isinstance(bold, dict) else {}
    style = CellStyle(3 if places else int(decimals), None if at_least or bold is None else float(bold))
    return style, {
        column: CellStyle(places.get(column, style.decimals), at_least.get(column, style.bold_at_least))
        for column in columns
    }
