"""Static figures (matplotlib PNGs) read at a glance, from the board's results.

* Zoology's Figure 2 (Arora et al., 2023, arXiv:2312.04927): MQAR accuracy against the model's
  width (log2 axis), one panel per sequence length, one line per attention, error bars the 95%
  interval over seeds. A length comes from the setting's ``data.seq_len`` or, where a config file
  set it, from the ``seq_len=`` of the comparison report's data line. Where one attention has several
  results at a width and length (other rates, other comparisons), the best mean is drawn, as
  Zoology draws the best of its rate sweep.
* accuracy against test length (``*/accuracy/length_N``) of copying and state tracking: one panel
  per task (and ``data.group``, a word problem's group), one line per attention.
* needle heatmaps, accuracy over test length and needle depth (``*/accuracy/length_N_depth_D``).

Every figure is laid out by ``constrained_layout``, so titles and labels never overlap, and has no
empty panel; an attention keeps its colour in every panel, and one legend below the panels names
them all. Pages embed the PNGs; nothing in them carries a date.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from zoo.board.results import Result
from zoo.compare.report import line_style, pyplot
from zoo.compare.stats import Summary

__all__ = ["length_figure", "mqar_width_figure", "needle_figure"]

_LENGTH = re.compile(r"^(?:test|val)/accuracy/length_(\d+)$")
_NEEDLE = re.compile(r"^(?:test|val)/accuracy/length_(\d+)_depth_(\d+)$")
_SEQ_LEN = re.compile(r"seq_len=(\d+)")
#: Tasks whose test lengths the length figure draws: copying and state tracking.
LENGTH_TASKS = ("selective_copying", "parity", "word_problem")
PANEL_INCHES = 3.6
#: Legend characters an inch holds at matplotlib's "small" size (10 pt text is about 12 an inch).
CHARACTERS_PER_INCH = 12
#: The height a legend's row adds to a figure, so that the panels keep theirs.
LEGEND_ROW_INCHES = 0.22


def _item(result: Result, key: str) -> str | None:
    return next((i.split("=", 1)[1] for i in result.setting if i.split("=", 1)[0] == key), None)


def _seq_len(result: Result) -> int | None:
    text = _item(result, "data.seq_len")
    if text is None:
        report = result.runs[0].comparison.report if result.runs else None
        found = _SEQ_LEN.search(report.read_text(encoding="utf-8")) if report else None
        text = found.group(1) if found else None
    return int(text) if text and text.isdigit() else None


def _accuracy(result: Result) -> str | None:
    return next((m for m in ("test/accuracy", "val/accuracy") if m in result.metrics), None)


def _colours(names: Sequence[str]) -> dict[str, Any]:
    """A colour per line name, the same in every panel of a figure (:func:`line_style`'s)."""
    return {name: line_style(index)["color"] for index, name in enumerate(sorted(set(names)))}


def _errorbar(axes: Any, xs: Sequence[float], summaries: Sequence[Summary], label: str, colour: Any) -> None:
    means = [s.mean for s in summaries]
    low = [0.0 if s.low is None else s.mean - s.low for s in summaries]
    high = [0.0 if s.high is None else s.high - s.mean for s in summaries]
    axes.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=label, color=colour)


def _figure(panels: int, title: str, height: float = 3.4) -> tuple[Any, list[Any]]:
    plt = pyplot()
    columns = min(panels, 4)
    rows = math.ceil(panels / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(PANEL_INCHES * columns, height * rows), layout="constrained", squeeze=False
    )
    flat = list(axes.flat)
    for extra in flat[panels:]:
        extra.remove()
    figure.suptitle(title)
    return figure, flat[:panels]


