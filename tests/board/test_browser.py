"""The board as a person sees it: headless Chromium opens the built page from disk, sorts a column,
filters by family, follows a cell's link to its run page and reads the numbers there; and the page
of every committed result opens (within a second: ``-m slow``, a timing).

One browser serves the module. Skipped where Debian's chromium and chromium-driver or selenium
are not installed (``.ci/run`` installs them)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.board.conftest import SEEDS, accuracy
from tests.helpers import PROJECT_ROOT
from zoo.board.browser import chromium, chromium_paths
from zoo.board.site import build_site

pytest.importorskip("selenium", reason="the browser tests drive Chromium through selenium (pip install selenium)")
if chromium_paths() is None:
    pytest.skip(
        "no Chromium: apt-get install chromium chromium-driver (CI's .ci/run installs them)", allow_module_level=True
    )

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

#: The main table's headers (the filters' panes are tables too).
HEADERS = "table#board thead th"
#: The target: the page with every committed result drawn within a second of opening it from disk;
#: asserted with 50% slack, as the 2 cores are shared with other work (the times are printed).
LOAD_TARGET_S = 1.0
SLACK = 1.5
DRAWN = """
const done = arguments[arguments.length - 1];
(function poll() {
    if (document.querySelector("table.dataTable tbody tr td")) { done(performance.now()); }
    else { setTimeout(poll, 2); }
})();
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium(1400, 900) as driver:
        driver.set_script_timeout(30)
        yield driver


def _open(driver, page: Path) -> float:
    """Open ``page`` from disk; the milliseconds from navigation until the table's first row is drawn."""
    driver.get("about:blank")
    driver.get(page.as_uri())
    return float(driver.execute_async_script(DRAWN))


def _column(driver, label: str) -> tuple[int, list[str]]:
    """The index of the header ``label`` and the rows' attentions in the order shown."""
    headers = [h.text for h in driver.find_elements(By.CSS_SELECTOR, HEADERS)]
    rows = [
        r.find_element(By.CSS_SELECTOR, "td").text
        for r in driver.find_elements(By.CSS_SELECTOR, "table#board tbody tr")
    ]
    return headers.index(label), rows


def _sort(driver, index: int) -> None:
    """Click the sorting arrows of the ``index``-th header (the header's text is selectable)."""
    header = driver.find_elements(By.CSS_SELECTOR, HEADERS)[index]
    arrows = header.find_element(By.CSS_SELECTOR, "span.dt-column-order")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", arrows)
    arrows.click()


def test_sort_filter_and_follow_a_link_to_the_runs(browser, mqar_site: Path) -> None:
    _open(browser, mqar_site)
    label = "mqar val/accuracy (seq_len=128, d_model=32)"
    index, rows = _column(browser, label)
    by_value = {"dot_product": "dot_product", "retention": "retention", "local+gla": "[local, gla]"}
    means = {row: statistics.fmean(accuracy(by_value[row], 32, 128, s) for s in range(SEEDS)) for row in by_value}

    _sort(browser, index)  # the table opens sorted by another column; one click sorts this one ascending
    _, rows = _column(browser, label)
    assert rows == sorted(means, key=means.get)
    _sort(browser, index)
    _, rows = _column(browser, label)
    assert rows == sorted(means, key=means.get, reverse=True)

    option = browser.find_element(By.CSS_SELECTOR, "div.dtsp-searchPane span.dtsp-name[title='recurrent']")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", option)
    option.click()
    WebDriverWait(browser, 10).until(lambda d: len(_column(d, label)[1]) == 1)
    assert _column(browser, label)[1] == ["retention"]

    row = browser.find_element(By.CSS_SELECTOR, "table#board tbody tr")
    cell = row.find_elements(By.CSS_SELECTOR, "td")[index].find_element(By.TAG_NAME, "a")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", cell)
    shown = cell.text
    cell.click()
    WebDriverWait(browser, 10).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "table.runs")))
    assert "retention" in browser.find_element(By.TAG_NAME, "h1").text
    summary = browser.find_element(By.CSS_SELECTOR, "tr[id='val-accuracy'] td.value").text
    assert summary == shown, "the run page's summary is the cell's"
    runs = browser.find_elements(By.CSS_SELECTOR, "table.runs tr.run")
    seeds = {int(r.find_elements(By.TAG_NAME, "td")[0].text): r for r in runs}
    assert sorted(seeds) == list(range(SEEDS))
    headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "table.runs th")]
    column = headers.index("val/accuracy")
    for seed, run in seeds.items():
        value = float(run.find_elements(By.TAG_NAME, "td")[column].text)
        assert value == pytest.approx(accuracy("retention", 32, 128, seed), abs=1e-6)
    commands = [pre.text for pre in browser.find_elements(By.CSS_SELECTOR, "pre.command")]
    assert any(
        "--model.attention=retention --model.d_model=32 --data.seq_len=128 --seed_everything=1" in c for c in commands
    )


@pytest.fixture(scope="module")
def committed_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The board built from every committed result."""
    return build_site([PROJECT_ROOT / "benchmarks" / "results"], tmp_path_factory.mktemp("committed")).index


def test_the_page_of_every_committed_result_opens_and_draws_its_table(browser, committed_index: Path) -> None:
    _open(browser, committed_index)
    rows = browser.find_elements(By.CSS_SELECTOR, "table#board tbody tr")
    assert len(rows) > 20


@pytest.mark.slow
def test_the_page_of_every_committed_result_opens_in_under_a_second(
    browser, committed_index: Path, record_property
) -> None:
    """From navigation until the table is drawn, best of three, asserted with :data:`SLACK`; all
    three are printed and recorded. A timing, so outside the default run (``-m slow``, alone on
    the machine): beside the suite's other worker it read 1.74 s where alone it reads 1.0 s."""
    loads = [_open(browser, committed_index) / 1000 for _ in range(3)]
    record_property("board_load_s", [round(s, 3) for s in loads])
    print(f"board from the committed results: drawn in {', '.join(f'{s:.3f}' for s in loads)} s")
    assert min(loads) < LOAD_TARGET_S * SLACK
