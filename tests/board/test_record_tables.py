"""The results pages' tables of ``zoo compare`` records: rendered by code from the committed
records (so a typed number cannot drift from its measurement), and refused in one line when a
block names what the records do not hold."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from zoo.board.cli import main
from zoo.board.record_tables import BEGIN, END, rewrite_record_tables
from zoo.errors import ConfigurationError

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
