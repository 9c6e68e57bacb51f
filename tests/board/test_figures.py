"""The static figures: Zoology's Figure 2 with one panel per sequence length, accuracy against test
length, needle heatmaps; checked drawn (each panel's lines and points are the records' means) and
laid out so that no two titles overlap (their boxes from matplotlib's renderer)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.board.matrix_records import LENGTHS, NEEDLE, write_matrix_records
from zoo.board.figures import length_figure, mqar_width_figure, needle_figure
from zoo.board.inputs import read_inputs
from zoo.board.recipes import RecipeReader
from zoo.board.results import group_results

WIDTHS = (16, 32, 64, 128)
SEQ_LENS = (64, 128, 256, 512)
ROWS = ("based", "gated_deltanet", "mamba2")
SEEDS = 3


def _accuracy(row: str, width: int, length: int, seed: int) -> float:
    return min(1.0, 0.2 * ROWS.index(row) + width / 160 - length / 4096 + 0.01 * seed)


def _results(root: Path):
    inputs = read_inputs([root])
    return group_results(inputs, RecipeReader(inputs.roots))


@pytest.fixture(scope="module")
def width_results(tmp_path_factory: pytest.TempPathFactory):
    """An MQAR width sweep at four lengths, three seeds, written as ``zoo compare`` records."""
    folder = tmp_path_factory.mktemp("width") / "mqar"
    folder.mkdir()
    lines = []
    for row, width, length, seed in itertools.product(ROWS, WIDTHS, SEQ_LENS, range(SEEDS)):
        overrides = {"model.attention": row, "model.d_model": str(width), "data.seq_len": str(length)}
        combination = f"attention={row},d_model={width},seq_len={length}"
        flags = " ".join(f"--{k}={v}" for k, v in overrides.items())
        lines.append(
            {
                "run": f"{combination}/seed{seed}",
                "combination": combination,
                "seed": seed,
                "command": f"python -m zoo fit --model recall --data mqar {flags} --seed_everything={seed}",
                "metrics": {"test/accuracy": _accuracy(row, width, length, seed)},
                "overrides": overrides,
            }
        )
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return _results(folder.parent)


def _lines(axes) -> list:
    """The data line of each error bar of a panel (its caps are lines too), labelled as its legend."""
    lines = []
    for container in axes.containers:
        line = container.lines[0]
        line.set_label(container.get_label())
        lines.append(line)
    return lines


def _titles_do_not_overlap(figure) -> None:
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = [axes.title for axes in figure.axes if axes.get_title()] + [figure._suptitle]
    boxes = [text.get_window_extent(renderer) for text in texts if text is not None]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), f"titles overlap: {a} and {b}"
    panels = [axes for axes in figure.axes if axes.get_title()]
    for a, b in itertools.combinations(panels, 2):  # a panel's title does not run into its neighbour's axes
        assert not a.title.get_window_extent(renderer).overlaps(b.get_window_extent(renderer))


def test_figure_2_has_a_panel_per_length_and_a_line_per_family(width_results) -> None:
    figure = mqar_width_figure(width_results)
    panels = [axes for axes in figure.axes if axes.get_title()]
    assert [axes.get_title() for axes in panels] == [f"sequence length {n}" for n in SEQ_LENS]
    for axes, length in zip(panels, SEQ_LENS):
        assert axes.get_xscale() == "log"
        assert [line.get_label() for line in _lines(axes)] == sorted(ROWS)
        for line, row in zip(_lines(axes), sorted(ROWS)):
            means = [sum(_accuracy(row, w, length, s) for s in range(SEEDS)) / SEEDS for w in WIDTHS]
            assert list(line.get_xdata()) == list(WIDTHS)
            assert list(line.get_ydata()) == pytest.approx(means)
    _titles_do_not_overlap(figure)


def test_no_figure_without_two_widths(width_results) -> None:
    one_width = [r for r in width_results if "model.d_model=16" in r.setting]
    assert mqar_width_figure(one_width) is None


def test_accuracy_against_test_length_and_the_needle_heatmap(tmp_path: Path) -> None:
    results = _results(write_matrix_records(tmp_path) / "compare")
    figure = length_figure(results)
    (panel,) = [axes for axes in figure.axes if axes.get_title()]
    assert panel.get_title() == "parity"
    assert [line.get_label() for line in _lines(panel)] == sorted(LENGTHS)
    for line, row in zip(_lines(panel), sorted(LENGTHS)):
        assert list(line.get_xdata()) == sorted(LENGTHS[row])
        assert list(line.get_ydata()) == [LENGTHS[row][n] for n in sorted(LENGTHS[row])]
    _titles_do_not_overlap(figure)
    heatmap = needle_figure(results)
    (panel,) = [axes for axes in heatmap.axes if axes.get_title()]
    assert panel.get_title() == "deltanet"
    image = panel.get_images()[0].get_array()
    grid = NEEDLE["deltanet"]
    lengths, depths = sorted({n for n, _ in grid}), sorted({d for _, d in grid})
    assert [[float(v) for v in row] for row in image] == [[grid[n, d] for n in lengths] for d in depths]
    _titles_do_not_overlap(heatmap)
    assert needle_figure(results, rows=["mamba2"]) is None
