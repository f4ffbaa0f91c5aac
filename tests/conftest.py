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


@pytest.fixture
def offload_job(tmp_path: Path) -> Callable[[str], Path]:
    """A job file: Llama-3-8B on one node of ``system`` (8 GPUs, data parallel with ZeRO-1,
    micro-batch 2 x 8192 tokens), Megatron-Core, 20 of its 32 layers' activations offloaded
    to host memory (the explain and export tests of activation offload)."""
    def write(system: str) -> Path:
        path = tmp_path / f"offload_{system}.yaml"
        path.write_text(
            "model: {layers: 32, d_model: 4096, heads: 32, kv_heads: 8, head_dim: 128, "
            "ffn: 14336, vocab: 128256, activation: swiglu, norm: rmsnorm}\n"
            "parallelism: {tp: 1, pp: 1, dp: 8}\n"
            "batch: {global_seqs: 64, micro_seqs: 2, seq_len: 8192}\n"
            "performance: {checkpointing: none, stack: megatron-core, "
            "offloaded_activation_layers: 20}\n"
            f"hardware: {{system: {system}, nodes: 1}}\n")
        return path
    return write
