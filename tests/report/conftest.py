"""Fixtures of the report tests: small real results of each command, and the browser."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest


def load_browser_module() -> Any:
    """tests/report/browser.py, shared with tests/studio (loaded once by path)."""
    name = "mosaic_test_browser"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("browser.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def browser() -> Any:
    return load_browser_module()


# A grid small enough to plan in about a second on one core: two ladder seeds, two expert
# counts, K in {1, 2}, G in {1, 2} on 4 p6-b200 nodes for 10 days.
TINY_PLAN_ARGS = ["--q", "8,10", "--experts", "8,16", "--top-k", "1,2", "--split-factor", "1,2",
                  "--nodes", "4", "--days", "10", "--workers", "1"]
