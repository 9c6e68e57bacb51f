"""The matrix page from a records fixture in ``zoo matrix``'s layout (:mod:`tests.board.matrix_records`):
the rate chosen on validation, "not run" cells, Student-t intervals, the columns' order, and the
issue's question answered from the first page in one click (read from the pages' ``data-*``)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import yaml

from tests.board.matrix_records import (  # noqa: F401 (matrix_site is a fixture)
    ANSWER,
    MAMBA2_SEEDS,
    STATE_BYTES,
    TIMES_8K,
    matrix_site,
    read_table,
    write_matrix_records,
)
from zoo.board.inputs import read_inputs
from zoo.board.matrix_cells import matrix_cells
from zoo.board.matrix_page import cell_text
from zoo.matrix.cli import PROTOCOLS
from zoo.matrix.rows import causal_names

RECALLS = 0.9


def _cells(tmp_path: Path) -> dict[str, dict]:
    matrix = matrix_cells(read_inputs([write_matrix_records(tmp_path)]), PROTOCOLS)
    return {row.row.label: row.cells for row in matrix.rows}


def test_a_cell_is_the_test_score_at_the_rate_chosen_on_validation(tmp_path: Path) -> None:
    gla = _cells(tmp_path)["gla"]["mqar"]
    assert gla.rate == "3e-3"  # validates 0.80 against 0.60, though 1e-3 tests better
    assert gla.value == 0.79
    assert cell_text(gla) == ("0.790", "1 seed")


def test_a_cell_whose_sweep_is_not_finished_says_how_many_rates_ran(tmp_path: Path) -> None:
    """A row stopped after its first rate (``zoo matrix`` resumes it later) shows that rate's score,
    marked as one of the sweep's two, not as the sweep's choice; a finished sweep carries no mark."""
    records = write_matrix_records(tmp_path) / "matrix" / "quick" / "mqar" / "first" / "records.jsonl"
    first = json.loads(records.read_text().splitlines()[0])
    partial = {**first, "combination": "attention=deltanet,lr=1e-3", "run": "attention=deltanet,lr=1e-3/seed0"}
    partial["overrides"] = {**first["overrides"], "model.attention": "deltanet", "model.lr": "1e-3"}
    partial["metrics"] = {"test/accuracy": 0.25, "val/accuracy": 0.25}
    records.write_text(records.read_text() + json.dumps(partial) + "\n")
    cells = {row.row.label: row.cells for row in matrix_cells(read_inputs([tmp_path]), PROTOCOLS).rows}
    assert cells["deltanet"]["mqar"].rates == (1, 2)
    assert cell_text(cells["deltanet"]["mqar"]) == ("0.250", "1 seed, 1 of 2 rates")
    assert cells["gla"]["mqar"].rates is None


def test_the_interval_over_three_seeds_is_students_t(tmp_path: Path) -> None:
    summary = _cells(tmp_path)["mamba2"]["mqar"].summary
    mean, sd = statistics.fmean(MAMBA2_SEEDS), statistics.stdev(MAMBA2_SEEDS)
    t = math.sqrt(2 * 0.95**2 / (1 - 0.95**2))  # two degrees of freedom: F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    assert summary.n == 3
    assert math.isclose(summary.low, mean - t * sd / math.sqrt(3), rel_tol=1e-9)
    assert math.isclose(summary.high, mean + t * sd / math.sqrt(3), rel_tol=1e-9)


def test_bench_cells_are_state_bytes_at_16k_and_time_against_sdpa_at_8k(tmp_path: Path) -> None:
    cells = _cells(tmp_path)
    for name, size in STATE_BYTES.items():
        assert cells[name]["decoding"].value == size
        assert math.isclose(cells[name]["speed"].value, TIMES_8K[name] / TIMES_8K["floor"])


def test_a_row_measured_again_on_its_own_replaces_its_groups_cell(tmp_path: Path) -> None:
    """``decoding/first-mamba2.json`` (the row measured again after a change) is the cell, whichever
    order the files are read in; the group's other rows keep the group file's."""
    folder = write_matrix_records(tmp_path) / "matrix" / "quick" / "decoding"
    again = json.loads((folder / "first.json").read_text())
    again["cases"] = [
        {"attention": "mamba2", "results": [{"length": 16384, "time_ms": {"median": 1.0}, "cache_bytes": 7}]}
    ]
    (folder / "first-mamba2.json").write_text(json.dumps(again))
    cells = {row.row.label: row.cells for row in matrix_cells(read_inputs([tmp_path]), PROTOCOLS).rows}
    assert cells["mamba2"]["decoding"].value == 7
    assert cells["gla"]["decoding"].value == STATE_BYTES["gla"]


def test_a_row_that_failed_reads_its_failure_until_its_own_file_measures_it(tmp_path: Path) -> None:
    """A bench row out of memory at the column's length, or skipped after a shorter length's
    failure, reads ``out of memory`` (not "not run"), one the layer declined by design ``refused``;
    a later file of its own with a number wins."""
    from zoo.board.matrix_markdown import matrix_markdown

    folder = write_matrix_records(tmp_path) / "matrix" / "quick" / "speed"
    group = json.loads((folder / "first.json").read_text())
    group["cases"] += [
        {"name": "kda", "results": [{"length": 8192, "status": "out of memory"}]},
        {"name": "rwkv7", "results": [{"length": 8192, "status": "skipped: out of memory at length 4096"}]},
        {"name": "retention", "results": [{"length": 8192, "status": "refused: needs 14 Fenwick levels: raise..."}]},
    ]
    (folder / "first.json").write_text(json.dumps(group))
    matrix = matrix_cells(read_inputs([tmp_path]), PROTOCOLS)
    cells = {row.row.label: row.cells for row in matrix.rows}
    for name in ("kda", "rwkv7"):
        assert cells[name]["speed"].value is None and cell_text(cells[name]["speed"]) == ("out of memory", "")
    assert cell_text(cells["retention"]["speed"]) == ("refused", "")
    assert "| `kda` |" not in matrix_markdown(matrix), "a row with no number is not a measured row"
    again = dict(
        group,
        cases=[
            group["cases"][0],
            {"name": "kda", "results": [{"length": 8192, "status": "ok", "time_ms": {"median": 3.0}}]},
        ],
    )
    (folder / "first-kda.json").write_text(json.dumps(again))
    cells = {row.row.label: row.cells for row in matrix_cells(read_inputs([tmp_path]), PROTOCOLS).rows}
    assert cells["kda"]["speed"].failure is None
    assert math.isclose(cells["kda"]["speed"].value, 3.0 / TIMES_8K["floor"])


def test_every_row_and_column_with_not_run_cells_greyed(matrix_site: Path) -> None:  # noqa: F811
    table = read_table(matrix_site / "matrix.html", "matrix")
    rows = {row["attrs"]["data-row"]: row["cells"] for row in table.rows}
    assert set(causal_names()) <= set(rows)
    order = yaml.safe_load((PROTOCOLS / "matrix.yaml").read_text(encoding="utf-8"))["yardsticks"]
    assert [h["data-sort"] for h in table.headers][2:-1] == order
    deltanet = rows["deltanet"]["mqar"]
    assert deltanet["text"] == "not run" and "not-run" in deltanet["class"] and deltanet["data-value"] == ""
    assert rows["gla"]["mqar"]["text"].startswith("0.790") and "lr 3e-3" in rows["gla"]["mqar"]["text"]
    assert "1 seed" in rows["softmax"]["mqar"]["text"]
    assert "3 seeds" in rows["mamba2"]["mqar"]["text"]
    first = sum(row["attrs"]["data-first"] == "yes" for row in table.rows)
    # five rows hold MQAR records, all first priority; mamba2's alone at the protocol's three seeds
    run, held = f"5 of {len(rows)} rows run", f"1 of {first} first-priority at 3 seeds"
    assert table.footer["mqar"]["text"] == run + held  # the two lines of the footer's cell


def test_the_question_is_answered_from_the_first_page_in_one_click(matrix_site: Path) -> None:  # noqa: F811
    """Which family recalls at (256, 16) with the smallest state, and what does it cost at 16k?"""
    index = (matrix_site / "index.html").read_text(encoding="utf-8")
    assert 'id="matrix-link" class="matrix-link" href="matrix.html"' in index
    rows = read_table(matrix_site / "matrix.html", "matrix").rows
    recalls = [
        r for r in rows if r["cells"]["mqar"]["data-value"] and float(r["cells"]["mqar"]["data-value"]) > RECALLS
    ]
    ranked = sorted(recalls, key=lambda r: float(r["cells"]["decoding"]["data-value"] or math.inf))
    best = ranked[0]
    assert best["attrs"]["data-row"] == ANSWER
    cost = best["cells"]["decoding"]
    assert float(cost["data-value"]) == STATE_BYTES[ANSWER]
    assert (matrix_site / cost["href"]).is_file(), "the cost cell links to its benchmark file"
    assert best["cells"]["row"]["href"] == f"families/{ANSWER}.html"
