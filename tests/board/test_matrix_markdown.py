"""The matrix's Markdown table: the committed results page holds exactly the table the committed
records give (a number written once, in the records), and the table from the records fixture
(:mod:`tests.board.matrix_records`) shows the rate chosen on validation and the rows not run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.board.matrix_records import _record, _write_records, write_matrix_records
from zoo.attention import ATTENTION_REGISTRY
from zoo.board.cli import main
from zoo.board.inputs import read_inputs
from zoo.board.matrix_cells import matrix_cells
from zoo.board.matrix_markdown import BEGIN, END, coverage, matrix_markdown, write_matrix_markdown
from zoo.compare.grid import combinations
from zoo.errors import ConfigurationError
from zoo.matrix import rows
from zoo.matrix.cli import PROTOCOLS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "matrix.md"
RECIPE = PROTOCOLS / ".." / "gpt_shakespeare_cpu_qwen3next.yaml"


def test_the_committed_page_is_the_committed_records_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = [name for name in rows.causal_names() if ATTENTION_REGISTRY.get(name).__module__.startswith("zoo.")]
    monkeypatch.setattr(rows, "causal_names", lambda: shipped)  # not the plugins other tests register
    page = shutil.copy(PAGE, tmp_path / "matrix.md")
    matrix = matrix_cells(read_inputs([ROOT / "benchmarks" / "results"]), PROTOCOLS)
    assert not write_matrix_markdown(matrix, Path(page)), (
        "docs/results/matrix.md differs from its records: run "
        "python -m zoo board --records benchmarks/results --markdown docs/results/matrix.md"
    )


def test_the_table_from_the_fixture(tmp_path: Path) -> None:
    matrix = matrix_cells(read_inputs([write_matrix_records(tmp_path)]), PROTOCOLS)
    lines = matrix_markdown(matrix).splitlines()
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("| `")]
    rows = {cell[0].strip("`"): cell for cell in cells}
    columns = [stick.name for stick in matrix.yardsticks]
    mqar, decoding = 2 + columns.index("mqar"), 2 + columns.index("decoding")
    assert rows["gla"][mqar] == "0.790 (1 seed, lr 3e-3)"  # the rate chosen on validation, not the best test score
    assert rows["mamba2"][mqar].startswith("0.933 ([0.")  # three seeds: mean and interval
    assert rows["mamba2"][decoding] == "65,536"
    assert rows["softmax"][2 + columns.index("parity")] == "·"  # a cell not run in a measured row
    waiting = next(line for line in lines if " rows measured at the quick size" in line)
    assert waiting.startswith(f"{len(rows)} of {len(matrix.rows)} rows measured at the quick size; not run yet: ")
    assert "`mamba3`" in waiting and "`mamba2`" not in waiting


def test_the_coverage_counts_each_columns_rows_run_and_first_priority_rows_at_full_seeds(tmp_path: Path) -> None:
    matrix = matrix_cells(read_inputs([write_matrix_records(tmp_path)]), PROTOCOLS)
    lines = matrix_markdown(matrix).splitlines()
    table = {line.split("|")[1].strip(): line.split("|")[2:4] for line in lines[lines.index(coverage(matrix)[0]) :]}
    runs, seeded = (cell.strip() for cell in table[next(s.title for s in matrix.yardsticks if s.name == "mqar")])
    first = sum(row.row.first for row in matrix.rows)
    # five rows hold MQAR records (all first priority); only mamba2's cell has the protocol's three seeds
    assert runs == f"5 of {len(matrix.rows)}" and seeded == f"1 of {first} at 3 seeds"
    parity = table[next(s.title for s in matrix.yardsticks if s.name == "parity")]
    assert parity[0].strip() == f"0 of {len(matrix.rows)}"
    speed = table[next(s.title for s in matrix.yardsticks if s.name == "speed")]
    assert speed[1].strip().endswith(" one measurement each")


def test_a_cell_the_protocol_has_none_for_reads_n_a_not_not_run(tmp_path: Path) -> None:
    """The speed column times one registered layer: a recipe's cell there, and an entry with
    arguments', read ``n/a`` and the line under the table says why; the decoding column decodes
    whole recipes, so a recipe's cell there reads ``·`` until it is run."""
    root = write_matrix_records(tmp_path)
    qwen = next(row for row in rows.select_rows([], {"qwen3next": RECIPE}) if row.recipe)
    for group, attention in [("first", "{name: softmax, conv_size: 4}"), ("recipe-qwen3next", qwen.attention)]:
        record = _record("mqar", attention, 0, {"test/accuracy": 0.5, "val/accuracy": 0.5}, **{"model.lr": "1e-3"})
        (combination,) = combinations({"model.attention": [attention], "model.lr": ["1e-3"]})  # as compare names it
        record |= {"combination": combination.name, "run": f"{combination.name}/seed0"}
        _write_records(root / "matrix" / "quick" / "mqar" / group, [record])
    matrix = matrix_cells(read_inputs([root]), PROTOCOLS)
    lines = matrix_markdown(matrix).splitlines()
    table = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in lines
        if line.startswith("| ")
    }
    columns = [stick.name for stick in matrix.yardsticks]
    speed, decoding = 2 + columns.index("speed"), 2 + columns.index("decoding")
    assert table["recipe `qwen3next`"][speed] == table["`{name: softmax, conv_size: 4}`"][speed] == "n/a"
    assert table["`{name: softmax, conv_size: 4}`"][decoding] == "n/a"
    assert table["recipe `qwen3next`"][decoding] == "·" and table["`gla`"][speed] != "n/a"
    assert any(line.startswith("`n/a`: the column's benchmark has no cell for the row") for line in lines)


def test_the_page_is_rewritten_between_its_markers_only(tmp_path: Path) -> None:
    records = write_matrix_records(tmp_path / "records")
    page = tmp_path / "page.md"
    page.write_text(f"# Before\n\n{BEGIN}\nold table\n{END}\n\nAfter.\n", encoding="utf-8")
    main(["--records", str(records), "--markdown", str(page)])
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"# Before\n\n{BEGIN}\n| row | family |") and text.endswith(f"{END}\n\nAfter.\n")
    assert "old table" not in text
    main(["--records", str(records), "--markdown", str(page)])
    assert page.read_text(encoding="utf-8") == text  # the same records write the same page


def test_a_page_without_markers_is_refused_and_kept(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="no matrix markers"):
        main(["--records", str(write_matrix_records(tmp_path / "records")), "--markdown", str(page)])
    assert page.read_text(encoding="utf-8") == "# A page\n"


def test_nothing_to_write_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="nothing to write"):
        main(["--records", str(tmp_path)])
