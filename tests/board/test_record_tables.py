"""The results pages' tables of ``zoo compare`` records: rendered by code from the committed
records (so a typed number cannot drift from its measurement), and refused in one line when a
block names what the records do not hold."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from zoo.board.cli import main
from zoo.board.record_tables import BEGIN, END, rewrite_record_tables
from zoo.errors import ConfigurationError, DataError

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(page for page in (ROOT / "docs" / "results").glob("*.md") if BEGIN in page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_records_table_in_the_results_pages_is_what_its_records_say(page: Path, tmp_path: Path) -> None:
    copy = tmp_path / page.name
    shutil.copy(page, copy)
    blocks, changed = rewrite_record_tables(copy, ROOT)
    assert blocks > 0
    assert not changed, f"{page.name}: a table differs from its records; run python -m zoo board --markdown {page}"


def test_the_state_tracking_page_has_no_typed_table() -> None:
    text = (ROOT / "docs" / "results" / "state_tracking.md").read_text(encoding="utf-8")
    outside = text
    while BEGIN in outside:
        start = outside.index(BEGIN)
        outside = outside[:start] + outside[outside.index(END, start) + len(END) :]
    assert not [line for line in outside.splitlines() if line.startswith("| ")]


def _record(combination: str, seed: int, accuracy: float, fit_seconds: float) -> dict:
    return {
        "combination": combination,
        "seed": seed,
        "fit_seconds": fit_seconds,
        "metrics": {"test/accuracy": accuracy, "test/loss": 1 - accuracy},
    }


def _page(tmp_path: Path, spec: str, records: list[dict]) -> Path:
    (tmp_path / "bench").mkdir(exist_ok=True)
    (tmp_path / "bench" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    page = tmp_path / "page.md"
    page.write_text(f"Prose.\n\n{BEGIN}\n{spec}-->\n| stale |\n{END}\n\nMore prose.\n")
    return page


def test_a_block_is_rewritten_with_means_sds_seeds_and_bold(tmp_path: Path) -> None:
    records = [
        _record("attention=a", 0, 0.990, 120.0),
        _record("attention=a", 1, 0.970, 130.0),
        _record("attention=b", 0, 0.5, 12.345),
    ]
    spec = (
        "records: bench\nlabels: [attention]\nrows: {attention=a: ['`a`'], attention=b: ['`b`']}\n"
        "columns: {seeds: seeds, test/accuracy: accuracy, test/accuracy / test/loss: both, fit_seconds: fit s}\n"
        "bold_at_least: 0.95\n"
    )
    page = _page(tmp_path, spec, records)
    assert rewrite_record_tables(page, tmp_path) == (1, True)
    text = page.read_text()
    assert text.startswith("Prose.\n\n") and text.endswith(f"{END}\n\nMore prose.\n")
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")
    ]
    assert rows[0] == ["attention", "seeds", "accuracy", "both", "fit s"]
    sd = statistics.stdev([0.990, 0.970])
    assert rows[1] == ["`a`", "2", f"**0.980 ± {sd:.3f}**", f"**0.980 ± {sd:.3f}** / 0.020 ± {sd:.3f}", "125"]
    assert rows[2] == ["`b`", "1", "0.500", "0.500 / 0.500", "12.3"]
    assert rewrite_record_tables(page, tmp_path) == (1, False)  # idempotent


def test_without_rows_every_combination_is_a_row(tmp_path: Path) -> None:
    page = _page(tmp_path, "records: bench\ncolumns: {test/accuracy: accuracy}\n", [_record("x=1", 0, 0.25, 1.0)])
    rewrite_record_tables(page, tmp_path)
    assert "| `x=1`       | 0.250    |" in page.read_text()


def test_a_row_can_keep_one_seed(tmp_path: Path) -> None:
    records = [_record("attention=a", 0, 0.990, 120.0), _record("attention=a", 1, 0.970, 130.0)]
    spec = (
        "records: bench\nlabels: [seed]\nrows: {attention=a@seed=1: ['1'], attention=a: [both]}\n"
        "columns: {seeds: seeds, test/accuracy: accuracy, fit_seconds: fit s}\n"
    )
    page = _page(tmp_path, spec, records)
    rewrite_record_tables(page, tmp_path)
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in page.read_text().splitlines()
        if line.startswith("| ")
    ]
    assert rows[1] == ["1", "1", "0.970", "130"]
    assert rows[2] == ["both", "2", f"0.980 ± {statistics.stdev([0.990, 0.970]):.3f}", "125"]
    page.write_text(page.read_text().replace("attention=a@seed=1", "attention=a@seed=2"))
    with pytest.raises(ConfigurationError, match="no records of 'attention=a@seed=2'"):
        rewrite_record_tables(page, tmp_path)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("records: bench\nrows: {attention=c: ['c']}\ncolumns: {test/accuracy: a}\n", "no records of 'attention=c'; did you mean 'attention=a'"),
        ("records: bench\ncolumns: {test/acuracy: a}\n", "no record has 'test/acuracy'; did you mean 'test/accuracy'"),
        ("records: nowhere\ncolumns: {test/accuracy: a}\n", "no records at nowhere"),
        ("records: bench\ncolumns: {test/accuracy: a}\ncolour: red\n", "unknown field 'colour'"),
        ("records: bench\nlabels: [x, y]\nrows: {attention=a: ['a']}\ncolumns: {test/accuracy: a}\n", "1 label cells for 2 labels"),
        ("columns: {test/accuracy: a}\n", "needs `records:`"),
    ],
)  # fmt: skip
def test_a_bad_block_is_one_line_and_the_page_is_kept(tmp_path: Path, spec: str, message: str) -> None:
    page = _page(tmp_path, spec, [_record("attention=a", 0, 0.9, 1.0)])
    before = page.read_text()
    with pytest.raises(ConfigurationError, match=message) as error:
        rewrite_record_tables(page, tmp_path)
    assert "\n" not in str(error.value)
    assert page.read_text() == before


def test_an_unclosed_block_is_refused(tmp_path: Path) -> None:
    page = _page(tmp_path, "records: bench\ncolumns: {test/accuracy: a}\n", [_record("attention=a", 0, 0.9, 1.0)])
    page.write_text(page.read_text().replace(END, ""))
    with pytest.raises(ConfigurationError, match="1 records blocks open and 0 close"):
        rewrite_record_tables(page, tmp_path)


def test_zoo_board_markdown_rewrites_the_records_tables_of_each_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    page = _page(tmp_path, "records: bench\ncolumns: {test/accuracy: accuracy}\n", [_record("x=1", 0, 0.25, 1.0)])
    monkeypatch.chdir(tmp_path)  # the blocks' paths are read from the repository's root
    main(["--records", "bench", "--markdown", str(page)])
    assert "| `x=1`       | 0.250    |" in page.read_text()
    assert "records tables: " in capsys.readouterr().out
    with pytest.raises(ConfigurationError, match="no such page"):
        main(["--records", "bench", "--markdown", str(tmp_path / "missing.md")])


def _swept(attention: str, lr: str, seed: int, accuracy: float, steps: int) -> dict:
    """A run of a grid over ``model.attention`` and ``model.lr``, named as ``zoo compare`` names it."""
    return {
        "combination": f"attention={attention},lr={lr}",
        "overrides": {"model.attention": attention, "model.lr": lr},
        "seed": seed,
        "steps": steps,
        "fit_seconds": 10.0,
        "metrics": {"val/accuracy": accuracy},
    }


def _table(page: Path) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in page.read_text().splitlines()
        if line.startswith("| ")
    ]


def test_a_pivot_spreads_a_swept_setting_over_the_columns(tmp_path: Path) -> None:
    accuracies = {("a", "1e-3"): [0.5, 0.7], ("a", "1e-2"): [0.9], ("b", "1e-3"): [0.25], ("b", "1e-2"): [0.125]}
    records = [
        _swept(attention, lr, seed, accuracy, 100 * (seed + 1))
        for (attention, lr), values in accuracies.items()
        for seed, accuracy in enumerate(values)
    ]
    spec = (
        "records: bench\nlabels: [attention]\nrows: {attention=b: ['`b`'], attention=a: ['`a`']}\n"
        "pivot: {key: lr, values: [1e-3, 1e-2], headers: [slow, fast], cell: val/accuracy (steps)}\n"
        "bold_at_least: 0.8\n"
    )
    page = _page(tmp_path, spec, records)
    assert rewrite_record_tables(page, tmp_path) == (1, True)
    a_slow = f"{statistics.fmean([0.5, 0.7]):.3f} ± {statistics.stdev([0.5, 0.7]):.3f} (150)"  # steps: mean of 100, 200
    assert _table(page) == [
        ["attention", "slow", "fast"],
        ["`b`", "0.250 (100)", "0.125 (100)"],
        ["`a`", a_slow, "**0.900** (100)"],
    ]
    page = _page(tmp_path, spec, [r for r in records if r["combination"] != "attention=b,lr=1e-2"])
    rewrite_record_tables(page, tmp_path)
    assert [row[2] for row in _table(page)[1:]] == ["-", "**0.900** (100)"]  # a row without the value


def test_a_pivot_keeps_the_best_value_on_the_first_seeds_and_reads_its_seeds(tmp_path: Path) -> None:
    # As zoo compare --sweep: seed 0 at each rate chooses, then seeds 0-2 run at the kept rate.
    a = {"1e-3": [0.60], "1e-2": [0.80, 0.70, 0.90]}
    b = {"1e-3": [0.50, 0.40, 0.45], "1e-2": [0.30]}
    records = [
        _swept(name, lr, seed, value, 100)
        for name, runs in (("a", a), ("b", b))
        for lr, values in runs.items()
        for seed, value in enumerate(values)
    ]
    spec = (
        "records: bench\nlabels: [attention]\nrows: {attention=a: ['`a`'], attention=b: ['`b`']}\n"
        "pivot: {key: model.lr, values: [1e-3, 1e-2], cell: val/accuracy, seeds: 1, best: kept}\n"
        "columns: {seeds: seeds, interval val/accuracy: at the kept rate, paired val/accuracy: against a}\n"
        "baseline: attention=b\n"
    )
    page = _page(tmp_path, spec, records)
    rewrite_record_tables(page, tmp_path)
    rows = _table(page)
    assert rows[0] == ["attention", "1e-3", "1e-2", "kept", "seeds", "at the kept rate", "against a"]
    assert rows[1][:5] == ["`a`", "0.600", "**0.800**", "1e-2", "3"]  # seed 0 alone in the sweep's cells
    assert rows[2][:5] == ["`b`", "**0.500**", "0.300", "1e-3", "3"]
    t_2 = 4.302652729911275  # Student's t, 0.975 quantile, 2 degrees of freedom (printed tables)
    for row, values in ((rows[1], a["1e-2"]), (rows[2], b["1e-3"])):
        mean, sd = sum(values) / 3, (sum((v - sum(values) / 3) ** 2 for v in values) / 2) ** 0.5
        half = t_2 * sd / 3**0.5
        assert row[5] == f"{mean:.3f} ± {sd:.3f} [{mean - half:.3f}, {mean + half:.3f}]"
    differences = [x - y for x, y in zip(a["1e-2"], b["1e-3"])]
    mean, sd = sum(differences) / 3, (sum((d - sum(differences) / 3) ** 2 for d in differences) / 2) ** 0.5
    half = t_2 * sd / 3**0.5
    assert rows[1][6] == f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"
    assert rows[2][6] == ""  # the baseline itself


def test_the_interval_is_students_t_over_the_seeds(tmp_path: Path) -> None:
    values = [0.8234, 0.8131, 0.8188, 0.8028, 0.8245]  # five seeds: 4 degrees of freedom
    records = [_record("attention=a", seed, value, 1.0) for seed, value in enumerate(values)]
    page = _page(tmp_path, "records: bench\ncolumns: {interval test/accuracy: accuracy}\ndecimals: 4\n", records)
    rewrite_record_tables(page, tmp_path)
    mean = sum(values) / 5
    sd = (sum((v - mean) ** 2 for v in values) / 4) ** 0.5
    half = 2.7764451051977987 * sd / 5**0.5  # t(0.975, 4)
    assert _table(page)[1] == ["`attention=a`", f"{mean:.4f} ± {sd:.4f} [{mean - half:.4f}, {mean + half:.4f}]"]


def test_a_pivot_value_can_name_its_source_and_an_ambiguous_cell_is_refused(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "records.jsonl").write_text(json.dumps(_swept("a", "1e-3", 0, 0.375, 100)) + "\n")
    spec = (
        "records: [bench, other]\nlabels: [attention]\nrows: {attention=a: ['`a`']}\n"
        "pivot: {key: lr, values: [bench:1e-3, other:1e-3], headers: [here, there], cell: val/accuracy}\n"
    )
    page = _page(tmp_path, spec, [_swept("a", "1e-3", 0, 0.625, 100)])
    rewrite_record_tables(page, tmp_path)
    assert _table(page)[1] == ["`a`", "0.625", "0.375"]
    page.write_text(page.read_text().replace("[bench:1e-3, other:1e-3]", "[1e-3, other:1e-3]"))
    before = page.read_text()
    with pytest.raises(DataError, match=r"2 runs of 'attention=a,lr=1e-3' with seed 0 in the column lr=1e-3") as error:
        rewrite_record_tables(page, tmp_path)
    assert "\n" not in str(error.value)
    assert page.read_text() == before


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("records: bench\npivot: {key: lr, cell: val/accuracy}\n", "a pivot needs `key:`, `values:` and `cell:`"),
        ("records: bench\npivot: {key: lr, values: [1e-3], cell: val/accuracy, sort: up}\n", "unknown pivot field 'sort'"),
        ("records: bench\npivot: {key: lr, values: [1e-3], headers: [a, b], cell: val/accuracy}\n", "1 values and 2 headers"),
        ("records: bench\npivot: {key: lr, values: [1e-3], cell: val/accuracy}\ncolumns: {seeds: seeds}\n", "give the pivot `best:`"),
        ("records: bench\ncolumns: {paired val/accuracy: d}\n", "a `paired` column needs `baseline:`"),
        ("records: bench\npivot: {key: width, values: [1], cell: val/accuracy}\n", "has no setting 'width' to pivot on"),
        ("records: bench\npivot: {key: lr, values: [1e-3], cell: val/acuracy}\n", "no record has 'val/acuracy'"),
        ("records: bench\npivot: {key: lr, values: [1e-3, 0.01], cell: val/accuracy}\n", "no run has lr=0.01; the runs have ['1e-3']"),
        ("records: bench\npivot: {key: lr, values: [1e-3], cell: val/accuracy, select: val/loss}\n", "pivot `select:` chooses the `best:` value"),
        ("records: bench\npivot: {key: lr, values: [1e-3], cell: val/accuracy, best: kept, select: val/los}\n", "no record has 'val/los'"),
        ("records: bench\npivot: {key: lr, values: [1e-3], cell: val/accuracy, best: kept}\ncolumns: {'x:seeds': s}\n", "not beside a pivot"),
    ],
)  # fmt: skip
def test_a_bad_pivot_is_one_line(tmp_path: Path, spec: str, message: str) -> None:
    page = _page(tmp_path, spec, [_swept("a", "1e-3", 0, 0.5, 100)])
    with pytest.raises((ConfigurationError, DataError), match=re.escape(message)) as error:
        rewrite_record_tables(page, tmp_path)
    assert "\n" not in str(error.value)


def test_a_rerun_appended_to_the_records_is_refused_not_averaged(tmp_path: Path) -> None:
    records = [_record("attention=a", 0, 0.9, 1.0), _record("attention=a", 0, 0.7, 1.0)]
    page = _page(tmp_path, "records: bench\ncolumns: {test/accuracy: a}\n", records)
    with pytest.raises(DataError, match="2 runs of 'attention=a' with seed 0 in the row 'attention=a'") as error:
        rewrite_record_tables(page, tmp_path)
    assert "\n" not in str(error.value)


def _scored(attention: str, lr: str, seed: int, val: float, test: float) -> dict:
    """A swept run with a validation and a test accuracy, as ``zoo matrix``'s MQAR runs report."""
    return {**_swept(attention, lr, seed, val, 100), "metrics": {"val/accuracy": val, "test/accuracy": test}}


