# Two entry points for a fresh machine: `make run` (main job on embedded defaults)
# and `make test` (lint + test suite). Both create the virtual environment they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/mosaic: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/mosaic

.PHONY: install run test bench
install: $(BIN)/mosaic

run: install
	$(BIN)/mosaic plan

test: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest

bench: install
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b; done
