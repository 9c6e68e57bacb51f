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

``records`` lists folders (their ``records.jsonl``), JSONL files, or ``zoo bench`` JSON files (a
record a case: its time, memory and cache at each length, its time over another case's; or a
decoding mode: :mod:`zoo.board.bench_records`); ``rows`` maps a combination to its label cells, one per
``labels`` header (a combination in two sources is written ``SOURCE:combination``, SOURCE the
folder's name or the file's stem, and ``COMBINATION@seed=N`` keeps that seed's records alone;
without ``rows``: every combination, labelled by its name);
``columns`` maps a column's spelling to its header: a test metric, a record's cost field
(``fit_seconds``, ``seconds_per_step``, ``steps``...), ``seeds`` (how many), ``METRIC (FIELD,
...)`` (the others in parentheses), ``interval METRIC`` (mean ± sd [95% interval, Student's t]),
``each METRIC`` (the mean, then each seed's value), ``by-seed METRIC`` (each seed's value alone),
``paired METRIC`` (the difference from the ``baseline`` row, seed by seed, with its interval), or
several joined by `` / `` (one cell), any of them over some seeds alone with `` @seeds=0,2``:
:mod:`zoo.board.record_cells` writes them. ``SOURCE:SPELLING`` reads the row's combination in
another source, and ``paired METRIC from SOURCE`` is the change from it, seed by seed
(:mod:`zoo.board.record_columns`). A cell is the mean
over the combination's seeds (metrics to ``decimals`` places, 3 by default; costs to three
significant digits, whole numbers from 100), with the sample sd where there are several seeds;
``bold_at_least`` bolds the metrics at or above it (each of the two is one value, or a mapping
from column spellings to values). ``notes`` heads label columns written after the records'
columns (a cell that is no record's, such as a paper's number): each row's cells list its
``labels`` cells, then its ``notes`` cells. ``pivot`` spreads one swept setting over the
columns (a column per width, rate or task, one row per combination of the other settings, and
the best value as ``zoo compare --sweep`` keeps it, or by a ``select`` metric as the matrix
keeps a rate): :mod:`zoo.board.record_pivots`.
``tests/board/test_record_tables.py`` rebuilds every page's blocks from the committed records and
fails when one differs: a measurement changes the records, and the page follows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from zoo.arguments import suggest
from zoo.bench.report import markdown_table
from zoo.board.bench_records import bench_records
from zoo.board.record_cells import CellStyle, cell_text, field_names, one_run_a_seed
from zoo.board.record_columns import column_runs, column_spelling, column_styles, needs_baseline, sourced_columns
from zoo.board.record_pivots import SOURCE, Pivot, check_values, pivot_cells, row_name
from zoo.errors import ConfigurationError
from zoo.text.files import atomic_write_text

__all__ = ["BEGIN", "END", "TableSpec", "record_tables", "render_table", "rewrite_record_tables"]

BEGIN = "<!-- records:begin"
END = "<!-- records:end -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n(?P<spec>.*?)-->\n(?P<table>.*?)" + re.escape(END), re.DOTALL)
_FIELDS = {"records", "labels", "notes", "rows", "columns", "bold_at_least", "decimals", "pivot", "baseline"}


