"""Derived constants of the analytical kernel and collective models, with provenance.

The values live in ``data/microbench_fits.yaml``; every entry carries a ``value`` and a
``source`` (datasheet, public code, or the microbenchmark table and fit it comes from).
``benchmarks/fit_microbench_constants.py`` re-derives the fitted ones and
``benchmarks/bench_kernel_accuracy.py`` reports the models' error against the tables.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

_FILE = "microbench_fits.yaml"


@cache
def _entries() -> dict[str, dict[str, Any]]:
    text = resources.files("mosaic.perf").joinpath("data", _FILE).read_text()
    return yaml.safe_load(text)


def fitted(section: str, name: str) -> Any:
    """The ``value`` of entry ``name`` in ``section`` of the constants file."""
    return _entries()[section][name]["value"]


def fitted_source(section: str, name: str) -> str:
    """Where entry ``name`` of ``section`` comes from (for reports and explanations)."""
    return _entries()[section][name]["source"]
