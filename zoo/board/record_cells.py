"""One cell of a records table: what a column's spelling asks of a combination's runs, as text.

A column (or a pivot's ``cell``) is spelt as one of::

    seeds                      how many seeds the runs have
    FIELD                      a test metric, or a record's cost field (fit_seconds, steps, ...)
    FIELD (FIELD, ...)         the first, then the others in parentheses: "0.992 (1,500)"
    interval METRIC            mean ± sample sd [95% interval, Student's t] over the seeds
    each METRIC                the mean, then every seed's value in seed order: "0.372 (0.009,
                               0.242, 0.864)" (seeds that split, some at chance and some not)
    by-seed METRIC             every seed's value in seed order, without the mean: "0.1795 /
                               0.1795 / 0.1630" (beside an ``interval`` column of the same metric)
    paired METRIC              the mean of METRIC minus the baseline row's, seed by seed on the
                               seeds both have, with its 95% interval: "-0.031 [-0.060, -0.002]"
    A / B                      several of the above in one cell, joined by " / "
    SPELLING @seeds=0,2        any of the above over the named seeds alone (the baseline's too):
                               a one-seed paired difference, a time measured on some seeds only

A metric is the mean over the seeds to ``decimals`` places, with the sample sd after ``±`` where
there are several seeds; a cost is the mean to three significant digits (whole numbers from 100).
The interval is ``mean ± t(0.975, n - 1) * sd / sqrt(n)`` (:func:`zoo.compare.stats.summarize`),
the statistic ``zoo compare``'s reports print, so a page and its report agree to the digit.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zoo.compare.records import seed_values
from zoo.compare.report import format_summary
from zoo.compare.stats import paired_differences, summarize
from zoo.errors import DataError

__all__ = ["CellStyle", "cell_text", "field_names", "main_metric", "one_run_a_seed"]

_ANNOTATED = re.compile(r"^(?P<main>\S+) \((?P<notes>[^()]+)\)$")
_PREFIXES = ("interval ", "paired ", "each ", "by-seed ")
_SEEDS = re.compile(r"^(?P<spelling>.+) @seeds=(?P<seeds>\d+(?:,\d+)*)$")


@dataclass(frozen=True)
class CellStyle:
    """How numbers are written: decimals of a metric, and the value from which a metric is bold."""

    decimals: int = 3
    bold_at_least: float | None = None


def one_run_a_seed(runs: Sequence[dict[str, Any]], cell: str, where: str) -> None:
    """Refuse a cell holding two runs of one seed (a rerun appended to the records, or two sources
    at one value): nothing says which of them the page shows."""
    if twice := [seed for seed, count in Counter(r["seed"] for r in runs).items() if count > 1]:
        combinations = sorted({r["combination"] for r in runs if r["seed"] == twice[0]})
        raise DataError(
            f"{where}: {sum(r['seed'] == twice[0] for r in runs)} runs of {', '.join(map(repr, combinations))} with "
            f"seed {twice[0]} in {cell}; keep one record, or name the source (SOURCE:...)."
        )


def field_names(field: str) -> list[str]:
    """The record fields a column's spelling reads, in order (``seeds`` included)."""
    names = []
    if match := _SEEDS.match(field):
        field = match["spelling"]
    for part in field.split(" / "):
        if match := _ANNOTATED.match(part):
            names += [match["main"], *(note.strip() for note in match["notes"].split(","))]
        else:
            names.append(part.split(" ", 1)[1] if part.startswith(_PREFIXES) else part)
    return names


def main_metric(field: str) -> str:
    """The field a spelling is judged by (the first it reads): what ``best`` compares."""
    return field_names(field)[0]


def _bold(text: str, mean: float, style: CellStyle) -> str:
    return f"**{text}**" if style.bold_at_least is not None and mean >= style.bold_at_least else text


def _signed(value: float, decimals: int) -> str:
    return f"{value:+.{decimals}f}"


def cell_text(
    group: Sequence[dict[str, Any]],
    field: str,
    style: CellStyle,
    baseline: Sequence[dict[str, Any]] | None = None,
) -> str:
    """The cell of ``field`` (a spelling above) over one combination's runs; ``-`` where none has it.
    ``baseline`` holds the baseline row's runs (``paired`` needs them; the baseline's own cell is
    empty)."""
    if match := _SEEDS.match(field):
        seeds = {int(seed) for seed in match["seeds"].split(",")}
        chosen = [r for r in group if r["seed"] in seeds]
        if group is baseline:  # the baseline row stays itself, its paired cell empty
            return cell_text(chosen, match["spelling"], style, chosen) if chosen else "-"
        base = None if baseline is None else [r for r in baseline if r["seed"] in seeds]
        return cell_text(chosen, match["spelling"], style, base) if chosen else "-"
    if field == "seeds":
        return str(len({r["seed"] for r in group}))
    if " / " in field:
        return " / ".join(cell_text(group, part, style, baseline) for part in field.split(" / "))
    if match := _ANNOTATED.match(field):
        notes = ", ".join(cell_text(group, note.strip(), style, baseline) for note in match["notes"].split(","))
        return f"{cell_text(group, match['main'], style, baseline)} ({notes})"
    kind, _, name = field.partition(" ") if field.startswith(_PREFIXES) else ("", "", field)
    values = seed_values(group, name)
    if not values:
        return "-"
    if kind == "paired":
        if baseline is None or group is baseline:
            return ""
        summary = paired_differences(values, seed_values(baseline, name))
        if summary is None:
            return "-"
        if summary.low is None or summary.high is None:
            return f"{_signed(summary.mean, style.decimals)} (1 seed)"
        low, high = (_signed(value, style.decimals) for value in (summary.low, summary.high))
        return f"{_signed(summary.mean, style.decimals)} [{low}, {high}]"
    mean = statistics.fmean(values.values())
    if kind == "interval":
        return _bold(format_summary(summarize(list(values.values())), style.decimals), mean, style)
    if kind == "by-seed":
        return " / ".join(f"{values[seed]:.{style.decimals}f}" for seed in sorted(values))
    if kind == "each":
        each = ", ".join(f"{values[seed]:.{style.decimals}f}" for seed in sorted(values))
        return _bold(f"{mean:.{style.decimals}f} ({each if len(values) > 1 else '1 seed'})", mean, style)
    if not any(name in r["metrics"] for r in group):  # a cost: three significant digits
        return f"{mean:,.0f}" if abs(mean) >= 100 else f"{mean:#.3g}"
    text = f"{mean:.{style.decimals}f}"
    if len(values) > 1:
        text += f" ± {statistics.stdev(values.values()):.{style.decimals}f}"
    return _bold(text, mean, style)
