"""The comparison report's figure: every combination told apart, no legend over a point, the value
axis on what the runs reached, and a resumed fit timed whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.compare.records import fit_seconds, record_field, seed_values
from zoo.compare.report import LEGEND_INSIDE, line_style, place_legend, plot_metric_vs_time, pyplot, summary_tables


def _overlaps(a, b) -> bool:  # two matplotlib Bboxes in display pixels
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("entries", [LEGEND_INSIDE, 25])
def test_a_long_legend_stands_beside_the_axes_and_a_short_one_inside(entries: int) -> None:
    figure, axes = pyplot().subplots(figsize=(7, 4.5))
    for index in range(entries):
        axes.plot([0, 1], [index, index + 1], label=f"line {index}", **line_style(index))
    beside = place_legend(axes)
    figure.canvas.draw()
    inside = _overlaps(axes.get_legend().get_window_extent(), axes.get_window_extent())
    pyplot().close(figure)
    assert inside == (entries <= LEGEND_INSIDE) != beside


def test_the_first_forty_lines_differ_in_colour_or_marker() -> None:
    styles = {(line_style(i)["color"], line_style(i)["marker"]) for i in range(40)}
    assert len(styles) == 40


def _record(seed: int, accuracy: float, seconds: float) -> dict:
    return {"seed": seed, "fit_seconds": seconds, "metrics": {"test/accuracy": accuracy}}


def test_the_value_axis_spans_the_runs_not_an_interval_over_two_seeds(tmp_path: Path, monkeypatch) -> None:
    limits: dict[str, tuple[float, float]] = {}
    close = pyplot().close
    monkeypatch.setattr(pyplot(), "close", lambda figure: (limits.update(y=figure.axes[0].get_ylim()), close(figure)))
    # two seeds 0.0 and 1.0: Student's t interval over them runs from about -5.9 to 6.9
    groups = {"a": [_record(0, 0.0, 10.0), _record(1, 1.0, 12.0)], "b": [_record(0, 0.5, 900.0)]}
    plot_metric_vs_time(groups, "test/accuracy", tmp_path / "plot.png")
    low, high = limits["y"]
    assert -0.1 <= low < 0.0 and 1.0 < high <= 1.1
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_a_resumed_fit_recorded_with_its_last_attempt_alone_is_timed_by_its_training() -> None:
    resumed = {"fit_seconds": 7.0, "train_seconds": 1075.0, "resumed": True}
    assert fit_seconds(resumed) == 1075.0
    assert fit_seconds({"fit_seconds": 1100.0, "train_seconds": 1075.0, "resumed": True}) == 1100.0
    assert fit_seconds({"fit_seconds": 20.0, "train_seconds": 15.0, "resumed": False}) == 20.0


def test_the_reports_fit_time_column_times_a_resumed_fit_whole() -> None:
    resumed = {"combination": "a", "seed": 0, "fit_seconds": 7.0, "train_seconds": 1075.0, "resumed": True,
               "metrics": {"test/accuracy": 0.9}}  # fmt: skip
    assert record_field(resumed, "fit_seconds") == 1075.0 and record_field(resumed, "resumed") is True
    lines = "\n".join(summary_tables([resumed], ["a"], "a")).splitlines()
    row = next(line for line in lines if line.startswith("| `a`"))
    assert "| 1.08e+03 |" in row and "| 7 |" not in row


def test_seed_values_read_a_metric_first_then_the_record_and_drop_the_runs_without_either() -> None:
    group = [
        {"seed": 0, "metrics": {"test/accuracy": 0.5}, "fit_seconds": 3.0},
        {"seed": 1, "metrics": {"test/accuracy": 1}, "fit_seconds": 7.0, "train_seconds": 9.0, "resumed": True},
        {"seed": 2, "metrics": {}, "fit_seconds": None},
    ]
    assert seed_values(group, "test/accuracy") == {0: 0.5, 1: 1.0}
    assert seed_values(group, "fit_seconds") == {0: 3.0, 1: 9.0}
    assert seed_values(group, "no_such_field") == {}