_SELECT = (
    "records: bench\nlabels: [attention]\nrows: {attention=a: ['`a`'], attention=b: ['`b`']}\n"
    "pivot: {key: lr, values: [1e-3, 1e-2], cell: test/accuracy, seeds: 1, best: kept, select: val/accuracy}\n"
    "columns: {each test/accuracy: at the kept rate}\n"
)


def test_select_keeps_the_value_chosen_on_another_metric_than_the_cells_show(tmp_path: Path) -> None:
    # Seed 0 at each rate as (validation, test); `a`'s two metrics disagree on the better rate, and
    # `b` ties on validation (the first value is kept). Seeds 1 and 2 ran at the kept rate only.
    sweep = {
        "a": {"1e-3": (0.40, 0.90), "1e-2": (0.60, 0.50)},
        "b": {"1e-3": (0.25, 0.20), "1e-2": (0.25, 0.30)},
    }
    later = {"a": [0.55, 0.65], "b": [0.10, 0.15]}
    kept = {name: max(rates, key=lambda rate: rates[rate][0]) for name, rates in sweep.items()}  # first on a tie
    assert kept == {"a": "1e-2", "b": "1e-3"}
    assert {name: max(rates, key=lambda rate: rates[rate][1]) for name, rates in sweep.items()} != kept
    records = [_scored(name, lr, 0, *scores) for name, rates in sweep.items() for lr, scores in rates.items()]
    records += [
        _scored(name, kept[name], seed, value, value)
        for name, values in later.items()
        for seed, value in enumerate(values, 1)
    ]
    page = _page(tmp_path, _SELECT, records)
    rewrite_record_tables(page, tmp_path)
    rows = _table(page)
    for row, name in zip(rows[1:], ("a", "b")):
        tests = [sweep[name][kept[name]][1], *later[name]]
        each = ", ".join(f"{value:.3f}" for value in tests)
        cells = [f"**{test:.3f}**" if lr == kept[name] else f"{test:.3f}" for lr, (_, test) in sweep[name].items()]
        assert row == [f"`{name}`", *cells, kept[name], f"{statistics.fmean(tests):.3f} ({each})"]
    page.write_text(page.read_text().replace(", select: val/accuracy", ""))
    rewrite_record_tables(page, tmp_path)
    assert [row[3] for row in _table(page)[1:]] == ["1e-3", "1e-2"]  # without select: the best test cell
    page = _page(tmp_path, _SELECT, [_scored("a", "1e-3", 0, 0.4, 0.9), _scored("b", "1e-2", 0, 0.2, 0.3)])
    rewrite_record_tables(page, tmp_path)
    assert [row[3:] for row in _table(page)[1:]] == [["1e-3", "0.900 (1 seed)"], ["1e-2", "0.300 (1 seed)"]]


