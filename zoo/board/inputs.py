"""What the board reads: the folders ``zoo compare`` writes and the JSON files ``zoo bench`` writes.

Each folder given with ``--records`` is searched (subfolders too, in sorted order) for

* comparisons: a folder holding ``records.jsonl`` (one record a run, :mod:`zoo.compare.records`),
  or run directories ``runs/<combination>/seed<N>/record.json`` of runs that finished while nobody
  waited; its ``failures.jsonl`` and ``report.md`` when present. Nothing under a comparison is read
  as a benchmark (its ``calibration.json`` is not one);
* benchmark results: a JSON object with ``benchmark`` (``attention``, ``state``, ``classify``,
  ``decode``, ``train``), ``environment`` and ``config``, as ``zoo bench`` writes them. Other JSON
  files (other scripts' results) are left alone.

Records of an older zoo are read as long as they hold what the page shows (:data:`RECORD_FIELDS`,
the cases and timings of a benchmark); one that does not is refused, naming its file. A folder
with neither, and a set of folders with no result at all, are refused too, one line each.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.compare.records import load_records
from zoo.compare.run import RECORD_FILE
from zoo.errors import ZooError

__all__ = [
    "BENCH_FIELDS",
    "RECORD_FIELDS",
    "BenchResult",
    "BoardInputError",
    "Comparison",
    "Inputs",
    "read_bench",
    "read_inputs",
]

#: What every record must hold for the page: written by every zoo that wrote ``records.jsonl``.
RECORD_FIELDS = ("run", "combination", "seed", "command", "metrics")
#: Per benchmark, the list of measurements, what names each, and the fields of each length's result.
BENCH_FIELDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "attention": ("cases", "name", ("length", "status")),
    "classify": ("cases", "name", ("length", "status")),
    "state": ("cases", "attention", ("length",)),
}
#: What a benchmark's measured length adds (one it failed at holds its ``status`` instead; a state
#: result of a zoo before statuses holds no ``status`` and is measured).
MEASURED_FIELDS: dict[str, tuple[str, ...]] = {"state": ("time_ms", "cache_bytes")}
#: Benchmarks the board lists on their own page without reading their lengths: per benchmark, what
#: holds its measurements, whether that is a list of results (``decode``) or one result (``train``),
#: and the fields each result needs.
LISTED_BENCHMARKS: dict[str, tuple[str, type, tuple[str, ...]]] = {
    "decode": ("results", list, ("mode", "sentences_per_second", "tokens_per_second")),
    "train": ("result", dict, ()),
}


class BoardInputError(ZooError, ValueError):
    """A records folder, record or benchmark file the board cannot read: one line naming it."""


@dataclass(frozen=True)
class Comparison:
    """One ``zoo compare`` output folder: its records (those with an evaluation's metrics and
    those without), failures and report."""

    directory: Path
    name: str
    records: tuple[dict[str, Any], ...]
    failures: tuple[dict[str, Any], ...]
    report: Path | None


@dataclass(frozen=True)
class BenchResult:
    """One ``zoo bench`` JSON file."""

    path: Path
    name: str
    kind: str
    data: dict[str, Any]

    @property
    def command(self) -> str:
        return str(self.data["environment"].get("command", ""))


@dataclass(frozen=True)
class Inputs:
    """Everything read, in a fixed order (by name), whatever order the disk lists files in."""

    comparisons: tuple[Comparison, ...]
    benches: tuple[BenchResult, ...]
    roots: tuple[Path, ...]

    @property
    def records(self) -> Iterator[tuple[Comparison, dict[str, Any]]]:
        for comparison in self.comparisons:
            for record in comparison.records:
                yield comparison, record


def read_inputs(folders: Sequence[Path]) -> Inputs:
    """Read every comparison and benchmark under ``folders``; refuse what cannot be read."""
    if not folders:
        raise BoardInputError("Give at least one folder with --records (a zoo compare --out, or zoo bench's results).")
    comparisons: dict[str, Comparison] = {}
    benches: dict[str, BenchResult] = {}
    for folder in folders:
        if not folder.is_dir():
            raise BoardInputError(
                f"--records {folder}: no such folder (give the --out folder of zoo compare or of zoo bench's JSON files)."
            )
        found = 0
        for directory in _comparison_dirs(folder):
            name = _name(directory, folder)
            comparisons.setdefault(name, _read_comparison(directory, name))
            found += 1
        for path in _bench_files(folder):
            result = read_bench(path, _name(path, folder))
            if result is not None:
                benches.setdefault(result.name, result)
                found += 1
        if not found:
            raise BoardInputError(
                f"--records {folder} is not a records folder: it holds no zoo compare records (records.jsonl) "
                "and no zoo bench results (JSON with a 'benchmark'); give the --out folder of either."
            )
    if not any(c.records for c in comparisons.values()) and not benches:
        raise BoardInputError(
            f"No results in {', '.join(str(f) for f in folders)}: the comparisons there hold no finished run "
            "(an empty records.jsonl); build the board once a run has finished."
        )
    return Inputs(
        comparisons=tuple(comparisons[k] for k in sorted(comparisons)),
        benches=tuple(benches[k] for k in sorted(benches)),
        roots=tuple(folders),
    )


def _name(path: Path, root: Path) -> str:
    """``path`` relative to the folder it was found in, led by that folder's own name."""
    relative = path.relative_to(root).as_posix()
    base = root.resolve().name
    return base if relative == "." else f"{base}/{relative}"


