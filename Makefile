# The two commands of the README. Both create .venv if missing and install into it;
# a second run only reinstalls when pyproject.toml changed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.stamp-run
STAMP_TEST := $(VENV)/.stamp-test
PYTEST_ARGS ?=

.PHONY: demo test lint bench bench-full bench-vision test-vision clean

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

# ResNet-50 and ViT-B/16 of benchmarks/memory_torch.py from torchvision and timm. Neither
# imports with the pinned CPU PyTorch of .venv, so they run in a separate environment,
# .venv-vision, with the `vision` extra: torch 2.14.1 and torchvision 0.29.1 (on x86_64 a
# CUDA build of about 5.5 GB, which runs on the CPU), timm. Not part of `make test`; .venv
# keeps its pins.
PY_VISION ?= python3.11
VENV_VISION := .venv-vision
STAMP_VISION := $(VENV_VISION)/.stamp-vision

$(STAMP_VISION): pyproject.toml
	test -x $(VENV_VISION)/bin/python || $(PY_VISION) -m venv $(VENV_VISION)
	$(VENV_VISION)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_VISION)/bin/python -m pip install --quiet -e '.[vision]'
	touch $@

bench-vision: $(STAMP_VISION)
	$(VENV_VISION)/bin/python benchmarks/memory_torch.py --quick --models resnet50 vit_b16 \
		--out benchmarks/results/memory_torch_vision.json

# thrifty.torch's tests on that PyTorch, torchvision's ResNet and timm's ViT included
test-vision: $(STAMP_VISION)
	$(VENV_VISION)/bin/python -m pytest tests/torch $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV_VISION) build *.egg-info src/*.egg-info
