"""Headless Chromium for the report and studio tests (Selenium + Debian's chromium).

Without the browser the tests skip with a message, except under CI (env CI set), where
they fail: .ci/run installs ``chromium`` and ``chromium-driver``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
MISSING = ("headless Chromium and chromedriver are needed for the browser tests "
           "(Debian: apt-get install chromium chromium-driver; pip install mosaic[browser-tests])")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


def find_browser() -> tuple[str, str]:
    """(browser binary, chromedriver) or skip/fail."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        _unavailable(f"selenium is not installed: {MISSING}")
    browser = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        _unavailable(MISSING)
    return browser, driver


def artifacts_dir() -> Path:
    """Where screenshots go: $MOSAIC_TEST_ARTIFACTS, else a temporary folder."""
    path = Path(os.environ.get("MOSAIC_TEST_ARTIFACTS")
                or Path(tempfile.gettempdir()) / "mosaic-browser-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def start_driver(offline: bool = False, height: int = 1100) -> Any:
    """A headless Chromium session that records console messages.

    ``offline``: every network request goes to a dead proxy (port 9, discard), so a page
    that needs the network shows errors; file:// pages are not affected.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", f"--window-size=1400,{height}"):
        options.add_argument(argument)
    if offline:
        options.add_argument("--proxy-server=http://127.0.0.1:9")
    # Chromium's console log, read with driver.get_log("browser") (ChromeDriver capability).
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """SEVERE entries of the browser console since the last call."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "") -> Any:
    """Poll ``condition`` until it returns a truthy value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except Exception as exc:  # element not there yet, stale element, ...
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def rendered_figures(driver: Any) -> tuple[int, int]:
    """(figure containers, plotly plots that drew a trace with a visible path) on the
    current page."""
    return driver.execute_script(
        "var holders = document.querySelectorAll('[data-figure]');"
        "var drawn = 0; holders.forEach(function (h) {"
        "  var paths = h.querySelectorAll('.js-plotly-plot .main-svg .trace path');"
        "  if (Array.prototype.some.call(paths, function (p) {"
        "        var d = p.getAttribute('d'); return d && d.length > 2; })) { drawn += 1; } });"
        "return [holders.length, drawn];")


def figures_drawn(driver: Any) -> tuple[int, int] | None:
    """:func:`rendered_figures` once the page holds figures and every one has drawn, else
    None (a page still loading holds none yet: zero of zero is not done)."""
    holders, drawn = rendered_figures(driver)
    return (holders, drawn) if holders > 0 and drawn == holders else None


def screenshot(driver: Any, name: str) -> Path:
    path = artifacts_dir() / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