def _legend(figure: Any, panels: Sequence[Any]) -> None:
    """One legend for every panel's lines, outside the panels on the right."""
    handles: dict[str, Any] = {}
    for axes in panels:
        for handle, label in zip(*axes.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    longest = max((len(label) for label in handles), default=1)
    fitting = int(figure.get_figwidth() * CHARACTERS_PER_INCH // (longest + 6))  # a marker and a gap each
    columns = max(1, min(4, len(handles), fitting))
    figure.set_figheight(figure.get_figheight() + LEGEND_ROW_INCHES * math.ceil(len(handles) / columns))
    figure.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=columns, fontsize="small")


def _accuracy_figure(title: str, panels: dict[str, dict[str, dict[int, Summary]]], x_label: str) -> Any:
    """Accuracy with its intervals against a log2 axis: a panel per entry of ``panels`` (its key the
    panel's title, in the dict's order), a line per row of it (``{row: {x: summary}}``), one legend.
    The width and the length figures differ only in what they group and what the axis counts."""
    figure, axes_list = _figure(len(panels), title)
    colours = _colours([row for lines in panels.values() for row in lines])
    for axes, (panel, lines) in zip(axes_list, panels.items()):
        for row, points in sorted(lines.items()):
            xs = sorted(points)
            _errorbar(axes, xs, [points[x] for x in xs], row, colours[row])
        axes.set_xscale("log", base=2)
        axes.set_title(panel)
        axes.set_xlabel(x_label)
        axes.set_ylabel("accuracy")
        axes.set_ylim(-0.02, 1.02)
    _legend(figure, axes_list)
    return figure


def mqar_width_figure(results: Sequence[Result]) -> Any | None:
    """Zoology's Figure 2 from the MQAR results whose settings vary ``d_model``; None without two widths."""
    best: dict[int, dict[str, dict[int, Summary]]] = defaultdict(lambda: defaultdict(dict))
    for result in results:
        width, metric = _item(result, "model.d_model"), _accuracy(result)
        length = _seq_len(result) if result.task in ("mqar", "recall") else None
        summary = result.summary(metric) if metric and width and width.isdigit() and length else None
        if summary is None:
            continue
        line = best[length][result.row]
        if int(width) not in line or summary.mean > line[int(width)].mean:
            line[int(width)] = summary
    lengths = sorted(n for n, lines in best.items() if len({w for line in lines.values() for w in line}) >= 2)
    if not lengths:
        return None
    return _accuracy_figure(
        "MQAR accuracy against model width (95% intervals over seeds)",
        {f"sequence length {n}": best[n] for n in lengths},
        "model width",
    )


def _by_length(result: Result) -> dict[int, Summary]:
    points = {}
    for metric in result.metrics:
        found = _LENGTH.match(metric)
        summary = result.summary(metric) if found else None
        if found and summary is not None:
            points[int(found.group(1))] = summary
    return points


def length_figure(results: Sequence[Result], rows: Sequence[str] | None = None) -> Any | None:
    """Accuracy against test length of copying and state tracking, a panel per task; ``rows`` limits
    the lines (a family's page). None where no result measured two test lengths."""
    panels: dict[str, dict[str, dict[int, Summary]]] = defaultdict(dict)
    for result in results:
        if result.task not in LENGTH_TASKS or (rows is not None and result.row not in rows):
            continue
        points = _by_length(result)
        group = _item(result, "data.group")
        title = f"{result.task} {group}" if group else result.task
        kept = panels[title].get(result.row)
        if len(points) >= 2 and (kept is None or _mean(points) > _mean(kept)):
            panels[title][result.row] = points
    titles = sorted(t for t, lines in panels.items() if lines)
    if not titles:
        return None
    return _accuracy_figure(
        "Accuracy against test length (95% intervals over seeds)", {t: panels[t] for t in titles}, "test length"
    )


def _mean(points: dict[int, Summary]) -> float:
    return sum(s.mean for s in points.values()) / len(points)


def needle_figure(results: Sequence[Result], rows: Sequence[str] | None = None) -> Any | None:
    """A heatmap per attention of needle accuracy over test length and depth (mean over seeds)."""
    grids: dict[str, dict[tuple[int, int], float]] = {}
    for result in results:
        if rows is not None and result.row not in rows:
            continue
        cells = {}
        for metric in result.metrics:
            found = _NEEDLE.match(metric)
            summary = result.summary(metric) if found else None
            if found and summary is not None:
                cells[int(found.group(1)), int(found.group(2))] = summary.mean
        if cells and len(cells) > len(grids.get(result.row, {})):
            grids[result.row] = cells
    if not grids:
        return None
    names = sorted(grids)
    figure, panels = _figure(len(names), "Needle accuracy by test length and depth", height=3.0)
    for axes, name in zip(panels, names):
        lengths = sorted({n for n, _ in grids[name]})
        depths = sorted({d for _, d in grids[name]})
        values = [[grids[name].get((n, d), math.nan) for n in lengths] for d in depths]
        image = axes.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", origin="lower")
        axes.set_xticks(range(len(lengths)), [f"{n // 1024}k" if n >= 1024 else str(n) for n in lengths])
        axes.set_yticks(range(len(depths)), [f"{d}%" for d in depths])
        axes.set_title(name)
        axes.set_xlabel("test length")
        axes.set_ylabel("needle depth")
    figure.colorbar(image, ax=panels, shrink=0.8, label="accuracy")
    return figure
