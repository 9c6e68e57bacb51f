"""Tables of ``zoo compare`` records inside the results pages, written by code, never typed.

A results page names, in an HTML comment that opens a block, the records a table shows and how; the
lines up to the block's end are the table, which ``python -m zoo board --markdown PAGE`` rewrites
from the committed records (the prose around a block is the page's own)::

    <!-- records:begin
    records: [benchmarks/results/compare/parity, benchmarks/results/compare/parity_gated]
    labels: [attention, eigenvalues]
    rows:
      attention=deltanet: ["`deltanet`", "[0, 1]"]
      attention=deltanet_negative_eigenvalues=True_: ["`deltanet`", "[-1, 1]"]
    columns: {test/accuracy/length_40: length 40, test/accuracy/length_256: "256", fit_seconds: fit s}
    bold_at_least: 0.95
    -->
    | attention | eigenvalues | length 40 | 256 | fit s |
    ...
    <!-- records:end -->

``records`` lists folders (their ``records.jsonl``) or JSONL files; ``rows`` maps a combination
to its label cells, one per ``labels`` header (a combination in two sources is written
``SOURCE:combination``, SOURCE the folder's name or the file's stem, and ``COMBINATION@seed=N``
keeps that seed's records alone; without ``rows``: every combination, labelled by its name);
``columns`` maps a test metric, a record's cost field (``fit_seconds``, ``seconds_per_step``,
``steps``...), ``seeds`` (how many), or metrics joined by `` / `` (one cell), to its header. A
cell is the mean over the combination's seeds (metrics to ``decimals`` places, 3 by default; costs
to three significant digits, whole numbers from 100), with the sample sd where there are several
seeds; ``bold_at_least`` bolds the metrics at or above it. ``tests/board/test_record_tables.py``
rebuilds every page's blocks from the committed records and fails when one differs: a
measurement changes the records, and the page follows.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from zoo.arguments import suggest
from zoo.bench.report import markdown_table
from zoo.errors import ConfigurationError
from zoo.text.files import atomic_write_text

__all__ = ["BEGIN", "END", "TableSpec", "record_tables", "render_table", "rewrite_record_tables"]

BEGIN = "<!-- records:begin"
END = "<!-- records:end -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n(?P<spec>.*?)-->\n(?P<table>.*?)" + re.escape(END), re.DOTALL)
_FIELDS = {"records", "labels", "rows", "columns", "bold_at_least", "decimals"}


@dataclass(frozen=True)
class TableSpec:
    """What one block shows: its sources, rows (combination -> label cells), columns (field ->
    header) and the threshold above which metrics are bold."""

    records: tuple[str, ...]
    labels: tuple[str, ...]
    rows: Mapping[str, tuple[str, ...]] | None
    columns: Mapping[str, str]
    bold_at_least: float | None = None
    decimals: int = 3

    @classmethod
    def parse(cls, text: str, where: str) -> TableSpec:
        """The block's YAML, checked: one line naming the field at fault."""
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigurationError(f"{where}: the records block is not YAML ({error.problem}).") from None
        if not isinstance(spec, dict) or not spec.get("records") or not spec.get("columns"):
            raise ConfigurationError(f"{where}: a records block needs `records:` (folders or files) and `columns:`.")
        if unknown := sorted(set(spec) - _FIELDS):
            raise ConfigurationError(
                f"{where}: unknown field {unknown[0]!r} in a records block; fields: {sorted(_FIELDS)}."
            )
        records = spec["records"] if isinstance(spec["records"], list) else [spec["records"]]
        labels = tuple(spec.get("labels", ["combination"]))
        rows = spec.get("rows")
        if rows is not None:
            rows = {str(name): tuple(str(cell) for cell in cells) for name, cells in rows.items()}
            if wrong := [name for name, cells in rows.items() if len(cells) != len(labels)]:
                raise ConfigurationError(
                    f"{where}: row {wrong[0]!r} has {len(rows[wrong[0]])} label cells for {len(labels)} labels {list(labels)}."
                )
        columns = {str(field): str(header) for field, header in spec["columns"].items()}
        return cls(
            tuple(map(str, records)), labels, rows, columns, spec.get("bold_at_least"), int(spec.get("decimals", 3))
        )


