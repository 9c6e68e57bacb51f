"""A small records fixture in the layout ``zoo matrix`` writes (``quick/YARDSTICK/GROUP/``), with
made-up numbers the tests know:

* MQAR (256, 16): ``softmax`` recalls (0.99) with the largest state; ``gated_deltanet`` (0.95)
  and ``mamba2`` (three seeds, :data:`MAMBA2_SEEDS`) recall with smaller ones; ``retention`` has the
  smallest state but does not recall (0.50). So the family that recalls with the smallest state is
  ``mamba2`` (:data:`ANSWER`).
* ``gla`` at two rates: 1e-3 validates worse (0.60) but tests better (0.95) than 3e-3 (0.80,
  0.79): the cell is 0.79 at 3e-3, the rate chosen on validation.
* the decoding and speed benches at 16k and 8k; every other yardstick has no record ("not run").
* copying and needle records (the figures' inputs), under ``compare/``.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

MQAR = "mqar"
#: Test accuracy per rate per seed; validation is ``VAL`` where given, else the same.
SCORES: dict[str, dict[str, list[float]]] = {
    "softmax": {"1e-3": [0.99], "3e-3": [0.98]},
    "gated_deltanet": {"1e-3": [0.90], "3e-3": [0.95]},
    "mamba2": {"1e-3": [0.91, 0.93, 0.96], "3e-3": [0.70]},
    "retention": {"1e-3": [0.50], "3e-3": [0.40]},
    "gla": {"1e-3": [0.95], "3e-3": [0.79]},
}
VAL = {("gla", "1e-3"): 0.60, ("gla", "3e-3"): 0.80}
MAMBA2_SEEDS = SCORES["mamba2"]["1e-3"]
STATE_BYTES = {"softmax": 33_556_480, "gated_deltanet": 131_072, "mamba2": 65_536, "retention": 32_768, "gla": 98_304}
TIMES_8K = {"floor": 100.0, "softmax": 120.0, "gated_deltanet": 80.0, "mamba2": 60.0, "retention": 50.0, "gla": 70.0}
ANSWER = "mamba2"
PARAMETERS = 580_000
#: Copying and state tracking: accuracy at each test length, per row.
LENGTHS = {"deltanet": {64: 0.99, 128: 0.9, 256: 0.7}, "mamba2": {64: 0.6, 128: 0.55, 256: 0.5}}
#: Needle: accuracy per (length, depth).
NEEDLE = {"deltanet": {(512, 0): 1.0, (512, 50): 1.0, (2048, 0): 0.5, (2048, 50): 0.25}}


def _record(data: str, attention: str, seed: int, metrics: dict[str, float], extra: str = "", **over: str) -> dict:
    overrides = {"model.attention": attention, **over}
    combination = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in overrides.items())
    flags = " ".join(f"--{k}={v}" for k, v in overrides.items())
    return {
        "run": f"{combination}/seed{seed}",
        "combination": combination,
        "seed": seed,
        "command": f"python -m zoo fit --model recall --data {data} {extra}{flags} --seed_everything={seed}",
        "metrics": metrics,
        "overrides": overrides,
        "parameters": PARAMETERS,
        "finished": "2026-12-05T00:00:00+0000",
    }


def _write_records(folder: Path, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _bench(path: Path, kind: str, cases: list[dict], **config: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"benchmark": kind, "environment": {"command": f"zoo bench {kind}"}, "cases": cases}
    data["config"] = {"d_model": 256, "heads": 8, "batch": 1, **config}
    path.write_text(json.dumps(data), encoding="utf-8")


def write_matrix_records(root: Path) -> Path:
    """Write the fixture under ``root`` (``matrix/quick/...`` and ``compare/...``); return ``root``."""
    first, rest = [], []
    for name, rates in SCORES.items():
        for rate, values in rates.items():
            for seed, value in enumerate(values):
                val = VAL.get((name, rate), value)
                metrics = {"test/accuracy": value, "val/accuracy": val}
                record = _record("mqar", name, seed, metrics, "--data.seq_len 256 ", **{"model.lr": rate})
                (rest if name == "retention" else first).append(record)
    quick = root / "matrix" / "quick"
    _write_records(quick / MQAR / "first", first)
    _write_records(quick / MQAR / "rest", rest)
    state = [
        {"attention": name, "results": [{"length": 16384, "time_ms": {"median": 1.0}, "cache_bytes": size}]}
        for name, size in STATE_BYTES.items()
    ]
    _bench(quick / "decoding" / "first.json", "state", state)
    speed = [
        {"name": name, "results": [{"length": 8192, "status": "ok", "time_ms": {"median": ms}}]}
        for name, ms in TIMES_8K.items()
    ]
    _bench(quick / "speed" / "first.json", "attention", speed, causal=True, padding=False, dtype="float32")
    copying = [
        _record("parity", name, 0, {"test/accuracy": 0.8, **{f"test/accuracy/length_{n}": a for n, a in by.items()}})
        for name, by in LENGTHS.items()
    ]
    _write_records(root / "compare" / "parity", copying)
    needle = [
        _record(
            "needle",
            name,
            0,
            {"test/accuracy": 0.5, **{f"test/accuracy/length_{n}_depth_{d}": a for (n, d), a in grid.items()}},
        )
        for name, grid in NEEDLE.items()
    ]
    _write_records(root / "compare" / "needle", needle)
    return root


@pytest.fixture(scope="session")
def matrix_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The board built from the fixture, once a session: its folder."""
    from zoo.board.site import build_site

    root = write_matrix_records(tmp_path_factory.mktemp("matrix-records"))
    return build_site([root], tmp_path_factory.mktemp("matrix-site")).index.parent


class TableReader(HTMLParser):
    """The rows of a page's ``table#ID``: each ``tr``'s attributes and its cells' ``data-*`` and text;
    the footer's cells by their ``data-coverage``."""

    def __init__(self, table: str) -> None:
        super().__init__()
        self.table, self.inside, self.rows, self.headers = table, False, [], []
        self.footer: dict[str, dict[str, str]] = {}
        self.in_footer = False
        self.cell: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag == "table":
            self.inside = found.get("id") == self.table
        elif self.inside and tag == "tfoot":
            self.in_footer = True
        elif self.inside and tag == "tr" and "data-row" in found:
            self.rows.append({"attrs": found, "cells": {}})
        elif self.inside and tag in ("td", "th"):
            self.cell = {**found, "text": "", "tag": tag}
        elif self.inside and tag == "a" and self.cell is not None:
            self.cell["href"] = found.get("href", "")

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif tag == "tfoot":
            self.in_footer = False
        elif tag in ("td", "th") and self.cell is not None:
            if self.in_footer:
                self.footer[self.cell.get("data-coverage", "")] = self.cell
            elif self.cell["tag"] == "th":
                self.headers.append(self.cell)
            elif self.rows:
                self.rows[-1]["cells"][self.cell.get("data-yardstick", "")] = self.cell
            self.cell = None


def read_table(page: Path, table: str) -> TableReader:
    """The table ``table`` of ``page``, parsed."""
    reader = TableReader(table)
    reader.feed(page.read_text(encoding="utf-8"))
    return reader