def test_select_keeps_the_rate_the_matrix_keeps(tmp_path: Path) -> None:
    from tests.board.matrix_records import MQAR, SCORES, write_matrix_records
    from zoo.board.inputs import read_inputs
    from zoo.board.matrix_cells import matrix_cells
    from zoo.matrix.cli import PROTOCOLS

    matrix = matrix_cells(read_inputs([write_matrix_records(tmp_path)]), PROTOCOLS)
    (stick,) = [stick for stick in matrix.yardsticks if stick.name == MQAR]
    ((key, rates),) = stick.sweep.items()
    cells = {row.row.label: row.cells[MQAR] for row in matrix.rows if row.cells[MQAR].summary is not None}
    assert set(cells) == set(SCORES) and cells["gla"].rate == "3e-3"  # chosen on validation, not on test
    folders = [f"matrix/quick/{MQAR}/first", f"matrix/quick/{MQAR}/rest"]
    spec = (
        f"records: {folders}\nlabels: [attention]\nrows: {{{', '.join(f'attention={n}: [{n}]' for n in SCORES)}}}\n"
        f"pivot: {{key: {key}, values: {list(rates)}, cell: test/accuracy, seeds: 1, best: kept, select: val/accuracy}}\n"
        "columns: {each test/accuracy: at the kept rate}\n"
    )
    page = tmp_path / "page.md"
    page.write_text(f"{BEGIN}\n{spec}-->\n{END}\n")
    rewrite_record_tables(page, tmp_path)
    kept = {row[0]: (row[-2], row[-1].split(" ")[0]) for row in _table(page)[1:]}
    assert kept == {name: (cell.rate, f"{cell.value:.3f}") for name, cell in cells.items()}


