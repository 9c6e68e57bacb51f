"""The matrix page and a family page in headless Chromium, opened from disk (``file://``, no
network): no console error, no two pieces of text overlapping on screen, the question of issue 70
answered by sorting and reading the page, and a screenshot of each page kind for docs/board.md
(``docs/board/matrix.png``, ``docs/board/family.png``).

Skipped where Debian's chromium and chromium-driver or selenium are not installed (as
``test_browser.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.board.matrix_records import ANSWER, STATE_BYTES, matrix_site  # noqa: F401 (matrix_site is a fixture)
from tests.helpers import PROJECT_ROOT
from zoo.board.browser import chromium, chromium_paths

pytest.importorskip("selenium", reason="the browser tests drive Chromium through selenium (pip install selenium)")
if chromium_paths() is None:
    pytest.skip(
        "no Chromium: apt-get install chromium chromium-driver (CI's .ci/run installs them)", allow_module_level=True
    )

SCREENSHOTS = PROJECT_ROOT / "docs" / "board"
#: Every non-blank text node's box under <main>, as [left, top, right, bottom], with what it says.
TEXT_BOXES = """
const boxes = [];
const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
const range = document.createRange();
while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.textContent.trim() || node.parentElement.closest("pre, [hidden], script")) { continue; }
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
        if (r.width > 0 && r.height > 0) { boxes.push([r.left, r.top, r.right, r.bottom, node.textContent.trim()]); }
    }
}
return boxes;
"""
#: How far two boxes may run into each other (a line's box includes its leading): one pixel.
TOLERANCE = 1.0


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium(1400, 900) as driver:
        yield driver


def _open(driver, page: Path) -> None:
    driver.get("about:blank")
    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(page.as_uri())


def _no_console_error(driver) -> None:
    severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def _no_overlapping_text(driver) -> None:
    boxes = driver.execute_script(TEXT_BOXES)
    assert len(boxes) > 20
    ordered = sorted(boxes, key=lambda box: box[1])
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if b[1] >= a[3] - TOLERANCE:
                break  # every later box starts below this one
            width = min(a[2], b[2]) - max(a[0], b[0])
            height = min(a[3], b[3]) - max(a[1], b[1])
            assert width <= TOLERANCE or height <= TOLERANCE, f"{a[4]!r} overlaps {b[4]!r}"


def test_the_matrix_page_answers_the_question(browser, matrix_site: Path) -> None:  # noqa: F811
    _open(browser, matrix_site / "index.html")
    browser.find_element("id", "matrix-link").click()
    assert browser.current_url.endswith("/matrix.html")
    _no_console_error(browser)
    _no_overlapping_text(browser)
    browser.find_element("css selector", "th[data-sort='decoding']").click()
    ranked = browser.execute_script(
        """return Array.from(document.querySelectorAll("#matrix tbody tr")).map(row => [
            row.dataset.row,
            row.querySelector("td[data-yardstick='mqar']").dataset.value,
            row.querySelector("td[data-yardstick='decoding']").dataset.value]);"""
    )
    sizes = [float(size) for _, _, size in ranked if size]
    assert sizes == sorted(sizes) and len(sizes) == len(STATE_BYTES), "sorted by state bytes, not-run rows last"
    recalls = [name for name, accuracy, _ in ranked if accuracy and float(accuracy) > 0.9]
    assert recalls[0] == ANSWER
    link = browser.find_element("css selector", f"tr[data-row='{ANSWER}'] td[data-yardstick='decoding'] a")
    assert link.text == f"{STATE_BYTES[ANSWER]:,}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "matrix.png"))


def test_the_family_filter_keeps_one_family(browser, matrix_site: Path) -> None:  # noqa: F811
    _open(browser, matrix_site / "matrix.html")
    browser.execute_script(
        "const s = document.getElementById('family-filter'); s.value = 'softmax';s.dispatchEvent(new Event('change'));"
    )
    families = browser.execute_script(
        "return Array.from(document.querySelectorAll('#matrix tbody tr:not([hidden])')).map(r => r.dataset.family);"
    )
    assert families and set(families) == {"softmax"}
    _no_console_error(browser)


def test_a_family_page_opens_cleanly(browser, matrix_site: Path) -> None:  # noqa: F811
    _open(browser, matrix_site / "families" / f"{ANSWER}.html")
    _no_console_error(browser)
    _no_overlapping_text(browser)
    assert browser.find_element("tag name", "h1").text == ANSWER
    browser.save_screenshot(str(SCREENSHOTS / "family.png"))


def test_the_command_writes_a_picture_of_the_matrix_page(tmp_path: Path) -> None:
    """``zoo board --matrix_screenshot`` (``make board``'s picture for the README): a PNG of the
    matrix page, wide enough for its yardstick columns, once its rows are drawn."""
    from tests.board.matrix_records import write_matrix_records
    from zoo.commands import main

    records = write_matrix_records(tmp_path / "records")
    picture = tmp_path / "matrix.png"
    main(["board", "--records", str(records), "--out", str(tmp_path / "site"), "--matrix_screenshot", str(picture)])
    header = picture.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(header[16:20], "big") == 1800  # the IHDR's width
