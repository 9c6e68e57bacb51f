"""The benchmarks' numbers the board shows: forward+backward time over lengths (``zoo bench
attention``) and a decoded token's time and cache (``zoo bench state``), each under the
conditions it was measured in.

A condition is everything a time depends on besides the case and the length: the device, dtype,
batch, width, heads, and for ``attention`` whether the sweep was causal and padded. Times of
different conditions never share a column. Where two results measured the same case at the same
length under the same condition, the newer one counts (:mod:`zoo.board.chronology`); the other
stays on its own benchmark page. Results of a zoo that wrote no ``padding`` (before the option
existed) were padded: that was the only way it measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zoo.board.chronology import recency
from zoo.board.inputs import BenchResult

__all__ = ["Chosen", "Condition", "Measurement", "latest_measurements", "measurements"]


@dataclass(frozen=True, order=True)
class Condition:
    """What a time was measured under, apart from the case and the length."""

    benchmark: str
    device: str
    dtype: str
    batch: int
    d_model: int
    heads: int
    causal: bool
    padding: bool

    @property
    def label(self) -> str:
        """``cpu, batch 1, d_model 256, 8 heads, float32, causal, padded``."""
        parts = [self.device, f"batch {self.batch}", f"d_model {self.d_model}", f"{self.heads} heads", self.dtype]
        if self.benchmark == "attention":
            parts += ["causal" if self.causal else "not causal", "padded" if self.padding else "no padding"]
        return ", ".join(parts)

    @property
    def short(self) -> str:
        """``cpu B1 causal`` for a column header."""
        parts = [self.device.replace("NVIDIA ", ""), f"B{self.batch}"]
        if self.benchmark == "attention":
            parts += ["causal" if self.causal else "", "" if self.padding else "unpadded"]
        if (self.d_model, self.heads, self.dtype) != (256, 8, "float32"):
            parts.append(f"{self.d_model}/{self.heads}h/{self.dtype}")
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class Measurement:
    """One case at one length: its median time (ms; None where it did not run) and what else was recorded."""

    source: BenchResult
    condition: Condition
    case: str
    length: int
    status: str
    time_ms: float | None
    memory_mib: float | None = None
    cache_bytes: int | None = None


def _condition(result: BenchResult) -> Condition:
    config: dict[str, Any] = result.data["config"]
    environment: dict[str, Any] = result.data["environment"]
    device = str(environment.get("cuda_device") or environment.get("device") or "cpu")
    return Condition(
        benchmark=result.kind,
        device=device if device != "cuda" else "cuda",
        dtype=str(config.get("dtype") or "float32"),
        batch=int(config.get("batch") or 0),
        d_model=int(config.get("d_model") or 0),
        heads=int(config.get("heads") or 0),
        causal=bool(config.get("causal", False)),
        padding=True if config.get("padding") is None else bool(config["padding"]),
    )


def measurements(result: BenchResult) -> list[Measurement]:
    """Every measurement of an ``attention`` or ``state`` result."""
    if result.kind not in ("attention", "state"):
        return []
    condition = _condition(result)
    found = []
    for case in result.data["cases"]:
        name = case.get("name") or case.get("attention")
        for entry in case["results"]:
            status = str(entry.get("status", "ok"))
            time = (entry.get("time_ms") or {}).get("median") if status == "ok" else None
            found.append(
                Measurement(
                    source=result,
                    condition=condition,
                    case=str(name),
                    length=int(entry["length"]),
                    status=status,
                    time_ms=None if time is None else float(time),
                    memory_mib=entry.get("peak_memory_mib"),
                    cache_bytes=entry.get("cache_bytes"),
                )
            )
    return found


@dataclass(frozen=True)
class Chosen:
    """The measurements the board shows: the newest of each case, condition and length, and for
    each case and condition the newest result that measured it at all (a cell taken from an older
    one is marked: it measured older code)."""

    cells: dict[tuple[Condition, str, int], Measurement]
    newest: dict[tuple[Condition, str], str]

    def is_older(self, measurement: Measurement) -> bool:
        return self.newest[measurement.condition, measurement.case] != measurement.source.name


def latest_measurements(results: Iterable[BenchResult], times: dict[str, int]) -> Chosen:
    """The newest measurement of each case, condition and length (:class:`Chosen`)."""
    ordered = sorted(results, key=lambda r: recency(r.data["environment"].get("git_commit"), r.name, times))
    cells: dict[tuple[Condition, str, int], Measurement] = {}
    newest: dict[tuple[Condition, str], str] = {}
    for result in ordered:
        for measurement in measurements(result):
            cells[measurement.condition, measurement.case, measurement.length] = measurement
            newest[measurement.condition, measurement.case] = result.name
    return Chosen(cells, newest)
