"""A real headless browser for page tests: Debian's `chromium` driven by its own `chromedriver`
(both installed by `make browser`). Nothing is downloaded; a missing browser fails loudly."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def browser_paths() -> tuple[str, str]:
    """The system chromium and chromedriver, or an error saying how to install them.

    Returns:
        (chromium binary, chromedriver binary).
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        raise RuntimeError(
            "page tests need Debian's chromium and chromium-driver: run `make browser`"
        )
    return chromium, driver


@contextmanager
def headless_chromium(width: int = 1280, height: int = 900) -> Iterator:
    """A Selenium WebDriver on headless chromium that records the page's console errors.

    Args:
        width, height: window size in CSS pixels (screenshots have this size).

    Yields:
        The driver; `console_errors(driver)` lists the page's severe console entries.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """Severe entries of the browser console since the last call (script errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, path: Path) -> Path:
    """Save a PNG of the current page to `path` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path
