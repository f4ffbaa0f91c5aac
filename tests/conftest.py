"""Fixtures shared across test folders."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def browser() -> Any:
    """tests/report/browser.py (Selenium + headless Chromium helpers), loaded once by path
    for the report and studio browser tests."""
    name = "mosaic_test_browser"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent / "report" / "browser.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
