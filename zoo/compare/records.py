"""The comparison's records: one JSON line per finished run, appended atomically; metrics files read back."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from zoo.flags import flag_values

__all__ = ["append_record", "config_digests", "last_metrics", "load_records"]

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


def last_metrics(metrics_csv: Path, prefix: str) -> dict[str, float]:
    """The last value of each ``prefix``-named column of a CSVLogger's ``metrics.csv``."""
    if not metrics_csv.is_file():
        return {}
    values: dict[str, float] = {}
    with metrics_csv.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            values |= {
                key: float(value) for key, value in row.items() if key.startswith(prefix) and value not in ("", None)
            }
    return values


def config_digests(command: list[str]) -> dict[str, str]:
    """SHA-256 of each ``--config`` file a command reads, by the path it names. The command line
    alone does not pin a run: a config file edited between two runs of the same command trains
    another recipe, which a resumed comparison must not mix with the runs already recorded."""
    paths = [value for _, value, _ in flag_values(command, "--config", "-c")]
    return {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in paths if Path(path).is_file()}
