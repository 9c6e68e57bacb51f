"""The comparison's report: a Markdown table of means with confidence intervals, paired differences
against a baseline on shared seeds, cost (time, throughput, memory), and a plot."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.bench.report import markdown_table
from zoo.compare.records import fit_seconds, seed_values
from zoo.compare.stats import CONFIDENCE, Summary, paired_differences, summarize

__all__ = [
    "LEGEND_INSIDE",
    "LEGEND_ROWS",
    "format_summary",
    "line_style",
    "metric_names",
    "place_legend",
    "plot_metric_vs_time",
    "pyplot",
    "save_plot",
    "summary_tables",
    "write_report",
]

_COST = (
    ("fit_seconds", "fit s"),
    ("seconds_per_step", "s/step"),
    ("samples_per_second", "samples/s"),
    ("peak_rss_mib", "peak RSS MiB"),
)


def metric_names(records: Sequence[dict[str, Any]]) -> list[str]:
    """Every metric any record has, sorted."""
    return sorted({name for record in records for name in record["metrics"]})


def format_summary(summary: Summary | None, decimals: int = 3) -> str:
    """``mean ± sd [low, high]``, every number with ``decimals`` decimal places (one precision, so
    a column's numbers line up and compare); just the mean for one value; ``-`` for none."""
    if summary is None:
        return "-"
    if summary.sd is None:
        return f"{summary.mean:.{decimals}f} (1 seed)"
    numbers = (summary.mean, summary.sd, summary.low, summary.high)
    mean, sd, low, high = (f"{number:.{decimals}f}" for number in numbers)
    return f"{mean} ± {sd} [{low}, {high}]"


def _by_combination(records: Sequence[dict[str, Any]], order: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
    for record in records:
        groups.setdefault(record["combination"], []).append(record)
    return {name: group for name, group in groups.items() if group}


def _conditions_note(records: Sequence[dict[str, Any]]) -> list[str]:
    """A line saying so when the runs were timed under different conditions (runs at once, threads
    each, and the launcher where more than one ran them), as a comparison resumed with another
    ``--parallel`` or ``--launcher`` has: its cost columns mix them."""
    launchers = {r.get("launcher", "local") for r in records}
    counts = Counter(
        (r.get("launcher", "local") if len(launchers) > 1 else "", r.get("parallel"), r.get("threads")) for r in records
    )
    if len(counts) < 2:
        return []
    described = [
        f"{n}{f' on {launcher}' if launcher else ''} with {t} thread{'s' * (t != 1)} each, "
        f"{f'{p} at once' if p else 'how many at once not recorded'}"
        for (launcher, p, t), n in sorted(
            counts.items(), key=lambda item: (item[0][0], item[0][1] or 0, item[0][2] or 0)
        )
    ]
    return [f"The runs were timed under different conditions ({'; '.join(described)}): the cost columns mix them.", ""]


def _ordered_metrics(records: Sequence[dict[str, Any]], metric: str | None) -> list[str]:
    """Every metric, the one that matters (``metric``) first."""
    metrics = metric_names(records)
    if metric in metrics:
        metrics.remove(metric)
        metrics.insert(0, metric)
    return metrics


def summary_tables(
    records: Sequence[dict[str, Any]], order: Sequence[str], baseline: str, metric: str | None = None
) -> list[str]:
    """The comparison's tables as Markdown lines: each combination's metrics and cost, then the
    paired differences against ``baseline`` (what ``zoo compare`` prints and its report holds).

    ``order`` lists the combinations in the order of the grid.
    """
    groups = _by_combination(records, order)
    metrics = _ordered_metrics(records, metric)
    level = f"{CONFIDENCE:.0%}"
    rows = []
    for name, group in groups.items():
        cells = [format_summary(summarize(list(v.values()))) if (v := seed_values(group, m)) else "-" for m in metrics]
        costs = [f"{summarize(list(v.values())).mean:.3g}" if (v := seed_values(group, f)) else "-" for f, _ in _COST]
        rows.append([f"`{name}`", len(group), *cells, *costs])
    lines = [
        f"Each cell: mean ± sample sd [{level} confidence interval, Student's t] over seeds. Cost columns are means.",
        "",
        markdown_table(["combination", "seeds", *metrics, *(label for _, label in _COST)], rows),
        "",
        *_conditions_note(records),
    ]
    if baseline in groups and len(groups) > 1:
        base = groups[baseline]
        diff_rows = []
        for name, group in groups.items():
            if name == baseline:
                continue
            shared = len({r["seed"] for r in group} & {r["seed"] for r in base})
            cells = [format_summary(paired_differences(seed_values(group, m), seed_values(base, m))) for m in metrics]
            diff_rows.append([f"`{name}`", shared, *cells])
        lines += [
            f"## Paired differences against `{baseline}`",
            "",
            f"Combination minus baseline, seed by seed on the seeds both have: mean ± sd [{level} interval].",
            "",
            markdown_table(["combination", "shared seeds", *(f"Δ {m}" for m in metrics)], diff_rows),
            "",
        ]
    return lines


def write_report(
    records: Sequence[dict[str, Any]],
    out: Path,
    order: Sequence[str],
    baseline: str,
    header: str,
    metric: str | None = None,
    sections: Sequence[str] = (),
) -> Path:
    """Write ``<out>/report.md`` (``header``, then :func:`summary_tables`, then the Markdown lines
    of ``sections``) and, beside it, ``plot.png`` of ``metric`` (default: the first); return the
    report's path."""
    metrics = _ordered_metrics(records, metric)
    lines = ["# Comparison", "", header, "", *summary_tables(records, order, baseline, metric)]
    report = out / "report.md"
    if metrics:
        lines += [
            f"![metric against training time]({plot_metric_vs_time(_by_combination(records, order), metrics[0], out / 'plot.png').name})",
            "",
        ]
    report.write_text("\n".join([*lines, *sections]), encoding="utf-8")
    return report


def pyplot() -> Any:
    """matplotlib's ``pyplot`` on the file-only Agg backend (a comparison runs without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: more legend entries than this go beside the axes, not over them
LEGEND_INSIDE = 6
#: legend entries a column beside the axes holds
LEGEND_ROWS = 24
_MARKERS = "os^Dv<>p"


def place_legend(axes: Any) -> bool:
    """Add the legend of ``axes``: inside for a few entries, else beside the axes on the right, in
    as many columns of :data:`LEGEND_ROWS` as it needs, so that no entry hides a point. True where
    it stands beside them."""
    entries = len(axes.get_legend_handles_labels()[1])
    if entries <= LEGEND_INSIDE:
        axes.legend(fontsize="small")
        return False
    columns = -(-entries // LEGEND_ROWS)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, ncol=columns)
    return True


def line_style(index: int) -> dict[str, Any]:
    """The ``index``-th line's colour and marker: twenty colours (matplotlib's ``tab20``), then the
    next marker, so that lines past the tenth stay apart."""
    colour = pyplot().get_cmap("tab20")(index % 20)
    return {"color": colour, "marker": _MARKERS[index // 20 % len(_MARKERS)]}


def save_plot(figure: Any, axes: Any, path: Path, *, xlabel: str, ylabel: str, title: str) -> Path:
    """Label ``axes``, add the legend (:func:`place_legend`), write ``figure`` to ``path`` (grown to
    hold a legend beside the axes) and close it."""
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if not place_legend(axes):  # one beside the axes gets its room from the cropped save
        figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    pyplot().close(figure)
    return path


def plot_metric_vs_time(groups: dict[str, list[dict[str, Any]]], metric: str, path: Path) -> Path:
    """Each run as a faint dot, each combination's mean as a point with its interval, against fit
    time (a log axis where the times span more than 30 times). The vertical axis spans the runs'
    values: an interval over few seeds can reach far past any value a run can take."""
    figure, axes = pyplot().subplots(figsize=(7, 4.5))
    every_time, every_value = [], []
    for index, (name, group) in enumerate(groups.items()):
        runs = [(fit_seconds(r), r["metrics"][metric]) for r in group if metric in r["metrics"]]
        if not runs:
            continue
        times, values = zip(*runs)
        every_time += times
        every_value += values
        summary = summarize(list(values))
        error = None if summary.sd is None else [[summary.mean - summary.low], [summary.high - summary.mean]]
        style = line_style(index)
        axes.errorbar([sum(times) / len(times)], [summary.mean], yerr=error, fmt=style["marker"], capsize=4,
                      color=style["color"], label=name)  # fmt: skip
        axes.scatter(times, values, color=style["color"], marker=style["marker"], alpha=0.3, s=12)
    if every_value:
        low, high = min(every_value), max(every_value)
        margin = 0.05 * (high - low) or 0.05 * (abs(high) or 1.0)
        axes.set_ylim(low - margin, high + margin)
    if every_time and min(every_time) > 0 and max(every_time) > 30 * min(every_time):
        axes.set_xscale("log")
    title = f"{metric} against training time ({CONFIDENCE:.0%} intervals)"
    return save_plot(figure, axes, path, xlabel="fit wall time per run (s)", ylabel=metric, title=title)