def test_the_issue_68_table_keeps_the_rates_of_the_matrix() -> None:
    from zoo.board.inputs import read_inputs
    from zoo.board.matrix_cells import matrix_cells
    from zoo.matrix.cli import PROTOCOLS

    text = (ROOT / "docs" / "results" / "recall.md").read_text(encoding="utf-8")
    table = text[text.index("### MQAR (256, 16) at width 64: the layers of issue 68") :]
    table = table[table.index(BEGIN) : table.index(END)]
    lines = [line.split("|")[1:5] for line in table.splitlines() if line.startswith("| `")]
    kept = {cells[0].strip().strip("`"): cells[3].strip() for cells in lines}
    matrix = matrix_cells(read_inputs([ROOT / "benchmarks" / "results" / "matrix"]), PROTOCOLS, list(kept))
    assert kept == {row.row.label: row.cells["mqar"].rate for row in matrix.rows}


def test_columns_can_have_their_own_decimals_and_bold(tmp_path: Path) -> None:
    records = [_record("attention=a", seed, value, 1.0) for seed, value in enumerate([31.8, 32.4, 32.0])]
    records += [_record("attention=b", seed, value, 1.0) for seed, value in enumerate([29.4, 30.1, 30.5])]
    spec = (
        "records: bench\nlabels: [attention]\nrows: {attention=b: ['`b`'], attention=a: ['`a`']}\n"
        "columns: {test/accuracy: accuracy, test/loss: loss, paired test/accuracy: against b}\n"
        "baseline: attention=b\ndecimals: {test/accuracy: 2, paired test/accuracy: 1}\nbold_at_least: {test/accuracy: 31}\n"
    )
    page = _page(tmp_path, spec, records)
    rewrite_record_tables(page, tmp_path)
    a, b = [31.8, 32.4, 32.0], [29.4, 30.1, 30.5]
    differences = [x - y for x, y in zip(a, b)]
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    half = 4.302652729911275 * sd / 3**0.5  # t(0.975, 2)
    loss = [1 - value for value in a]  # no decimals named: three, and never bold
    assert _table(page)[2] == [
        "`a`",
        f"**{statistics.fmean(a):.2f} ± {statistics.stdev(a):.2f}**",
        f"{statistics.fmean(loss):.3f} ± {statistics.stdev(loss):.3f}",
        f"{mean:+.1f} [{mean - half:+.1f}, {mean + half:+.1f}]",
    ]
    assert _table(page)[1][1] == f"{statistics.fmean(b):.2f} ± {statistics.stdev(b):.2f}"  # under 31: plain
    page.write_text(page.read_text().replace("{test/accuracy: 2,", "{test/acc: 2,"))
    with pytest.raises(ConfigurationError, match=r"`decimals:` names 'test/acc', not one of the columns"):
        rewrite_record_tables(page, tmp_path)


