"""The tables of ``python -m zoo bench attention`` (:mod:`zoo.bench.attention`): each case's time
over the lengths with its growth exponent, its peak memory, both as ratios to its baseline, and,
where counted (``--flops``), its matrix arithmetic beside the rate at which it ran."""

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
    """Markdown tables: times (median [quartiles]), peak memory, ratios to the baselines and the
    arithmetic; the memory table only where memory was measured, the ratios only for cases whose
    baseline ran beside them, the arithmetic only where it was counted."""
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
    measured = {key for record in records for result in record["results"] for key in result}
    tables = [
        "Forward+backward time, median [quartiles]:\n\n"
        + markdown_table(["case", "kind", *headers, "exponent"], time_rows)
    ]
    if "peak_memory_mib" in measured:
        tables.append("Peak memory above the inputs (MiB):\n\n" + markdown_table(["case", *headers], memory_rows))
    if ratio_rows:
        tables.append(
            "Against the baseline (time / peak memory):\n\n"
            + markdown_table(["case", "baseline", *headers], ratio_rows)
        )
    if "gflop" in measured:
        rows = [
            [r["name"], *(_arithmetic_cell(at(r, n), at(by_name.get(r["baseline"] or ""), n)) for n in lengths)]
            for r in records
        ]
        tables.append(
            "Matrix arithmetic, forward+backward: GFLOP (ratio to the baseline's), and GFLOP/s at the median time:\n\n"
            + markdown_table(["case", *headers], rows)
        )
    return "\n\n".join(tables)


def _arithmetic_cell(result: dict[str, Any] | None, base: dict[str, Any] | None) -> str:
    if result is None or "gflop" not in result:
        return "-"
    gflop = result["gflop"]
    ratio = _ratio(result, base, "gflop", None)
    rate = gflop / (result["time_ms"]["median"] / 1e3)
    return f"{gflop:.3g}" + ("" if ratio is None else f" ({ratio:.2f}x)") + f", {rate:.3g}/s"
