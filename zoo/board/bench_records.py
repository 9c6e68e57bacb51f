"""A ``zoo bench attention``, ``state`` or ``decode`` result read as records, so that a results
page's records block (:mod:`zoo.board.record_tables`) writes a benchmark's table from its
committed JSON as it writes a comparison's from ``records.jsonl``.

One record a case, ``combination`` its name and ``seed`` the benchmark's. For each length ``N``
it measured, the costs (written to three significant digits) ``time_ms/N`` (the median),
``peak_memory_mib/N``, and where a cache was measured (``zoo bench state``) ``cache_bytes/N`` and
``cache_kib/N``; and the metrics:

* ``over_CASE/N``, ``speedup_over_CASE/N`` and ``memory_over_CASE/N``: the time over the time of
  another case ``CASE`` of the same file at ``N`` (``over_floor/8192``: against causal SDPA's floor,
  measured beside it), its inverse, and the peak memory over ``CASE``'s;
* ``time_growth/N`` and ``cache_growth/N``: the time and the cache at ``N`` over the case's own at
  its shortest length (a fixed state reads about 1, a softmax cache ``N`` over that length);
* ``growth_exponent``: the slope of log time against log length, as the bench fitted it.

A length the case did not finish (out of memory, over the time limit) has no value, so its cell
reads ``-``.

A ``zoo bench decode`` result gives a record a decoding mode (``cached``, ``uncached``,
``batched``), named ``num_kv_heads=N,mode=MODE`` where it swept the key/value heads: the costs
``sentences_per_second``, ``tokens_per_second`` and ``cache_kib`` (the cache a sentence holds), and
the metric ``over_uncached``, its sentences a second over the uncached mode's of the same heads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.board.inputs import read_bench
from zoo.board.measurements import Measurement, measurements

__all__ = ["bench_records"]


def bench_records(path: Path) -> list[dict[str, Any]] | None:
    """The records of the benchmark result at ``path``; None where it holds no ``attention``,
    ``state`` or ``decode`` result."""
    result = read_bench(path, path.stem)
    if result is None or result.kind not in ("attention", "state", "decode"):
        return None
    if result.kind == "decode":
        return _decode_records(result.data["results"])
    seed = int(result.data["config"].get("seed") or 0)
    measured = measurements(result)
    records: dict[str, dict[str, Any]] = {}
    for case in result.data["cases"]:
        name = str(case.get("name") or case.get("attention"))
        exponent = case.get("growth_exponent")
        records[name] = {
            "combination": name,
            "seed": seed,
            "metrics": {} if exponent is None else {"growth_exponent": float(exponent)},
        }
    shortest = {m.case: m for m in sorted(measured, key=lambda m: m.length, reverse=True)}
    by_length: dict[int, list[Measurement]] = {}
    for m in measured:
        by_length.setdefault(m.length, []).append(m)
    for m in measured:
        record = records[m.case]
        kib = None if m.cache_bytes is None else m.cache_bytes / 1024
        costs = {"time_ms": m.time_ms, "peak_memory_mib": m.memory_mib, "cache_bytes": m.cache_bytes, "cache_kib": kib}
        record.update({f"{field}/{m.length}": value for field, value in costs.items() if value is not None})
        record["metrics"].update(_ratios(m, shortest[m.case], by_length[m.length]))
    return list(records.values())


def _ratios(m: Measurement, shortest: Measurement, beside: list[Measurement]) -> dict[str, float]:
    """``m``'s metrics at its length: its growth from ``shortest`` and its ratios to every case
    measured ``beside`` it at that length."""
    ratios = {}
    if m.time_ms and shortest.time_ms:
        ratios[f"time_growth/{m.length}"] = m.time_ms / shortest.time_ms
    if m.cache_bytes and shortest.cache_bytes:
        ratios[f"cache_growth/{m.length}"] = m.cache_bytes / shortest.cache_bytes
    for other in beside:
        if m.time_ms and other.time_ms:
            ratios[f"over_{other.case}/{m.length}"] = m.time_ms / other.time_ms
            ratios[f"speedup_over_{other.case}/{m.length}"] = other.time_ms / m.time_ms
        if m.memory_mib and other.memory_mib:
            ratios[f"memory_over_{other.case}/{m.length}"] = m.memory_mib / other.memory_mib
    return ratios


def _decode_records(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A record a decoding mode (and key/value head count) of a ``zoo bench decode`` result."""

    def name(result: dict[str, Any], mode: str) -> str:
        heads = result.get("num_kv_heads")
        return mode if heads is None else f"num_kv_heads={heads},mode={mode}"

    rates = {name(r, r["mode"]): r["sentences_per_second"] for r in results}
    records = []
    for r in results:
        cache = r.get("kv_cache_bytes_per_sentence")
        uncached = rates.get(name(r, "uncached"))
        records.append(
            {
                "combination": name(r, r["mode"]),
                "seed": 0,
                "sentences_per_second": r["sentences_per_second"],
                "tokens_per_second": r["tokens_per_second"],
                **({} if cache is None else {"cache_kib": cache / 1024}),
                "metrics": {} if uncached is None else {"over_uncached": r["sentences_per_second"] / uncached},
            }
        )
    return records