@dataclass(frozen=True)
class TableSpec:
    """What one block shows: its sources, rows (combination -> label cells), columns (field ->
    header), the pivot that spreads a setting over columns, the baseline row of ``paired``
    columns, and how numbers are written (``style``, and ``styles`` for the columns that differ);
    ``notes`` are label columns written after the records' columns."""

    records: tuple[str, ...]
    labels: tuple[str, ...]
    rows: Mapping[str, tuple[str, ...]] | None
    columns: Mapping[str, str]
    style: CellStyle = CellStyle()
    pivot: Pivot | None = None
    baseline: str | None = None
    styles: Mapping[str, CellStyle] | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, where: str) -> TableSpec:
        """The block's YAML, checked: one line naming the field at fault."""
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigurationError(f"{where}: the records block is not YAML ({error.problem}).") from None
        if not isinstance(spec, dict) or not spec.get("records") or not (spec.get("columns") or spec.get("pivot")):
            raise ConfigurationError(
                f"{where}: a records block needs `records:` (folders or files) and `columns:` (or `pivot:`)."
            )
        if unknown := sorted(set(spec) - _FIELDS):
            raise ConfigurationError(
                f"{where}: unknown field {unknown[0]!r} in a records block; fields: {sorted(_FIELDS)}."
            )
        records = spec["records"] if isinstance(spec["records"], list) else [spec["records"]]
        labels = tuple(spec.get("labels", ["combination"]))
        notes = tuple(map(str, spec.get("notes", [])))
        rows = spec.get("rows")
        if rows is not None:
            rows = {str(name): tuple(str(cell) for cell in cells) for name, cells in rows.items()}
            if wrong := [name for name, cells in rows.items() if len(cells) != len(labels) + len(notes)]:
                raise ConfigurationError(
                    f"{where}: row {wrong[0]!r} has {len(rows[wrong[0]])} label cells for "
                    f"{len(labels) + len(notes)} labels and notes {[*labels, *notes]}."
                )
        elif notes:
            raise ConfigurationError(f"{where}: `notes:` columns need `rows:` (each row's cells, the notes last).")
        columns = {str(field): str(header) for field, header in (spec.get("columns") or {}).items()}
        pivot = None if spec.get("pivot") is None else Pivot.parse(spec["pivot"], where)
        if pivot is not None and columns and not pivot.best:
            raise ConfigurationError(
                f"{where}: columns beside a pivot read the runs at the row's best value; give the pivot `best:`."
            )
        if pivot is not None and (sourced := list(sourced_columns(columns))):
            raise ConfigurationError(f"{where}: the column {sourced[0]!r} reads another source; not beside a pivot.")
        baseline = None if spec.get("baseline") is None else str(spec["baseline"])
        if any(map(needs_baseline, columns)) and baseline is None:
            raise ConfigurationError(f"{where}: a `paired` column needs `baseline:` (the row it is paired with).")
        style, styles = column_styles(spec.get("decimals", 3), spec.get("bold_at_least"), columns, where)
        return cls(tuple(map(str, records)), labels, rows, columns, style, pivot, baseline, styles, notes)

    def style_of(self, column: str) -> CellStyle:
        """How ``column``'s numbers are written."""
        return (self.styles or {}).get(column, self.style)

    def fields(self) -> list[str]:
        """Every record field the block's cells read."""
        spellings = [*self.columns, *([self.pivot.cell] if self.pivot else [])]
        select = [self.pivot.select] if self.pivot and self.pivot.select else []
        return [name for spelling in spellings for name in field_names(column_spelling(spelling))] + select


