# The two commands of the README. Both create .venv if missing and install into it;
# a second run only reinstalls when pyproject.toml changed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.stamp-run
STAMP_TEST := $(VENV)/.stamp-test
PYTEST_ARGS ?=

.PHONY: demo test lint bench bench-full clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@ $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/thrifty demo

test: $(STAMP_TEST)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

# Every benchmark in its quick mode (minutes); bench-full runs the full sizes (hours).
BENCHMARKS := sparse_bench memory_schedule memory_plan numerics_bounds numerics_convert \
	numerics_units pipeline_bounds

bench: $(STAMP_TEST)
	set -e; for b in $(BENCHMARKS); do $(BIN)/python benchmarks/$$b.py --quick; done

bench-full: $(STAMP_TEST)
	$(BIN)/python benchmarks/sparse_bench.py --full
	set -e; for b in $(filter-out sparse_bench,$(BENCHMARKS)); do $(BIN)/python benchmarks/$$b.py; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
