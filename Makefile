# Two entry points for a fresh machine: `make run` (main job on embedded defaults)
# and `make test` (lint + test suite). Both create the virtual environment they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The tests use torch on CPU. TORCH pins the version only: which build pip installs depends on
# where it looks. PyPI's Linux x86-64 torch wheel is the multi-GB CUDA build; for the CPU build
# name PyTorch's CPU wheel index (its "Get started" page), e.g.
# `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu`: torch==2.13.0 then also matches
# 2.13.0+cpu, which pip prefers (PEP 440 local versions). Empty: pip's own configuration.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

$(BIN)/mosaic: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/mosaic

# Everything the full test suite exercises: trainer, bench, report, studio, Ray, browser driver.
$(VENV)/.test-extras: $(BIN)/mosaic pyproject.toml
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--extra-index-url '$(TORCH_INDEX)') '$(TORCH)' \
		-e '.[dev,all,browser-tests]'
	touch $(VENV)/.test-extras

.PHONY: install install-test run test test-fast bench
install: $(BIN)/mosaic

install-test: $(VENV)/.test-extras

run: install
	$(BIN)/mosaic plan --calibration paper-p6b200 --versus default

test: install-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest

test-fast: install-test
	$(BIN)/pytest -m "not slow"

bench: install
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b; done