def test_by_seed_lists_each_seeds_value_and_a_suffix_keeps_some_seeds(tmp_path: Path) -> None:
    a, b = {0: 0.1795, 1: 0.3585, 2: 0.163}, {0: 0.25, 1: 0.125, 2: 0.5}
    times = {0: 7.0, 1: 4.5, 2: 5.25}
    records = [_record("attention=a", seed, value, times[seed]) for seed, value in a.items()]
    records += [_record("attention=b", seed, value, 2 * times[seed]) for seed, value in b.items()]
    spec = (
        "records: bench\nlabels: [attention]\nrows: {attention=b: ['`b`'], attention=a: ['`a`']}\n"
        "columns: {by-seed test/accuracy: seeds 0 / 1 / 2, 'paired test/accuracy @seeds=0': seed 0,"
        " 'fit_seconds @seeds=1,2': fit s, 'seeds @seeds=1,2': timed seeds, 'test/accuracy @seeds=7': none}\n"
        "baseline: attention=b\ndecimals: {by-seed test/accuracy: 4}\n"
    )
    page = _page(tmp_path, spec, records)
    rewrite_record_tables(page, tmp_path)
    assert _table(page)[1:] == [
        ["`b`", "0.2500 / 0.1250 / 0.5000", "", f"{(times[1] + times[2]):.3g}", "2", "-"],
        [
            "`a`",
            "0.1795 / 0.3585 / 0.1630",
            f"{a[0] - b[0]:+.3f} (1 seed)",
            f"{(times[1] + times[2]) / 2:.3g}",
            "2",
            "-",
        ],
    ]


