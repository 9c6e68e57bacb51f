"""The board's figures, drawn by plotly (interactive: hover, zoom, legend toggles) and written as
HTML fragments that share one ``plotly.min.js``; each figure's div has an id made from what it
shows, so two builds of the same records write the same bytes.

* speed against length: forward and backward time of every case of ``zoo bench attention``, one
  figure per condition, log-log (the slope is the growth exponent);
* accuracy against width, as Zoology draws MQAR: wherever a task's settings vary the model's width
  (a grid over ``--model.d_model``), accuracy (else the headline metric) against the width, one
  line per attention recipe with its 95% interval, one panel per value of the other varied flags
  (the sequence length);
* curves per variant: the headline metric against the step, from each run's ``fit/metrics.csv``
  where the run directory is on this machine.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from zoo.board.leaderboard import ACCURACY_NAMES, headline_metric, natural_key
from zoo.board.measurements import Chosen, Condition
from zoo.board.results import Result, slug

__all__ = ["WIDTH_KEYS", "curve_figures", "fragment", "speed_figures", "width_figures"]

#: The last part of a flag that sets a model's width.
WIDTH_KEYS = ("d_model", "hidden_size", "width")
LAYOUT = {"template": "plotly_white", "height": 460, "margin": {"l": 60, "r": 20, "t": 60, "b": 50}}


def fragment(figure: go.Figure, name: str) -> str:
    """``figure`` as an HTML ``div`` with a fixed id, without plotly.js (the page loads it once)."""
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{slug(name)}")


def speed_figures(chosen: Chosen) -> list[tuple[str, go.Figure]]:
    """One log-log figure of time against length per ``attention`` condition measured at two lengths or more."""
    by_condition: dict[Condition, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for (condition, case, length), measurement in chosen.cells.items():
        if condition.benchmark == "attention" and measurement.time_ms is not None:
            by_condition[condition][case].append((length, measurement.time_ms))
    figures = []
    for condition in sorted(by_condition):
        cases = by_condition[condition]
        if max(len(points) for points in cases.values()) < 2:
            continue
        figure = go.Figure()
        for case in sorted(cases, key=natural_key):
            points = sorted(cases[case])
            figure.add_trace(
                go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers", name=case)
            )
        figure.update_layout(
            title=f"Forward and backward against length ({condition.label})",
            xaxis={"title": "tokens", "type": "log"},
            yaxis={"title": "ms (median)", "type": "log"},
            **LAYOUT,
        )
        figures.append((condition.label, figure))
    return figures


def _width(setting: tuple[str, ...]) -> tuple[str, float] | None:
    for item in setting:
        key, _, value = item.partition("=")
        if key.rsplit(".", 1)[-1] in WIDTH_KEYS:
            try:
                return item, float(value)
            except ValueError:
                return None
    return None


def width_figures(results: list[Result]) -> list[tuple[str, go.Figure]]:
    """Accuracy against width for each task whose settings vary a width flag."""
    figures = []
    tasks = sorted({r.task for r in results})
    for task in tasks:
        measured = [(r, _width(r.setting)) for r in results if r.task == task and r.metrics]
        measured = [(r, w) for r, w in measured if w is not None]
        if len({w[1] for _, w in measured}) < 2:
            continue
        metrics = sorted({m for r, _ in measured for m in r.metrics})
        accuracy = [m for m in metrics if m.rsplit("/", 1)[-1] in ACCURACY_NAMES]
        first = measured[0][0]
        headline = headline_metric(metrics, first.model, first.runs[0].recipe.stage)
        metric = accuracy[0] if accuracy else headline[0] if headline else metrics[0]
        panels: dict[tuple[str, ...], dict[str, list[tuple[float, Result]]]] = defaultdict(lambda: defaultdict(list))
        for result, (item, width) in measured:
            panel = tuple(i for i in result.setting if i != item)
            panels[panel][result.row].append((width, result))
        shared = set.intersection(*(set(p) for p in panels))
        titles = [", ".join(i.rsplit(".", 1)[-1] for i in p if i not in shared) or task for p in panels]
        order = sorted(range(len(titles)), key=lambda i: natural_key(titles[i]))
        keys = list(panels)
        figure = make_subplots(rows=1, cols=len(keys), shared_yaxes=True, subplot_titles=[titles[i] for i in order])
        rows = sorted({row for panel in panels.values() for row in panel}, key=natural_key)
        for column, index in enumerate(order, start=1):
            panel = panels[keys[index]]
            for number, row in enumerate(rows):
                points = []
                for width, result in sorted(panel.get(row, []), key=lambda p: p[0]):
                    summary = result.summary(metric)
                    if summary is not None:
                        points.append((width, summary))
                if not points:
                    continue
                figure.add_trace(
                    go.Scatter(
                        x=[w for w, _ in points],
                        y=[s.mean for _, s in points],
                        error_y={
                            "type": "data",
                            "symmetric": False,
                            "array": [0 if s.high is None else s.high - s.mean for _, s in points],
                            "arrayminus": [0 if s.low is None else s.mean - s.low for _, s in points],
                        },
                        mode="lines+markers",
                        name=row,
                        legendgroup=row,
                        showlegend=column == 1,
                        marker={"color": _color(number)},
                        line={"color": _color(number)},
                    ),
                    row=1,
                    col=column,
                )
            widths = sorted({w for points in panel.values() for w, _ in points})
            figure.update_xaxes(title_text="model width", type="log", tickvals=widths, row=1, col=column)
        figure.update_yaxes(title_text=metric, row=1, col=1)
        figure.update_layout(title=f"{task}: {metric} against model width (95% intervals over seeds)", **LAYOUT)
        figures.append((f"{task} {metric} width", figure))
    return figures


def _color(index: int) -> str:
    from plotly.colors import qualitative

    palette = qualitative.Plotly + qualitative.D3
    return palette[index % len(palette)]


def _curve(directory: Path, metric: str) -> list[tuple[float, float]]:
    """``(step, value)`` of ``metric`` in a fit's ``metrics.csv`` (CSVLogger's)."""
    file = directory / "fit" / "metrics.csv"
    if not file.is_file():
        return []
    points = []
    with file.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get(metric) not in (None, "") and row.get("step") not in (None, ""):
                points.append((float(row["step"]), float(row[metric])))
    return points


def curve_metric(result: Result) -> str | None:
    """The validation form of a result's headline metric (what the fit logged as it trained)."""
    headline = headline_metric(result.metrics, result.model, result.runs[0].recipe.stage if result.runs else None)
    return None if headline is None else "val/" + headline[0].split("/", 1)[-1]


