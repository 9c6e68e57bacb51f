"""``zoo board`` without a browser: what the cells say, which columns there are, which benchmark
counts, byte-identical rebuilds, and one line for each kind of bad input."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.board.conftest import ATTENTIONS, LENGTHS, SEEDS, WIDTHS, accuracy
from zoo.attention import ATTENTION_REGISTRY
from zoo.board.catalog import COSTS, family_and_cost, stackable
from zoo.board.chronology import commit_times
from zoo.board.inputs import read_inputs
from zoo.board.leaderboard import Board, build_board
from zoo.board.measurements import latest_measurements
from zoo.board.plots import width_figures
from zoo.board.recipes import RecipeReader
from zoo.board.results import Result, group_results
from zoo.board.site import build_site
from zoo.commands import main

#: Student's t, 97.5% quantile, one degree of freedom (two seeds), from the printed tables.
T_ONE = 12.706204736174707
ROWS = {"dot_product": "dot_product", "retention": "retention", "[local, gla]": "local+gla"}


def _board(folders: list[Path]) -> tuple[Board, list[Result]]:
    inputs = read_inputs(folders)
    results = group_results(inputs, RecipeReader(inputs.roots))
    return build_board(results, latest_measurements(inputs.benches, commit_times(inputs.roots))), results


def _expected(attention: str, width: int, length: int) -> str:
    values = [accuracy(attention, width, length, seed) for seed in range(SEEDS)]
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = T_ONE * sd / math.sqrt(len(values))
    return f"{mean:.3f} ± {sd:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def test_each_cell_is_the_mean_and_interval_of_its_records(mqar_records: Path) -> None:
    board, _ = _board([mqar_records])
    assert set(board.rows) == set(ROWS.values())
    shown = [c for c in board.columns if c.visible]
    assert len(shown) == len(WIDTHS) * len(LENGTHS), "one column per width and length of the grid"
    for attention in ATTENTIONS:
        for width in WIDTHS:
            for length in LENGTHS:
                (column,) = [c for c in shown if f"seq_len={length}, d_model={width})" in c.label]
                assert column.label.startswith("mqar val/accuracy") and column.higher_is_better
                assert board.cells[ROWS[attention], column.key].text == _expected(attention, width, length)
    assert board.rows["retention"].family == "recurrent" and board.rows["local+gla"].family == "hybrid"
    assert board.rows["local+gla"].cost == "L" and board.rows["dot_product"].cost == "L²"


def test_every_metric_of_the_records_is_a_column_named_from_the_records(mqar_records: Path) -> None:
    """``val/recall_at_2`` is named nowhere in the code: the records make it a column."""
    board, _ = _board([mqar_records])
    labels = {c.label: c for c in board.columns}
    recall = labels["mqar val/recall_at_2 (seq_len=128, d_model=64)"]
    loss = labels["mqar val/loss (seq_len=128, d_model=64)"]
    assert not recall.visible and not loss.visible and recall.higher_is_better and not loss.higher_is_better
    value = statistics.fmean(accuracy("retention", 64, 128, seed) / 2 for seed in range(SEEDS))
    assert board.cells["retention", recall.key].text.startswith(f"{value:.3f} ± ")


def test_accuracy_against_width_draws_the_means_per_length(mqar_records: Path) -> None:
    _, results = _board([mqar_records])
    ((name, figure),) = width_figures(results)
    assert "val/accuracy" in name
    panels = {
        annotation.text: f"x{index + 1}".replace("x1", "x")
        for index, annotation in enumerate(figure.layout.annotations)
    }
    for trace in figure.data:
        length = next(n for n in LENGTHS if panels[f"seq_len={n}"] == trace.xaxis)
        attention = next(a for a, row in ROWS.items() if row == trace.name)
        assert list(trace.x) == list(WIDTHS)
        expected = [statistics.fmean(accuracy(attention, w, length, s) for s in range(SEEDS)) for w in WIDTHS]
        assert list(trace.y) == pytest.approx(expected)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_building_twice_writes_the_same_bytes(mqar_records: Path, mqar_site: Path) -> None:
    """Again into the same folder (over a page an earlier build left, which goes), and into one
    beside it (links to the run directories are relative: the same from a folder beside it)."""
    first = mqar_site.parent
    (first / "runs" / "stale.html").write_text("from an earlier build", encoding="utf-8")
    before = {k: v for k, v in _files(first).items() if k != "runs/stale.html"}
    again = build_site([mqar_records], first)
    assert _files(first) == before
    beside = first.parent / f"{first.name}-beside"
    build_site([mqar_records], beside)
    assert _files(beside) == before
    assert {"index.html", "width.html", "curves.html", "assets/plotly.min.js", "assets/datatables.js"} <= set(
        again.files
    )
    index = (first / "index.html").read_text(encoding="utf-8")
    assert "https://cdn" not in index and '<script src="assets/datatables.js">' in index


def _run_dir(tmp_path: Path, records: list[dict], name: str = "cmp") -> Path:
    folder = tmp_path / "records" / name
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder.parent


OLD_RECORD = {  # what the first zoo compare wrote: no overrides, budget, digests, launcher, steps
    "run": "attention=linear/seed0",
    "combination": "attention=linear",
    "seed": 0,
    "command": "python -m zoo fit --model gpt --data mqar --model.attention=linear --seed_everything=0",
    "metrics": {"val/accuracy": 0.25},
}


def test_a_record_of_an_older_zoo_is_read_where_it_holds_what_the_page_shows(tmp_path: Path) -> None:
    board, _ = _board([_run_dir(tmp_path, [OLD_RECORD])])
    (column,) = [c for c in board.columns if c.visible]
    assert board.cells["linear", column.key].text == "0.250 (1 seed)"


def test_recorded_parameter_counts_are_a_column_beside_the_task(tmp_path: Path) -> None:
    """Records that count their model's parameters (``zoo compare`` from this version on) add a
    column to their task setting; the older record, without a count, leaves its cell empty."""
    gla = OLD_RECORD | {"run": "attention=gla/seed0", "combination": "attention=gla", "parameters": 568068}
    gla["command"] = OLD_RECORD["command"].replace("linear", "gla")
    board, _ = _board([_run_dir(tmp_path, [OLD_RECORD, gla])])
    (column,) = [c for c in board.columns if c.label == "mqar parameters"]
    assert column.visible and not column.higher_is_better
    cell = board.cells["gla", column.key]
    assert (cell.text, cell.value, cell.title) == ("568,000", 568068, "568,068 parameters")
    assert ("linear", column.key) not in board.cells


def test_a_run_page_shows_the_heatmaps_its_task_drew(tmp_path: Path) -> None:
    """The figures a run wrote under ``fit/images`` (a classifier's attention maps) are on its page,
    linked where they lie; a run without them shows none."""
    records = _run_dir(tmp_path, [OLD_RECORD])
    images = records / "cmp" / "runs" / "attention=linear" / "seed0" / "fit" / "images"
    images.mkdir(parents=True)
    (images / "attention_val_0.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    site = build_site([records], tmp_path / "site").index.parent
    (page,) = (site / "runs").glob("*.html")
    html = page.read_text(encoding="utf-8")
    link = "../../records/cmp/runs/attention=linear/seed0/fit/images/attention_val_0.png"
    assert f'<img src="{link}" alt="attention_val_0"' in html and (page.parent / link).resolve().is_file()
    (images / "attention_val_0.png").unlink()
    again = build_site([records], tmp_path / "again").index.parent
    assert "<img" not in next((again / "runs").glob("*.html")).read_text(encoding="utf-8")


def _git_commits(folder: Path, count: int) -> list[str]:
    """``count`` commits in a new repository at ``folder``, oldest first."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    commits = []
    for index in range(count):
        date = f"2026-01-0{index + 1}T00:00:00"
        subprocess.run(
            ["git", "-C", str(folder), "commit", "-q", "--allow-empty", "-m", str(index)],
            check=True,
            env=env | {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "PATH": "/usr/bin:/bin"},
        )
        commits.append(
            subprocess.run(
                ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
        )
    return commits


def _bench(commit: str, times: dict[int, float]) -> dict:
    return {
        "benchmark": "attention",
        "environment": {
            "command": "python -m zoo bench attention",
            "device": "cpu",
            "git_commit": commit + "-dirty",
            "zoo": "0.1.0",
        },
        "config": {"lengths": sorted(times), "batch": 1, "d_model": 256, "heads": 8, "causal": False, "padding": True},
        "cases": [
            {
                "name": "dot_product",
                "results": [
                    {"length": n, "status": "ok", "time_ms": {"median": t}, "peak_memory_mib": 1.0}
                    for n, t in sorted(times.items())
                ],
            }
        ],
    }


def test_the_newest_benchmark_of_a_case_counts_and_older_cells_are_marked(tmp_path: Path) -> None:
    """The older file sorts last by name, so only the commits' times can put it first."""
    folder = tmp_path / "results"
    old, new = _git_commits(folder, 2)
    (folder / "z_old.json").write_text(json.dumps(_bench(old, {1024: 10.0, 16384: 900.0})), encoding="utf-8")
    (folder / "a_new.json").write_text(json.dumps(_bench(new, {1024: 20.0, 4096: 80.0})), encoding="utf-8")
    board, _ = _board([folder])
    cells = {c.label: board.cells.get(("dot_product", c.key)) for c in board.columns if c.group == "speed"}
    assert cells["ms 1k (cpu B1)"].text == "20.0"
    assert cells["ms 4k (cpu B1)"].text == "80.0"
    assert cells["ms 16k (cpu B1)"].text == "900 *", "from the older file: marked"
    assert cells["ms 1k (cpu B1)"].href.startswith("bench/results_a_new.json")


def test_a_partial_benchmark_file_is_left_out(tmp_path: Path) -> None:
    """A benchmark cut at its time limit leaves its lengths so far, without the case descriptions:
    the board shows the finished file beside it and builds."""
    folder = tmp_path / "results"
    (new,) = _git_commits(folder, 1)
    (folder / "a_new.json").write_text(json.dumps(_bench(new, {1024: 20.0})), encoding="utf-8")
    partial = {"benchmark": "attention", "environment": {"command": "python -m zoo bench attention"}, "partial": True,
               "results_so_far": {"dot_product": [{"length": 4096, "status": "ok", "time_ms": {"median": 1.0}}]}}  # fmt: skip
    (folder / "b_partial.json").write_text(json.dumps(partial), encoding="utf-8")
    board, _ = _board([folder])
    cells = {c.label: board.cells.get(("dot_product", c.key)) for c in board.columns if c.group == "speed"}
    assert cells["ms 1k (cpu B1)"].text == "20.0" and "ms 4k (cpu B1)" not in cells


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("missing", "no such folder"),
        ("not_records", "is not a records folder"),
        ("empty", "No results"),
        ("old_record", "lacks command"),
        ("old_bench", "time_ms.median"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    case: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in"
    if case == "not_records":
        folder.mkdir()
        (folder / "notes.json").write_text('{"rows": 3}', encoding="utf-8")
    elif case == "empty":
        (folder / "cmp").mkdir(parents=True)
        (folder / "cmp" / "records.jsonl").write_text("", encoding="utf-8")
    elif case == "old_record":
        folder = _run_dir(tmp_path, [{k: v for k, v in OLD_RECORD.items() if k != "command"}])
    elif case == "old_bench":
        folder.mkdir()
        bench = _bench("0" * 40, {1024: 1.0})
        del bench["cases"][0]["results"][0]["time_ms"]["median"]
        (folder / "old.json").write_text(json.dumps(bench), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        main(["board", "--records", str(folder), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()
    assert error[0].startswith("error: ") and named in error[0] and len(error) == 2, error
    assert case == "empty" or str(folder.name) in error[0]
    assert not (tmp_path / "out").exists(), "nothing written"


def test_every_attention_the_zoo_registers_has_a_family_and_a_cost() -> None:
    """A zoo name without a declared family and cost would show ``?`` in the board's filters."""
    names = [e.name for e in ATTENTION_REGISTRY.entries() if e.obj.__module__.startswith("zoo.") and stackable(e.name)]
    declared = {name: family_and_cost(name) for name in names}
    assert [name for name, value in declared.items() if value is None] == []
    assert {cost for _, cost in declared.values()} <= set(COSTS)


def test_a_state_result_with_a_length_a_layer_failed_at_is_read(tmp_path: Path) -> None:
    """``bench state`` records a length a layer failed at with its status and no time or cache
    (the matrix's decoding column: a log-linear layer past its levels): the board reads the file,
    and a measured length without its cache bytes is still refused as an older zoo's."""
    from zoo.board.inputs import BoardInputError
    from zoo.board.measurements import measurements

    folder = tmp_path / "results"
    folder.mkdir()
    state = {
        "benchmark": "state",
        "environment": {"command": "python -m zoo bench state", "device": "cpu"},
        "config": {"batch": 1, "d_model": 256, "heads": 8, "lengths": [1024, 16384]},
        "cases": [{"attention": "log_linear_mamba2", "results": [
            {"length": 1024, "status": "ok", "time_ms": {"median": 4.5, "q1": 4.4, "q3": 4.6}, "cache_bytes": 1000},
            {"length": 16384, "status": "failed: ValueError: needs 16 Fenwick levels"},
        ]}],
    }  # fmt: skip
    (folder / "state.json").write_text(json.dumps(state), encoding="utf-8")
    (bench,) = read_inputs([folder]).benches
    assert [m.cache_bytes for m in measurements(bench)] == [1000, None]
    del state["cases"][0]["results"][0]["cache_bytes"]
    (folder / "state.json").write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(BoardInputError, match="cache_bytes"):
        read_inputs([folder])


@pytest.mark.parametrize(("kind", "drop", "named"), [("decode", "results", "'results'"),
                                                     ("decode", "tokens_per_second", "results[].tokens_per_second"),
                                                     ("decode", "a list", "'results'"),
                                                     ("train", "result", "'result'")])  # fmt: skip
def test_a_listed_result_without_its_measurements_is_one_line(tmp_path: Path, kind: str, drop: str, named: str) -> None:
    """A ``decode`` or ``train`` result the board lists, hand-edited to lose a field the results
    pages read, is refused as an older zoo's in one line naming the field, not a ``KeyError``
    from a records block; the result as the bench writes it is read."""
    from zoo.board.inputs import BoardInputError

    folder = tmp_path / "results"
    folder.mkdir()
    decode = {"mode": "cached", "time_s": 1.0, "sentences_per_second": 8.0, "tokens_per_second": 160.0}
    result: dict[str, Any] = {
        "benchmark": kind,
        "environment": {"command": f"python -m zoo bench {kind}", "device": "cpu"},
        "config": {"batch": 1},
        **({"results": [decode]} if kind == "decode" else {"result": {"steps_per_second": 3.0}}),
    }
    (folder / f"{kind}.json").write_text(json.dumps(result), encoding="utf-8")
    assert [bench.kind for bench in read_inputs([folder]).benches] == [kind]
    if drop == "a list":  # one result where the bench writes a list of them
        result["results"] = decode
    elif drop in result:
        del result[drop]
    else:
        del decode[drop]
    (folder / f"{kind}.json").write_text(json.dumps(result), encoding="utf-8")
    with pytest.raises(BoardInputError, match=re.escape(f"without {named} ")):
        read_inputs([folder])