def _read_source(source: str, root: Path, where: str) -> tuple[str, list[dict[str, Any]]]:
    path = root / source
    file = path / "records.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise ConfigurationError(f"{where}: no records at {source} (a folder holding records.jsonl, or a JSONL file).")
    name = path.name if path.is_dir() else path.stem
    return name, [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def _groups(spec: TableSpec, root: Path, where: str) -> dict[str, list[dict[str, Any]]]:
    """Each combination's records, keyed by ``SOURCE:combination`` and, where only one source has
    it, by the bare combination too."""
    groups: dict[str, list[dict[str, Any]]] = {}
    owners: dict[str, list[str]] = {}
    for source in spec.records:
        name, records = _read_source(source, root, where)
        for record in records:
            groups.setdefault(f"{name}:{record['combination']}", []).append(record)
            if name not in owners.setdefault(record["combination"], []):
                owners[record["combination"]].append(name)
    for combination, sources in owners.items():
        if len(sources) == 1:
            groups[combination] = groups[f"{sources[0]}:{combination}"]
    return groups


def _cell(group: Sequence[dict[str, Any]], field: str, spec: TableSpec) -> str:
    if field == "seeds":
        return str(len({r["seed"] for r in group}))
    if " / " in field:  # several metrics in one cell: the needle's depths at one length
        return " / ".join(_cell(group, part, spec) for part in field.split(" / "))
    values = [float(v) for r in group if (v := r["metrics"].get(field, r.get(field))) is not None]
    if not values:
        return "-"
    metric = field in group[0]["metrics"]
    mean = statistics.fmean(values)
    text = f"{mean:.{spec.decimals}f}" if metric else f"{mean:,.0f}" if abs(mean) >= 100 else f"{mean:.3g}"
    if metric and len(values) > 1:
        text += f" ± {statistics.stdev(values):.{spec.decimals}f}"
    bold = metric and spec.bold_at_least is not None and mean >= spec.bold_at_least
    return f"**{text}**" if bold else text


def _row_records(groups: Mapping[str, list[dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    """A row's records: ``COMBINATION``'s, or with ``@seed=N`` that seed's alone."""
    combination, _, seed = name.partition("@seed=")
    return [r for r in groups.get(combination, []) if not seed or str(r["seed"]) == seed]


def render_table(spec: TableSpec, root: Path, where: str = "records block") -> str:
    """The block's Markdown table from the records under ``root`` (the repository)."""
    groups = _groups(spec, root, where)
    if spec.rows is None:
        names = [key for key in groups if ":" not in key or key.split(":", 1)[1] not in groups]
        rows = {name: (f"`{name}`",) for name in names}
    else:
        rows = dict(spec.rows)
    missing = [name for name in rows if not _row_records(groups, name)]
    if missing:
        near = suggest(missing[0], list(groups))
        hint = f"; did you mean {near[0]!r}?" if near else f"; the records hold {sorted(groups)}"
        raise ConfigurationError(f"{where}: no records of {missing[0]!r}{hint}")
    known = {"seeds", *(f for group in groups.values() for r in group for f in (*r["metrics"], *r))}
    if unknown := [part for field in spec.columns for part in field.split(" / ") if part not in known]:
        near = suggest(unknown[0], sorted(known))
        raise ConfigurationError(
            f"{where}: no record has {unknown[0]!r}" + (f"; did you mean {near[0]!r}?" if near else ".")
        )
    body = [
        [*labels, *(_cell(_row_records(groups, name), field, spec) for field in spec.columns)]
        for name, labels in rows.items()
    ]
    return markdown_table([*spec.labels, *spec.columns.values()], body)


def record_tables(text: str) -> Iterator[re.Match[str]]:
    """The records blocks of a page's text, in order."""
    return _BLOCK.finditer(text)


def rewrite_record_tables(page: Path, root: Path) -> tuple[int, bool]:
    """Rewrite every records block of ``page`` from the records under ``root``: how many blocks it
    holds, and whether the page changed (written atomically)."""
    text = page.read_text(encoding="utf-8")
    blocks = list(record_tables(text))
    count = len(blocks)
    if text.count(BEGIN) != count or text.count(END) != count:
        raise ConfigurationError(
            f"{page}: {text.count(BEGIN)} records blocks open and {text.count(END)} close, {count} whole; "
            f"each opens with {BEGIN!r}, its YAML, '-->', the table, then a line {END!r}."
        )
    pieces: list[str] = []
    last = 0
    for block in blocks:
        where = f"{page}:{text.count(chr(10), 0, block.start()) + 1}"
        table = render_table(TableSpec.parse(block["spec"], where), root, where)
        pieces += [text[last : block.start("table")], table, "\n"]
        last = block.end("table")
    new = "".join(pieces) + text[last:]
    if new != text:
        atomic_write_text(page, new)
    return count, new != text
