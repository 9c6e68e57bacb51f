"""Headless Chromium for the board: a screenshot of a page's top, and how long a page takes to
open from disk. Used by ``zoo board --screenshot`` and by the browser tests.

Chromium and its driver come from the distribution (Debian's ``chromium`` and
``chromium-driver``: ``/usr/bin/chromium``, ``/usr/bin/chromedriver``), driven by Selenium with
that driver given explicitly, so Selenium never fetches a browser or a driver. The flags are those
a root user in a container needs, with the background services off (no network is reached).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.errors import ConfigurationError

__all__ = ["CHROMIUM_FLAGS", "chromium", "chromium_paths", "screenshot"]

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium_paths() -> tuple[str, str] | None:
    """``(browser, driver)`` where both are installed, else None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A Selenium driver of headless Chromium with a fresh profile, quit on exit."""
    paths = chromium_paths()
    if paths is None:
        raise ConfigurationError(
            "No Chromium here: install the distribution's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver)."
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as error:
        raise ConfigurationError("The browser needs selenium: pip install selenium.") from error
    profile = tempfile.mkdtemp(prefix="zoo-board-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(
    page: Path, target: Path, ready: str = "table.dataTable tbody tr", width: int = 1400, height: int = 800
) -> Path:
    """A PNG of the top of ``page`` (opened from disk) once an element ``ready`` (a CSS selector:
    by default a row of a DataTables table) has been drawn."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium(width, height) as driver:
        driver.get(page.resolve().as_uri())
        WebDriverWait(driver, 30).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ready)))
        target.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(target))
    return target
