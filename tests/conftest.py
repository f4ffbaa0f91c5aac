"""Fixtures shared across test folders."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _load_once(name: str, path: Path) -> Any:
    """The module at ``path`` (a test helper, a benchmark script), loaded by path once."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def load_by_path() -> Callable[[str, Path], Any]:
    """:func:`_load_once`, for tests that exercise a script outside the package."""
    return _load_once


@pytest.fixture(scope="session")
def browser() -> Any:
    """tests/report/browser.py (Selenium + headless Chromium helpers), loaded once by path
    for the report and studio browser tests."""
    return _load_once("mosaic_test_browser",
                      Path(__file__).resolve().parent / "report" / "browser.py")