def test_notes_are_label_columns_after_the_records_columns(tmp_path: Path) -> None:
    spec = (
        "records: bench\nlabels: [attention]\nnotes: [paper, 'paper, Table 1']\n"
        "rows: {attention=a: ['`a`', Transformer, '0.3637']}\ncolumns: {test/accuracy: accuracy}\n"
    )
    page = _page(tmp_path, spec, [_record("attention=a", 0, 0.25, 1.0)])
    rewrite_record_tables(page, tmp_path)
    assert _table(page) == [
        ["attention", "accuracy", "paper", "paper, Table 1"],
        ["`a`", "0.250", "Transformer", "0.3637"],
    ]
    page = _page(tmp_path, spec.replace(", '0.3637']", "]"), [])
    with pytest.raises(ConfigurationError, match=r"2 label cells for 3 labels and notes \['attention', 'paper'"):
        rewrite_record_tables(page, tmp_path)
    page = _page(tmp_path, "records: bench\nnotes: [paper]\ncolumns: {test/accuracy: a}\n", [])
    with pytest.raises(ConfigurationError, match="`notes:` columns need `rows:`"):
        rewrite_record_tables(page, tmp_path)


def test_a_column_can_read_another_source_and_pair_the_row_with_it(tmp_path: Path) -> None:
    before = {"a": [1.785, 1.786, 1.786], "b": [1.905, 1.909, 1.907]}
    after = {"a": [1.614, 1.607, 1.612], "b": before["b"]}
    for folder, values in (("first", before), ("bench", after)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "records.jsonl").write_text(
            "".join(
                json.dumps(_record(f"attention={name}", seed, value, 1.0)) + "\n"
                for name, seeds in values.items()
                for seed, value in enumerate(seeds)
            )
        )
    spec = (
        "records: [bench, first]\nlabels: [attention]\nrows: {bench:attention=b: [b], bench:attention=a: [a]}\n"
        "columns: {'first:test/accuracy': first, 'first:paired test/accuracy': first against b,"
        " test/accuracy: now, paired test/accuracy from first: change}\nbaseline: bench:attention=b\n"
    )
    page = tmp_path / "page.md"
    page.write_text(f"{BEGIN}\n{spec}-->\n{END}\n")
    rewrite_record_tables(page, tmp_path)
    t_2 = 4.302652729911275  # t(0.975, 2)

    def paired(x: list[float], y: list[float]) -> str:
        differences = [p - q for p, q in zip(x, y)]
        mean, half = statistics.fmean(differences), t_2 * statistics.stdev(differences) / 3**0.5
        return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"

    def spread(values: list[float]) -> str:
        return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}"

    assert _table(page)[1:] == [
        ["b", spread(before["b"]), "", spread(after["b"]), paired(after["b"], before["b"])],
        [
            "a",
            spread(before["a"]),
            paired(before["a"], before["b"]),
            spread(after["a"]),
            paired(after["a"], before["a"]),
        ],
    ]
    page.write_text(page.read_text().replace("from first", "from firts"))
    with pytest.raises(ConfigurationError, match=r"reads 'firts', not one of the sources \['bench', 'first'\]"):
        rewrite_record_tables(page, tmp_path)


