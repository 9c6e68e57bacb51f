"""The comparison's records: one JSON line per finished run, appended atomically; metrics files read back."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.flags import flag_values
from zoo.text.files import atomic_write_text

__all__ = [
    "append_record",
    "config_digests",
    "fit_seconds",
    "join_metric_rows",
    "last_metrics",
    "load_records",
    "metric_rows",
    "record_field",
]

_LOCK = threading.Lock()


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one line with a single ``O_APPEND`` write, so a crash leaves whole lines."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def load_records(path: Path) -> list[dict[str, Any]]:
    """The records in ``path`` (none when it does not exist); a torn last line is ignored."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def fit_seconds(record: dict[str, Any]) -> float | None:
    """A record's fit time in seconds. A fit that continued an interrupted one (``resumed``) and was
    recorded before its ``fit_seconds`` carried the earlier attempts' training
    (:func:`zoo.compare.run.execute`) timed its last attempt alone, while its ``train_seconds`` sums
    every attempt's training: the larger of the two is its fit's time."""
    seconds = record.get("fit_seconds")
    if record.get("resumed") and record.get("train_seconds") is not None:
        return max(seconds or 0.0, record["train_seconds"])
    return seconds


def record_field(record: dict[str, Any], field: str) -> Any:
    """A record's ``field`` (None where it has none); ``fit_seconds`` as :func:`fit_seconds` reads
    it, so every table and figure times a resumed fit whole."""
    return fit_seconds(record) if field == "fit_seconds" else record.get(field)


def seed_values(group: Sequence[dict[str, Any]], field: str) -> dict[int, float]:
    """Seed -> value of a metric, or where the runs log no metric of that name, of their records'
    ``field`` (:func:`record_field`), over the runs of ``group`` that have it."""
    values = {record["seed"]: record["metrics"].get(field, record_field(record, field)) for record in group}
    return {seed: float(value) for seed, value in values.items() if value is not None}


def last_metrics(metrics_csv: Path, prefix: str) -> dict[str, float]:
    """The last value of each ``prefix``-named column of a CSVLogger's ``metrics.csv``."""
    values: dict[str, float] = {}
    for row in metric_rows(metrics_csv):
        values |= {
            key: float(value) for key, value in row.items() if key.startswith(prefix) and value not in ("", None)
        }
    return values


def metric_rows(metrics_csv: Path) -> list[dict[str, str]]:
    """The rows of a CSVLogger's ``metrics.csv`` (none if there is no file)."""
    if not metrics_csv.is_file():
        return []
    with metrics_csv.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def join_metric_rows(earlier: list[dict[str, str]], metrics_csv: Path) -> None:
    """Put back the rows an interrupted fit logged before those of the fit that continued it.

    Lightning's CSVLogger starts ``metrics.csv`` afresh in a log directory it reuses, so a fit
    continued from ``last.ckpt`` would keep only its own rows. Of ``earlier`` (the file before the
    continued fit started) the rows before the continued fit's first step are kept; a row logged
    after the checkpoint and replayed since appears once.
    """
    later = metric_rows(metrics_csv)
    first = min((int(row["step"]) for row in later if row.get("step")), default=None)
    rows = [row for row in earlier if first is None or not row.get("step") or int(row["step"]) < first] + later
    if not rows:
        return
    columns = sorted({key for row in rows for key in row})
    with io.StringIO() as text:
        writer = csv.DictWriter(text, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(metrics_csv, text.getvalue())


def config_digests(command: list[str]) -> dict[str, str]:
    """SHA-256 of each ``--config`` file a command reads, by the path it names. The command line
    alone does not pin a run: a config file edited between two runs of the same command trains
    another recipe, which a resumed comparison must not mix with the runs already recorded."""
    paths = [value for _, value, _ in flag_values(command, "--config", "-c")]
    return {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in paths if Path(path).is_file()}