def _walk(folder: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``os.walk`` in sorted order, hidden folders left out."""
    for directory, subdirs, files in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        yield Path(directory), subdirs, sorted(files)


def _is_comparison(directory: Path) -> bool:
    return (directory / "records.jsonl").is_file() or any((directory / "runs").glob(f"*/seed*/{RECORD_FILE}"))


def _comparison_dirs(folder: Path) -> Iterator[Path]:
    for directory, subdirs, _ in _walk(folder):
        if _is_comparison(directory):
            subdirs[:] = []  # a comparison's runs and calibration are its own
            yield directory


def _bench_files(folder: Path) -> Iterator[Path]:
    for directory, subdirs, files in _walk(folder):
        if _is_comparison(directory):
            subdirs[:] = []
            continue
        yield from (directory / name for name in files if name.endswith(".json"))


def _read_comparison(directory: Path, name: str) -> Comparison:
    """The records of ``records.jsonl`` and of finished run directories it does not list."""
    records = {record.get("run"): record for record in load_records(directory / "records.jsonl")}
    for file in sorted((directory / "runs").glob(f"*/seed*/{RECORD_FILE}")):
        try:
            record = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # a run still writing its record
        records.setdefault(record.get("run"), record)
    for record in records.values():
        if missing := [field for field in RECORD_FIELDS if field not in record]:
            raise BoardInputError(
                f"{directory / 'records.jsonl'}: run {record.get('run', '?')} lacks {', '.join(missing)} "
                "(a record of an older zoo the board cannot read): leave that folder out, or run its comparison "
                "again into a new --out."
            )
    failures = load_records(directory / "failures.jsonl")
    report = directory / "report.md"
    ordered = sorted(records.values(), key=lambda r: (str(r["run"]), str(r.get("finished", ""))))
    return Comparison(directory, name, tuple(ordered), tuple(failures), report if report.is_file() else None)


def read_bench(path: Path, name: str) -> BenchResult | None:
    """The benchmark result in ``path``; None for a JSON file that is not one, or is the partial
    file a benchmark cut at its time limit leaves (``"partial": true``, its lengths so far and no
    case descriptions): the board shows finished measurements."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or "benchmark" not in data or "environment" not in data or data.get("partial"):
        return None
    kind = data["benchmark"]
    if kind not in BENCH_FIELDS and kind not in LISTED_BENCHMARKS:
        return None
    if not isinstance(data.get("config"), dict):
        problem: str | None = "its config"
    else:
        problem = _listed_problem(data, kind) if kind in LISTED_BENCHMARKS else _bench_problem(data, kind)
    if problem:
        raise BoardInputError(
            f"{path}: a zoo bench {kind} result without {problem} (written by an older zoo the board cannot "
            f"read): leave it out, or measure again with {data['environment'].get('command') or 'zoo bench ' + kind}."
        )
    return BenchResult(path, name, kind, data)


def _listed_problem(data: dict[str, Any], kind: str) -> str | None:
    """What a listed benchmark result of ``kind`` (``decode``, ``train``) lacks, or None."""
    holder, shape, fields = LISTED_BENCHMARKS[kind]
    held = data.get(holder)
    results = held if shape is list and isinstance(held, list) else [held]
    if not isinstance(held, shape) or not all(isinstance(result, dict) for result in results):
        return f"'{holder}'"
    for result in results:
        if missing := [field for field in fields if field not in result]:
            return f"{holder}[].{missing[0]}"
    return None


def _bench_problem(data: dict[str, Any], kind: str) -> str | None:
    """What a benchmark result of ``kind`` lacks, or None."""
    listed, key, fields = BENCH_FIELDS[kind]
    cases = data.get(listed)
    if not isinstance(cases, list):
        return f"'{listed}'"
    for case in cases:
        if key not in case or not isinstance(case.get("results"), list):
            return f"{listed}[].{key} and {listed}[].results"
        for result in case["results"]:
            measured = result.get("status", "ok") == "ok"
            required = (*fields, *MEASURED_FIELDS.get(kind, ())) if measured else fields
            if missing := [field for field in required if field not in result]:
                return f"{listed}[].results[].{missing[0]}"
            if measured and "median" not in (result.get("time_ms") or {}):
                return f"{listed}[].results[].time_ms.median"
    return None