def _attention_bench(path: Path) -> None:
    """A ``zoo bench attention`` result: ``floor`` and ``slow`` at two lengths, ``slow`` out of
    memory at the second."""

    def result(length: int, time: float | None, memory: float) -> dict:
        if time is None:
            return {"length": length, "status": "out of memory"}
        return {"length": length, "status": "ok", "time_ms": {"median": time}, "peak_memory_mib": memory}

    path.write_text(
        json.dumps(
            {
                "benchmark": "attention",
                "environment": {"command": "python -m zoo bench attention --cases floor slow"},
                "config": {"lengths": [1024, 4096], "seed": 0, "batch": 1, "d_model": 8, "heads": 2},
                "cases": [
                    {"name": "floor", "baseline": None, "growth_exponent": 1.5,
                     "results": [result(1024, 10.0, 4.0), result(4096, 80.0, 16.0)]},
                    {"name": "slow", "baseline": "floor", "growth_exponent": None,
                     "results": [result(1024, 25.0, 12.5), result(4096, None, 0.0)]},
                ],
            }
        )
    )  # fmt: skip


def test_a_block_reads_a_bench_result_a_case_a_row(tmp_path: Path) -> None:
    """Times to three significant digits, the time over another case's at one length, the growth
    exponent, and ``-`` where the case did not finish."""
    _attention_bench(tmp_path / "speed.json")
    page = tmp_path / "page.md"
    spec = (
        "records: speed.json\nlabels: [case]\n"
        "columns: {time_ms/1024: 1k ms, time_ms/4096: 4k ms, over_floor/1024: against the floor, "
        "growth_exponent: exponent, peak_memory_mib/1024: MiB}\ndecimals: 2\n"
    )
    page.write_text(f"{BEGIN}\n{spec}-->\n{END}\n")
    assert rewrite_record_tables(page, tmp_path) == (1, True)
    rows = _table(page)
    assert rows == [
        ["case", "1k ms", "4k ms", "against the floor", "exponent", "MiB"],
        ["`floor`", "10.0", "80.0", "1.00", "1.50", "4.00"],
        ["`slow`", "25.0", "-", "2.50", "-", "12.5"],
    ]