def _read_source(source: str, root: Path, where: str) -> tuple[str, list[dict[str, Any]]]:
    """A source's name and records: a comparison's folder or JSONL file, or a benchmark's JSON
    (:mod:`zoo.board.bench_records`)."""
    path = root / source
    file = path / "records.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise ConfigurationError(
            f"{where}: no records at {source} (a folder holding records.jsonl, a JSONL file, or a zoo bench JSON)."
        )
    name = path.name if path.is_dir() else path.stem
    if file.suffix == ".json":
        if (records := bench_records(file)) is None:
            raise ConfigurationError(f"{where}: {source} is not a `zoo bench attention`, `state` or `decode` result.")
        return name, records
    return name, [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def _groups(spec: TableSpec, root: Path, where: str) -> dict[str, list[dict[str, Any]]]:
    """Each row's records, keyed by ``SOURCE:name`` and, where only one source has it, by the bare
    name too. With a pivot a row is the combination without the pivot's setting, its records
    carry their source (a pivot value may name one), and the bare name holds every source's."""
    groups: dict[str, list[dict[str, Any]]] = {}
    owners: dict[str, list[str]] = {}
    for source in spec.records:
        name, records = _read_source(source, root, where)
        for record in records:
            if spec.pivot:
                record, row = {**record, SOURCE: name}, row_name(record, spec.pivot.key)
            else:
                row = record["combination"]
            groups.setdefault(f"{name}:{row}", []).append(record)
            if name not in owners.setdefault(row, []):
                owners[row].append(name)
    for row, sources in owners.items():
        if len(sources) == 1 or spec.pivot:
            groups[row] = [r for source in sources for r in groups[f"{source}:{row}"]]
    return groups


def _row_records(groups: Mapping[str, list[dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    """A row's records: ``COMBINATION``'s, or with ``@seed=N`` that seed's alone."""
    combination, _, seed = name.partition("@seed=")
    return [r for r in groups.get(combination, []) if not seed or str(r["seed"]) == seed]


def _body(
    spec: TableSpec, groups: Mapping[str, list[dict[str, Any]]], rows: Mapping[str, Sequence[str]], where: str
) -> list[list[str]]:
    """Each row's cells: its labels, the pivot's cells, then the columns (with a pivot, over the
    runs at the row's best value)."""
    runs = {name: _row_records(groups, name) for name in rows}
    if not spec.pivot:
        for name in rows:
            one_run_a_seed(runs[name], f"the row {name!r}", where)
    pivoted = {name: pivot_cells(runs[name], spec.pivot, spec.style, where) for name in rows} if spec.pivot else {}
    read = {name: pivoted[name][1] if spec.pivot else runs[name] for name in rows}
    if spec.baseline is not None and spec.baseline not in rows:
        raise ConfigurationError(f"{where}: the baseline {spec.baseline!r} is not one of the rows {list(rows)}.")
    seen = dict(read)  # one list a name: the baseline row knows itself

    def runs_of(name: str) -> list[dict[str, Any]]:
        if name not in seen:
            seen[name] = _row_records(groups, name)
            one_run_a_seed(seen[name], f"the row {name!r}", where)
        return seen[name]

    def cell(name: str, field: str) -> str:
        group, paired = column_runs(field, name, read[name], spec.baseline, runs_of)
        return cell_text(group, column_spelling(field), spec.style_of(field), paired) if group else "-"

    return [
        [
            *labels[: len(labels) - len(spec.notes)],
            *(pivoted[name][0] if spec.pivot else []),
            *(cell(name, field) for field in spec.columns),
            *labels[len(labels) - len(spec.notes) :],
        ]
        for name, labels in rows.items()
    ]


def render_table(spec: TableSpec, root: Path, where: str = "records block") -> str:
    """The block's Markdown table from the records under ``root`` (the repository)."""
    groups = _groups(spec, root, where)
    if spec.rows is None:
        names = [key for key in groups if ":" not in key or key.split(":", 1)[1] not in groups]
        rows = {name: (f"`{name}`",) for name in names}
    else:
        rows = dict(spec.rows)
    sources = sorted({key.split(":", 1)[0] for key in groups if ":" in key})
    if strange := {field: source for field, source in sourced_columns(spec.columns).items() if source not in sources}:
        field = next(iter(strange))
        raise ConfigurationError(
            f"{where}: the column {field!r} reads {strange[field]!r}, not one of the sources {sources}."
        )
    missing = [name for name in rows if not _row_records(groups, name)]
    if missing:
        near = suggest(missing[0], list(groups))
        hint = f"; did you mean {near[0]!r}?" if near else f"; the records hold {sorted(groups)}"
        raise ConfigurationError(f"{where}: no records of {missing[0]!r}{hint}")
    known = {"seeds", *(f for group in groups.values() for r in group for f in (*r["metrics"], *r))}
    if unknown := [name for name in spec.fields() if name not in known]:
        near = suggest(unknown[0], sorted(known))
        raise ConfigurationError(
            f"{where}: no record has {unknown[0]!r}" + (f"; did you mean {near[0]!r}?" if near else ".")
        )
    if spec.pivot:
        check_values(spec.pivot, [r for group in groups.values() for r in group], where)
    headers = [*spec.labels, *(spec.pivot.all_headers() if spec.pivot else []), *spec.columns.values(), *spec.notes]
    return markdown_table(headers, _body(spec, groups, rows, where))


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