def curve_figures(results: list[Result]) -> list[tuple[str, go.Figure]]:
    """Per task and setting, the validation metric against the step of every run whose directory
    is here, one colour per attention recipe."""
    groups: dict[tuple[str, tuple[str, ...]], list[Result]] = defaultdict(list)
    for result in results:
        groups[result.task, result.setting].append(result)
    figures = []
    for (task, setting), group in sorted(
        groups.items(), key=lambda item: natural_key(" ".join([item[0][0], *item[0][1]]))
    ):
        figure = go.Figure()
        metric = None
        for number, result in enumerate(sorted(group, key=lambda r: natural_key(r.row))):
            metric = curve_metric(result)
            for run in result.runs if metric else []:
                points = _curve(run.directory, metric) if run.directory else []
                if points:
                    figure.add_trace(
                        go.Scatter(
                            x=[p[0] for p in points],
                            y=[p[1] for p in points],
                            mode="lines+markers",
                            name=f"{result.row} seed {run.seed}",
                            legendgroup=result.row,
                            line={"color": _color(number)},
                        )
                    )
        if figure.data:
            figure.update_layout(
                title=f"{task}: {metric} while training ({' '.join(setting)})",
                xaxis={"title": "step"},
                yaxis={"title": metric},
                **LAYOUT,
            )
            figures.append((f"{task} curves {' '.join(setting)}", figure))
    return figures