def test_a_json_that_is_no_bench_result_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text(json.dumps({"not": "a benchmark"}))
    page = tmp_path / "page.md"
    page.write_text(f"{BEGIN}\nrecords: other.json\ncolumns: {{time_ms/1024: ms}}\n-->\n{END}\n")
    with pytest.raises(ConfigurationError, match="other.json is not a `zoo bench attention`, `state` or `decode`"):
        rewrite_record_tables(page, tmp_path)


def test_a_block_reads_a_state_result_its_cache_and_growth(tmp_path: Path) -> None:
    """A ``zoo bench state`` result: the cache in KiB, and the time and the cache at a length over
    the case's at its first (a growing cache and a fixed state)."""

    def step(length: int, time: float, cache: int) -> dict:
        return {"length": length, "time_ms": {"median": time}, "cache_bytes": cache}

    (tmp_path / "state.json").write_text(
        json.dumps(
            {
                "benchmark": "state",
                "environment": {"command": "python -m zoo bench state --attentions softmax gla"},
                "config": {"lengths": [1024, 4096], "batch": 1, "d_model": 8, "heads": 2},
                "cases": [
                    {"attention": "softmax", "results": [step(1024, 0.5, 2048), step(4096, 2.0, 8192)]},
                    {"attention": "gla", "results": [step(1024, 0.4, 512), step(4096, 0.5, 512)]},
                ],
            }
        )
    )
    page = tmp_path / "page.md"
    spec = (
        "records: state.json\nlabels: [layer]\n"
        "columns: {time_ms/4096: ms, cache_kib/4096: KiB, time_growth/4096: time, cache_growth/4096: cache}\n"
        "decimals: 2\n"
    )
    page.write_text(f"{BEGIN}\n{spec}-->\n{END}\n")
    rewrite_record_tables(page, tmp_path)
    rows = _table(page)
    assert rows[1:] == [["`softmax`", "2.00", "8.00", "4.00", "4.00"], ["`gla`", "0.500", "0.500", "1.25", "1.00"]]


def test_a_block_reads_a_decode_result_a_mode_a_row(tmp_path: Path) -> None:
    """A ``zoo bench decode`` result over key/value head counts: a row a heads-and-mode pair, the
    cache a sentence in KiB, and each mode's sentences a second over the uncached mode's of its heads."""

    def mode(heads: int, name: str, rate: float, cache: int | None) -> dict:
        return {"mode": name, "num_kv_heads": heads, "kv_cache_bytes_per_sentence": cache,
                "sentences_per_second": rate, "tokens_per_second": 30 * rate}  # fmt: skip

    (tmp_path / "decode.json").write_text(
        json.dumps(
            {
                "benchmark": "decode",
                "environment": {"command": "python -m zoo bench decode --num-kv-heads 1 4"},
                "config": {"model": "transformer", "num_kv_heads": [1, 4]},
                "results": [mode(1, "cached", 180.0, 35840), mode(1, "uncached", 24.0, None),
                            mode(4, "cached", 150.0, 143360), mode(4, "uncached", 30.0, None)],
            }
        )
    )  # fmt: skip
    page = tmp_path / "page.md"
    spec = (
        "records: decode.json\nlabels: [heads]\nrows:\n  num_kv_heads=1,mode=cached: ['1']\n"
        "  num_kv_heads=4,mode=cached: ['4']\n  num_kv_heads=4,mode=uncached: ['4, uncached']\n"
        "columns: {cache_kib: KiB, sentences_per_second: sentences/s, over_uncached: speed-up}\ndecimals: 2\n"
    )
    page.write_text(f"{BEGIN}\n{spec}-->\n{END}\n")
    rewrite_record_tables(page, tmp_path)
    rows = _table(page)
    assert rows[1:] == [["1", "35.0", "180", "7.50"], ["4", "140", "150", "5.00"], ["4, uncached", "-", "30.0", "1.00"]]
