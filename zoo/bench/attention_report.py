"""The tables of ``python -m zoo bench attention`` (:mod:`zoo.bench.attention`): each case's time
over the lengths with its growth exponent, its peak memory, and both as ratios to its baseline."""

from __future__ import annotations

from typing import Any

from zoo.bench.report import markdown_table
from zoo.bench.sweep import time_cell

__all__ = ["attention_tables"]


def _ratio(result: dict[str, Any], base: dict[str, Any] | None, key: str, field_name: str | None) -> float | None:
    if base is None or result["status"] != "ok" or base["status"] != "ok" or key not in result:
        return None
    value, reference = (result[key][field_name], base[key][field_name]) if field_name else (result[key], base[key])
    return value / reference if reference > 0 else None


def attention_tables(records: list[dict[str, Any]], lengths: list[int]) -> str:
    """Three Markdown tables: times (median [quartiles]), peak memory, ratios to the baselines."""
    by_name = {r["name"]: r for r in records}

    def at(record: dict[str, Any] | None, length: int) -> dict[str, Any] | None:
        return None if record is None else next((r for r in record["results"] if r["length"] == length), None)

    time_rows = [
        [
            r["name"],
            r["kind"],
            *(time_cell(at(r, n)) for n in lengths),
            "-" if r["growth_exponent"] is None else f"{r['growth_exponent']:.2f}",
        ]
        for r in records
    ]
    memory_rows = [
        [r["name"], *(f"{at(r, n)['peak_memory_mib']:.1f}" if "peak_memory_mib" in at(r, n) else "-" for n in lengths)]
        for r in records
    ]
    ratio_rows = []
    for record in records:
        baseline = by_name.get(record["baseline"] or "")
        if baseline is None:
            continue
        cells = []
        for n in lengths:
            time_ratio = _ratio(at(record, n), at(baseline, n), "time_ms", "median")
            memory_ratio = _ratio(at(record, n), at(baseline, n), "peak_memory_mib", None)
            cells.append(" / ".join("-" if x is None else f"{x:.2f}x" for x in (time_ratio, memory_ratio)))
        ratio_rows.append([record["name"], baseline["name"], *cells])
    headers = [f"L={n}" for n in lengths]
    return "\n\n".join(
        [
            "Forward+backward time, median [quartiles]:\n\n"
            + markdown_table(["case", "kind", *headers, "exponent"], time_rows),
            "Peak memory above the inputs (MiB):\n\n" + markdown_table(["case", *headers], memory_rows),
            "Against the baseline (time / peak memory):\n\n"
            + markdown_table(["case", "baseline", *headers], ratio_rows),
        ]
    )
